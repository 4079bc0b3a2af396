"""Version counters, in-place ops under autograd, views, and saved-tensor hooks."""

import threading

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd.graph import saved_tensors_hooks
from memgrad.autograd.saved import HookedSaved


def f64(*shape, seed=0, requires_grad=True):
    data = np.random.default_rng(seed).standard_normal(shape)
    return mg.tensor(data, requires_grad=requires_grad)


# ---------------------------------------------------------------------------- versions


def test_inplace_ops_bump_version_and_share_it_with_views():
    t = mg.zeros(2, 3)
    v = t[0]
    d = t.detach()
    assert t._version == 0
    t.add_(1.0)
    t.mul_(2.0)
    assert t._version == 2 and v._version == 2 and d._version == 2
    v.zero_()
    assert t._version == 3
    np.testing.assert_array_equal(t.numpy(), [[0, 0, 0], [2, 2, 2]])
    t[1, 1] = 7.0
    assert t._version == 4 and t.numpy()[1, 1] == 7.0


def test_modified_saved_input_raises_naming_op_shape_and_versions():
    x = f64(2, 3)
    h = x * 1.0
    y = h.exp()  # exp saves its output
    z = h * h  # mul saves h
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
        z.sum().backward()
    msg = str(info.value)
    assert "MulBackward" in msg and "(2, 3)" in msg and "version 1" in msg and "version 0" in msg
    y.sum().backward()  # exp saved its own output, which was not changed


def test_modified_saved_output_raises():
    x = f64(3)
    y = x.exp()
    z = y * 1.0
    with mg.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_modified_saved_leaf_raises():
    w = f64(3)
    x = f64(3, seed=1)
    y = (x * w).sum()
    with mg.no_grad():
        w.sub_(0.1)
    with pytest.raises(RuntimeError, match="saved by MulBackward"):
        y.backward()


# ---------------------------------------------------------------------------- in-place + autograd


def test_inplace_on_leaf_requiring_grad_raises_but_is_fine_under_no_grad():
    w = f64(3)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.add_(1.0)
    before = w.numpy().copy()
    with mg.no_grad():
        w.sub_(1.0)
    np.testing.assert_allclose(w.numpy(), before - 1.0)


def test_inplace_on_non_leaf_is_differentiable():
    x = f64(3)
    h = x * 2.0
    h.mul_(3.0)
    h.add_(x)
    assert h.grad_fn.name() == "AddBackward"
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 7.0))


def test_inplace_relu_and_clamp_gradients():
    x = mg.tensor([-1.0, 0.5, 2.0], dtype=mg.float64, requires_grad=True)
    h = x * 1.0
    h.relu_()
    h.clamp_(max=1.0)
    h.sum().backward()
    np.testing.assert_allclose(h.numpy(), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1.0, 0.0])


def test_inplace_with_other_requiring_grad_rebases_plain_tensor():
    w = f64(3)
    buf = mg.zeros(3, dtype=mg.float64)
    buf.add_(w * 2.0)
    assert buf.requires_grad and not buf.is_leaf
    (buf * buf).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 8 * w.numpy())


def test_setitem_is_differentiable():
    x = f64(4)
    v = f64(2, seed=1)
    h = x * 1.0
    h[1:3] = v * 10.0
    (h * mg.tensor([1.0, 2.0, 3.0, 4.0], dtype=mg.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 0.0, 4.0])
    np.testing.assert_allclose(v.grad.numpy(), [20.0, 30.0])


def test_setitem_advanced_index_and_broadcast_value():
    x = f64(3, 2)
    v = mg.tensor(5.0, dtype=mg.float64, requires_grad=True)
    h = x * 1.0
    h[[0, 2]] = v
    np.testing.assert_allclose(h.numpy()[[0, 2]], np.full((2, 2), 5.0))
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0], [1, 1], [0, 0]])
    np.testing.assert_allclose(v.grad.numpy(), 4.0)


def test_inplace_on_view_of_tensor_requiring_grad_updates_the_base_and_its_graph():
    x = f64(2, 3)
    h = x * 1.0
    row = h[0]
    row.mul_(2.0)
    np.testing.assert_allclose(h.numpy()[0], 2 * x.numpy()[0])
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])


def test_view_taken_before_its_base_was_rebased_follows_the_new_graph():
    x = f64(3)
    h = x * 1.0
    first = h[0:2]  # view taken before the in-place change: it sees the change, with its graph
    h.mul_(2.0)
    (first * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0, 0.0])


def test_views_share_storage():
    t = mg.arange(6).reshape(2, 3)
    t.transpose(0, 1)[0, 1] = 100
    assert t.numpy()[1, 0] == 100
    e = mg.ones(3).expand(2, 3)
    with pytest.raises(RuntimeError, match="read-only"):
        e.add_(1.0)


def test_int_tensor_inplace_with_float_raises():
    t = mg.arange(3)
    with pytest.raises(TypeError, match="add_"):
        t.add_(0.5)


# ---------------------------------------------------------------------------- hooks on saving


def test_saved_tensors_hooks_pack_and_unpack_every_saved_tensor():
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return ("box", t.numpy().copy())

    def unpack(box):
        return mg.tensor(box[1])

    x = f64(2, 3)
    w = f64(3, 4, seed=1)
    with saved_tensors_hooks(pack, unpack):
        y = (x @ w).tanh()
    assert sorted(packed) == [(2, 3), (2, 4), (3, 4)]
    y.sum().backward()
    t = np.tanh(x.numpy() @ w.numpy())
    g = 1 - t**2
    np.testing.assert_allclose(x.grad.numpy(), g @ w.numpy().T, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ g, rtol=1e-12)


def test_saved_tensors_hooks_restore_and_are_per_thread():
    calls = []
    x = f64(3)
    other_thread_packed = []

    def worker():
        y = x * x
        other_thread_packed.append(isinstance(y.grad_fn._saved[0], HookedSaved))

    with saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        (x * x).sum().backward()
    assert calls == [1, 1]
    assert other_thread_packed == [False]  # the hooks are this thread's only
    z = x.exp()
    assert z.grad_fn._out_saved.__class__.__name__ == "SavedTensor"


def test_unpack_must_return_a_tensor():
    x = f64(2)
    with saved_tensors_hooks(lambda t: t, lambda t: "nope"):
        y = x.exp()
    with pytest.raises(TypeError, match="unpack hook must return a Tensor"):
        y.sum().backward()


def test_saved_tensors_hooks_double_backward_reconnects_graph():
    x = f64(3)
    with saved_tensors_hooks(lambda t: t.numpy().copy(), lambda a: mg.tensor(a)):
        h = x * x
        y = (h * h).sum()
    (g,) = mg.autograd.grad(y, x, create_graph=True)
    (gg,) = mg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 12 * x.numpy() ** 2, rtol=1e-12)
