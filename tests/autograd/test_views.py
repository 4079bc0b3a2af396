"""Views of a base that is written in place later see the writes with their graph, as in
PyTorch: the view's ``grad_fn`` is regenerated from the base's current one before the view is
used. References are finite differences of the same code and hand-computed gradients."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd import Function


def _fd(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar ``f`` (a function of a float64 array)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def _fill_rows(x: mg.Tensor) -> mg.Tensor:
    out = mg.zeros(2, 2, dtype=x.dtype)
    row0 = out[0]  # taken before the writes
    out[0] = x[0] * 2
    out[1] = x[1] * 5
    return row0.sum() + out.sum()


def test_a_row_view_taken_before_the_buffer_is_filled_sees_the_writes():
    x = mg.ones(2, 2, dtype=mg.float64, requires_grad=True)
    _fill_rows(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[4.0, 4.0], [5.0, 5.0]])  # PyTorch's answer
    fd = _fd(lambda a: _fill_rows(mg.tensor(a)).item(), np.ones((2, 2)))
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6)


def test_a_view_of_a_buffer_that_did_not_require_grad_follows_an_add_():
    w = mg.ones(3, dtype=mg.float64, requires_grad=True)
    buf = mg.zeros(3, dtype=mg.float64)
    v = buf[:]
    buf.add_(w * 3)
    (v.sum() + buf.sum()).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [6.0, 6.0, 6.0])


def test_views_of_views_replay_the_whole_chain():
    x = mg.tensor(np.arange(6.0), requires_grad=True)
    buf = mg.zeros(2, 3, dtype=mg.float64)
    v = buf.transpose(0, 1)[1:][:, 0]  # three view ops from the base
    buf.copy_(x.reshape(2, 3) ** 2)
    (v * mg.tensor([1.0, 2.0])).sum().backward()
    # v = [buf[0, 1], buf[0, 2]] = [x[1] ** 2, x[2] ** 2]
    want = np.zeros(6)
    for k, i in enumerate([1, 2]):
        want[i] = 2 * x.numpy()[i] * (k + 1)
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_a_stale_view_as_a_backward_root():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    v = h[1:]
    h.mul_(3)
    v.backward(mg.ones(1))
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 3.0])


def test_a_view_used_under_no_grad_keeps_its_graph_for_later():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    buf = mg.zeros(2)
    v = buf[:]
    buf.add_(x)
    with mg.no_grad():
        _ = v * 2  # no graph is made here, and the view is not marked as current
    (v * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_a_custom_function_sees_the_current_graph_of_a_view():
    class Double(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = mg.tensor([1.0, 2.0], requires_grad=True)
    buf = mg.zeros(2)
    v = buf[0:1]
    buf.add_(x * 5)
    Double.apply(v).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 0.0])


def _through_views(x: mg.Tensor) -> mg.Tensor:
    h = x * 1.0
    side = h[1]  # a sibling view, taken before the writes
    h[0].mul_(3)  # in place through a view: the base gets the graph of the write
    h.transpose(0, 1)[2].add_(x[:, 0] ** 2)  # a view of a view
    buf = mg.zeros(2, 3, dtype=x.dtype)
    buf[1].copy_(h[0])  # a buffer that did not require grad, written through a view
    return (h ** 2).sum() + (side * buf[1]).sum() + buf.sum()


def test_in_place_changes_through_views_give_the_gradient_of_the_same_code():
    x = mg.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    _through_views(x).backward()
    fd = _fd(lambda a: _through_views(mg.tensor(a)).item(), np.arange(1.0, 7.0).reshape(2, 3))
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6)


def test_in_place_change_through_a_view_of_a_leaf_that_requires_grad_is_refused():
    x = mg.ones(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        x[0].mul_(2)
