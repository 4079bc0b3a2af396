"""EmbeddingBag and F.embedding_bag against a loop over the bags in NumPy: the three modes,
1-D input with offsets (and include_last_offset), 2-D input, padding_idx, per_sample_weights,
empty bags, gradients by gradcheck, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg

F = mg.nn.functional
RNG = np.random.default_rng(11)
W = RNG.normal(size=(6, 3))


def reference(idx, w, bounds, mode, psw=None, padding_idx=None):
    """One bag at a time: the rows of w at the bag's indices, padding left out."""
    out = np.zeros((len(bounds), w.shape[1]))
    for b, (lo, hi) in enumerate(bounds):
        keep = [i for i in range(lo, hi) if idx[i] != padding_idx]
        if not keep:
            continue
        rows = w[idx[keep]] * (psw[keep][:, None] if psw is not None else 1.0)
        out[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
    return out


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_one_d_input_with_offsets_and_an_empty_bag(mode):
    idx = np.array([1, 4, 4, 0, 5, 2, 3])
    offsets = np.array([0, 2, 2, 5])  # bag 1 is empty
    bounds = [(0, 2), (2, 2), (2, 5), (5, 7)]
    got = F.embedding_bag(mg.tensor(idx), mg.tensor(W), mg.tensor(offsets), mode=mode)
    np.testing.assert_allclose(got.numpy(), reference(idx, W, bounds, mode), atol=1e-12)
    last = F.embedding_bag(mg.tensor(idx), mg.tensor(W), mg.tensor(np.append(offsets, 7)),
                           mode=mode, include_last_offset=True)
    np.testing.assert_allclose(last.numpy(), got.numpy())


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_two_d_input_and_padding_idx(mode):
    idx = np.array([[1, 2, 2], [0, 0, 0], [5, 0, 3]])
    bounds = [(0, 3), (3, 6), (6, 9)]
    got = F.embedding_bag(mg.tensor(idx), mg.tensor(W), mode=mode, padding_idx=0)
    np.testing.assert_allclose(got.numpy(), reference(idx.reshape(-1), W, bounds, mode,
                                                      padding_idx=0), atol=1e-12)
    assert not got.numpy()[1].any()  # every index padding: an empty bag


def test_per_sample_weights_scale_each_row_of_a_sum():
    idx, offsets = np.array([3, 1, 1, 2]), np.array([0, 1])
    psw = np.array([0.5, -2.0, 1.5, 3.0])
    got = F.embedding_bag(mg.tensor(idx), mg.tensor(W), mg.tensor(offsets), mode="sum",
                          per_sample_weights=mg.tensor(psw))
    np.testing.assert_allclose(got.numpy(), reference(idx, W, [(0, 1), (1, 4)], "sum", psw))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_gradients_of_weight_and_per_sample_weights(mode):
    idx, offsets = mg.tensor([1, 4, 2, 0, 5, 2]), mg.tensor([0, 2, 2, 4])
    w = mg.tensor(W, requires_grad=True)  # distinct values: no ties for max
    if mode == "sum":
        psw = mg.tensor(RNG.normal(size=6), requires_grad=True)
        assert mg.autograd.gradcheck(
            lambda w, p: F.embedding_bag(idx, w, offsets, mode="sum", per_sample_weights=p,
                                         padding_idx=2), (w, psw))
    else:
        assert mg.autograd.gradcheck(
            lambda w: F.embedding_bag(idx, w, offsets, mode=mode, padding_idx=2), (w,))


def test_max_sends_each_elements_gradient_to_its_first_maximum():
    w = mg.tensor([[1.0, 5.0], [1.0, 2.0], [0.0, 5.0]], requires_grad=True)
    F.embedding_bag(mg.tensor([[0, 1, 2]]), w, mode="max").sum().backward()
    assert w.grad.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]


def test_module_draws_normal_rows_zeroes_the_padding_row_and_takes_its_options():
    mg.manual_seed(0)
    bag = mg.nn.EmbeddingBag(500, 8, mode="sum", padding_idx=-1, include_last_offset=True)
    assert bag.padding_idx == 499 and not bag.weight.numpy()[499].any()
    assert abs(bag.weight.numpy()[:499].std() - 1.0) < 0.05
    idx, offsets = mg.tensor([3, 499, 7]), mg.tensor([0, 1, 3])
    out = bag(idx, offsets)
    w = bag.weight.numpy()
    np.testing.assert_allclose(out.numpy(), [w[3], w[7]], rtol=1e-6)
    assert repr(bag) == ("EmbeddingBag(500, 8, mode='sum', include_last_offset=True, "
                         "padding_idx=499)")
    psw = mg.tensor([2.0, 1.0, 1.0])
    np.testing.assert_allclose(bag(idx, offsets, psw).numpy(), [2 * w[3], w[7]], rtol=1e-6)


def test_errors_name_the_function_and_the_fix():
    w, idx = mg.tensor(W), mg.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="offsets\\[0\\] must be 0"):
        F.embedding_bag(idx, w, mg.tensor([1]))
    with pytest.raises(ValueError, match="non-decreasing and at most the input's length 3"):
        F.embedding_bag(idx, w, mg.tensor([0, 5]))
    with pytest.raises(ValueError, match="a 1-D input needs offsets"):
        F.embedding_bag(idx, w)
    with pytest.raises(ValueError, match="a 2-D input is a batch of bags"):
        F.embedding_bag(mg.tensor([[1, 2]]), w, mg.tensor([0]))
    with pytest.raises(ValueError, match="include_last_offset=True the last offset"):
        F.embedding_bag(idx, w, mg.tensor([0, 1]), include_last_offset=True)
    with pytest.raises(NotImplementedError, match="per_sample_weights is supported with "
                                                  "mode='sum' only"):
        F.embedding_bag(idx, w, mg.tensor([0]), per_sample_weights=mg.ones(3))
    with pytest.raises(ValueError, match=r"per_sample_weights must be a tensor of the input's "
                                         r"shape \(3,\)"):
        F.embedding_bag(idx, w, mg.tensor([0]), mode="sum", per_sample_weights=mg.ones(2))
    with pytest.raises(TypeError, match="per_sample_weights must have weight's dtype float64"):
        F.embedding_bag(idx, w, mg.tensor([0]), mode="sum", per_sample_weights=mg.ones(3))
    with pytest.raises(ValueError, match="mode must be one of"):
        F.embedding_bag(idx, w, mg.tensor([0]), mode="min")
    with pytest.raises(TypeError, match="input must hold integers"):
        F.embedding_bag(mg.tensor([1.0]), w, mg.tensor([0]))
    with pytest.raises(IndexError, match="index 9 is out of range"):
        F.embedding_bag(mg.tensor([9]), w, mg.tensor([0]))
    with pytest.raises(NotImplementedError, match="max_norm=1.0 is not supported"):
        mg.nn.EmbeddingBag(4, 2, max_norm=1.0)
    with pytest.raises(NotImplementedError, match="sparse=True is not supported"):
        F.embedding_bag(idx, w, mg.tensor([0]), sparse=True)
