"""Tensor.view: a view exactly when NumPy can reshape without copying, on every supported NumPy."""

import numpy as np
import pytest

import memgrad as mg


def test_view_of_a_strided_tensor_that_allows_one_shares_memory():
    a = np.arange(24.0).reshape(4, 6)
    t = mg.tensor(a)[:, :3]                      # strides (48, 8): rows split, columns kept
    v = t.view(2, 2, 3)
    assert np.shares_memory(v.numpy(), t.numpy())
    np.testing.assert_array_equal(v.numpy(), a[:, :3].reshape(2, 2, 3))


def test_view_of_a_strided_tensor_that_needs_a_copy_is_refused():
    a = np.arange(24.0).reshape(4, 6)
    t = mg.tensor(a)[:, :3]
    with pytest.raises(RuntimeError, match=r"view: .*\(4, 3\).*\(12,\).*reshape"):
        t.view(12)
    np.testing.assert_array_equal(t.reshape(12).numpy(), a[:, :3].ravel())  # the suggested fix


def test_view_of_an_empty_tensor_always_succeeds():
    t = mg.zeros(0, 3).T                         # non-contiguous, but there is no data to copy
    assert t.view(3, 0, 1).shape == (3, 0, 1)
    assert t.view(-1).shape == (0,)


def test_view_gradient_flows_back_in_the_original_shape():
    x = mg.tensor(np.arange(6.0), requires_grad=True)
    (x.view(2, 3) * mg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(1.0, 7.0))
