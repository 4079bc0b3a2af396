"""Reductions along a dimension of size 0 give what PyTorch gives (an empty result, or a
clear error where PyTorch raises), not NumPy internals."""

import numpy as np
import pytest

import memgrad as mg

F = mg.nn.functional


@pytest.mark.parametrize("fn", [
    lambda x: x.softmax(1), lambda x: x.log_softmax(1), lambda x: F.layer_norm(x, 0),
    lambda x: F.layer_norm(x, 0, mg.ones(0), mg.zeros(0)),
], ids=["softmax", "log_softmax", "layer_norm", "layer_norm-affine"])
def test_row_ops_over_a_size_zero_dim_give_the_empty_result_and_gradient(fn):
    x = mg.zeros(2, 0, requires_grad=True)
    out = fn(x)
    assert out.shape == (2, 0)
    out.sum().backward()
    assert x.grad.shape == (2, 0)


def test_row_ops_with_no_rows():
    x = mg.zeros(0, 3, requires_grad=True)
    (F.layer_norm(x, 3).sum() + x.softmax(1).sum()).backward()
    assert x.grad.shape == (0, 3)


def test_logsumexp_of_nothing_is_minus_infinity():
    with np.errstate(divide="ignore"):
        out = mg.zeros(2, 0).logsumexp(1)
    np.testing.assert_array_equal(out.numpy(), [-np.inf, -np.inf])


def test_max_over_a_size_zero_dim_raises_naming_it():
    with pytest.raises(IndexError, match=r"max\(\): cannot reduce over dimension 1 of size 0"):
        mg.zeros(2, 0).max(dim=1)


@pytest.mark.parametrize("shape", [(0, 3), (4, 3), (0,)])
def test_indexing_with_an_empty_index_array_gives_zero_gradients(shape):
    x = mg.randn(*shape, requires_grad=True)
    rows = mg.tensor(np.array([], dtype=np.int64))
    out = x[rows]
    assert out.shape == (0, *shape[1:])
    (out * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(shape, dtype=np.float32))
