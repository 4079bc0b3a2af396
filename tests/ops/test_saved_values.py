"""Values an op keeps for backward that are not the usual saved tensors (index arrays of
advanced indexing, loss targets, the indices of ``max(dim)``, arrays passed as constants)
are either privately copied or version-checked: a change to them between forward and
backward never moves the gradient. The reference is the same computation with no change."""

import numpy as np
import pytest

import memgrad as mg

F = mg.nn.functional
INPLACE = "modified by an inplace operation"


def _x(*shape):
    return mg.tensor(np.random.default_rng(0).standard_normal(shape), requires_grad=True)


def test_integer_index_changed_after_forward_does_not_move_the_gradient():
    x = _x(5, 3)
    idx = mg.tensor([0, 1, 1])
    y = x[idx]
    idx.add_(2)
    (y * mg.tensor([1.0, 2.0, 3.0])[:, None]).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy().sum(1), [3.0, 15.0, 0.0, 0.0, 0.0])


def test_bool_mask_changed_after_forward_does_not_move_the_gradient():
    x = _x(3, 2)
    m = mg.tensor([True, False, True])
    y = x[m]
    m.numpy()[:] = [False, True, True]  # behind memgrad's back, not even a version bump
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy().sum(1), [2.0, 0.0, 2.0])


def test_setitem_index_changed_after_forward_does_not_move_the_gradient():
    x = _x(4)
    v = mg.tensor([7.0, 8.0], dtype=mg.float64, requires_grad=True)
    idx = mg.tensor([0, 2])
    h = x * 1.0
    h[idx] = v
    idx.add_(1)
    (h * mg.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 2.0, 0.0, 4.0])
    np.testing.assert_array_equal(v.grad.numpy(), [1.0, 3.0])


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_target_changed_in_place_after_forward_raises(loss):
    x = _x(4, 3)
    t = mg.tensor([0, 1, 2, 0])
    out = getattr(F, loss)(x.log_softmax(1) if loss == "nll_loss" else x, t)
    t.add_(1)
    with pytest.raises(RuntimeError, match=INPLACE):
        out.backward()


def test_target_given_as_an_array_is_copied():
    x = _x(4, 3)
    t = np.array([0, 1, 2, 0])
    out = F.cross_entropy(x, t)
    t[:] = 2
    out.backward()
    ref = _x(4, 3)
    F.cross_entropy(ref, np.array([0, 1, 2, 0])).backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref.grad.numpy())


def test_array_constant_changed_after_forward_does_not_change_the_gradient():
    x = _x(3)
    c = np.array([1.0, 2.0, 3.0])
    y = x * c
    c *= 10
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])


def test_embedding_indices_given_as_an_array_are_copied():
    w = _x(4, 2)
    idx = np.array([3, 3, 0])
    y = F.embedding(idx, w)
    idx[:] = 1
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy().sum(1), [2.0, 0.0, 0.0, 4.0])


def test_max_dim_keeps_indices_so_the_input_may_change_in_place():
    x = _x(3, 4)
    h = x * 1.0
    values, indices = h.max(dim=1)
    want = np.zeros((3, 4))
    want[np.arange(3), indices.numpy()] = 1.0
    h.mul_(2)  # legal in PyTorch: max(dim) saves the indices, not the input
    values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_max_dim_indices_changed_in_place_raise():
    x = _x(3, 4)
    values, indices = x.max(dim=1)
    indices.add_(1)
    with pytest.raises(RuntimeError, match=INPLACE):
        values.sum().backward()


def test_cross_entropy_keeps_its_log_probabilities_so_the_logits_may_change():
    x = _x(3, 4)
    t = mg.tensor([0, 3, 1])
    h = x * 1.0
    loss = F.cross_entropy(h, t)
    h.mul_(2)  # legal in PyTorch: log_softmax saves its output, not the logits
    loss.backward()
    ref = _x(3, 4)
    F.cross_entropy(ref * 1.0, t).backward()
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-12)
