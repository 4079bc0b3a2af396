"""No op reads or writes out of bounds: an index or target outside its range raises an
IndexError that names the op, the bad value and the valid range, in forward, in backward
after an in-place change, and when a backward primitive is called directly. The kernels
check again themselves (tests/_kernels), so this holds with and without the JIT."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.ops import REGISTRY

F = mg.nn.functional


def _x(*shape):
    return mg.tensor(np.random.default_rng(0).standard_normal(shape), requires_grad=True)


@pytest.mark.parametrize("bad", [5, -6, 2**40])
def test_index_scatter_checks_its_row_indices(bad):
    g = mg.ones(2, 3)
    with pytest.raises(IndexError, match=rf"index_scatter: index {bad} is out of bounds .*"
                                         r"size 5 \(valid: -5 to 4\)"):
        REGISTRY["index_scatter"](g, shape=(5, 3), index=(np.array([0, bad]), Ellipsis))


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("bad", [3, -1, 10**9])
def test_losses_check_targets(loss, bad):
    with pytest.raises(IndexError, match=rf"{loss}: target {bad} is out of bounds for 3 "
                                         r"classes \(valid: 0 to 2"):
        getattr(F, loss)(_x(2, 3), mg.tensor([0, bad]))


def test_nll_primitive_called_directly_checks_targets():
    with pytest.raises(IndexError, match="out of range"):
        REGISTRY["nll_loss"](_x(2, 3), mg.tensor([0, 7]), ignore_index=-100, label_smoothing=0.0)
    with pytest.raises(IndexError, match="out of range"):
        REGISTRY["nll_loss_backward"](mg.ones(2), mg.tensor([0, 7]), classes=3, ignore_index=-100,
                                      label_smoothing=0.0)


def test_target_changed_out_of_range_before_backward_raises_not_crashes():
    x = _x(2, 3)
    t = mg.tensor([0, 1])
    loss = F.cross_entropy(x, t)
    t.add_(100)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("bad", [4, -1])
def test_gather_and_scatter_add_check_their_indices(bad):
    with pytest.raises(IndexError, match=rf"gather: index {bad} is out of bounds for dimension 1 "
                                         r"with size 4 \(valid: 0 to 3\)"):
        mg.gather(_x(2, 4), 1, mg.tensor([[0], [bad]]))
    with pytest.raises(IndexError, match=rf"scatter_add: index {bad} is out of bounds"):
        mg.scatter_add(mg.zeros(2, 4), 1, mg.tensor([[0], [bad]]), mg.ones(2, 1))
    with pytest.raises(IndexError, match=rf"gather_backward: index {bad} is out of bounds"):
        REGISTRY["gather_backward"](mg.ones(2, 1), mg.tensor([[0], [bad]]), dim=1, shape=(2, 4))


def test_embedding_checks_indices():
    with pytest.raises(IndexError, match=r"embedding: index 6 is out of range .*0 to 5"):
        F.embedding(mg.tensor([1, 6]), _x(6, 2))


@pytest.mark.parametrize("bad", [-2, 9])
def test_max_pool2d_backward_checks_its_indices(bad):
    from memgrad.ops.conv import max_pool2d_backward

    with pytest.raises(IndexError, match=rf"max_pool2d_backward: index {bad} is out of range "
                                         r"for an input plane of 3 x 3"):
        max_pool2d_backward(mg.ones(1, 1, 1, 2), mg.tensor([[[[0, bad]]]]),
                            input_shape=(1, 1, 3, 3))


def test_advanced_indexing_out_of_range_is_an_index_error_naming_the_op():
    with pytest.raises(IndexError, match="getitem"):
        _x(3, 2)[mg.tensor([0, 3])]
