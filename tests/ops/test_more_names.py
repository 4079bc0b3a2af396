"""More of PyTorch's everyday names: the values and dtypes PyTorch gives, the in-place
forms' gradients against the out-of-place run, and the errors for bad input. (Gradients
of the differentiable ones are checked by the op table's samples.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
from memgrad.errors import ShapeError

# ---------------------------------------------------------------------------- math


def test_atan2_takes_the_quadrant_from_both_signs():
    y = mg.tensor([1.0, 1.0, -1.0, -1.0, 0.0])
    x = mg.tensor([1.0, -1.0, -1.0, 1.0, -1.0])
    np.testing.assert_allclose(mg.atan2(y, x).numpy(),
                               [math.pi / 4, 3 * math.pi / 4, -3 * math.pi / 4, -math.pi / 4,
                                math.pi], rtol=1e-6)


def test_fmod_keeps_the_sign_of_the_dividend_where_remainder_takes_the_divisors():
    x = mg.tensor([7.5, -7.5, 7.5, -7.5])
    d = mg.tensor([2.0, 2.0, -2.0, -2.0])
    assert mg.fmod(x, d).tolist() == [1.5, -1.5, 1.5, -1.5]
    assert mg.remainder(x, d).tolist() == [1.5, 0.5, -0.5, -1.5]
    assert mg.fmod(mg.tensor([7, -7]), 3).tolist() == [1, -1]  # ints stay ints
    assert mg.fmod(mg.tensor([7, -7]), 3).dtype == np.int64


def test_trunc_rounds_toward_zero_with_zero_gradient():
    x = mg.tensor([-1.7, -0.2, 0.2, 1.7], requires_grad=True)
    assert mg.trunc(x).tolist() == [-1.0, -0.0, 0.0, 1.0]
    (x.trunc() * 3 + x).sum().backward()
    assert x.grad.tolist() == [1.0] * 4


def test_inverse_functions_invert_and_isinf_finds_only_infinities():
    x = mg.tensor([-0.5, 0.0, 0.5], dtype=mg.float64)
    np.testing.assert_allclose(mg.sin(mg.asin(x)).numpy(), x.numpy(), atol=1e-15)
    np.testing.assert_allclose(mg.cos(mg.acos(x)).numpy(), x.numpy(), atol=1e-15)
    np.testing.assert_allclose(mg.tan(mg.atan(x)).numpy(), x.numpy(), atol=1e-15)
    np.testing.assert_allclose((mg.cosh(x) ** 2 - mg.sinh(x) ** 2).numpy(), 1.0, rtol=1e-15)
    assert mg.log2(mg.tensor([8.0])).tolist() == [3.0]
    assert mg.log10(mg.tensor([1000.0])).tolist() == pytest.approx([3.0])
    assert mg.isinf(mg.tensor([1.0, math.inf, -math.inf, math.nan])).tolist() == [
        False, True, True, False]


def test_lerp_and_true_divide_values():
    a, b = mg.tensor([0.0, 10.0]), mg.tensor([4.0, 20.0])
    assert mg.lerp(a, b, 0.25).tolist() == [1.0, 12.5]
    assert a.lerp(b, mg.tensor([0.5, 1.0])).tolist() == [2.0, 20.0]
    assert mg.true_divide(mg.tensor([1.0, 3.0]), 2).tolist() == [0.5, 1.5]


# ---------------------------------------------------------------------------- reductions


def test_all_and_any_over_dims_with_keepdim_as_numpy():
    a = np.array([[1, 0, 2], [3, 4, 5]])
    t = mg.tensor(a)
    assert mg.all(t).item() is False and mg.any(t).item() is True
    assert t.all(1).tolist() == [False, True]
    assert mg.any(t, dim=0).tolist() == [True, True, True]
    assert mg.all(t, dim=1, keepdim=True).shape == (2, 1)
    assert mg.all(t, dim=(0, 1)).tolist() is False
    assert mg.any(mg.tensor(0.0), dim=0).shape == ()
    assert mg.all(t).dtype == np.bool_
    with pytest.raises(IndexError):
        mg.all(t, dim=2)


def test_equal_compares_shapes_and_values():
    assert mg.equal(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 2.0]))
    assert not mg.equal(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 3.0]))
    assert not mg.equal(mg.tensor([1.0, 2.0]), mg.tensor([[1.0, 2.0]]))
    assert mg.tensor([1, 2]).equal(mg.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="equal: other must be a Tensor"):
        mg.equal(mg.zeros(1), [0.0])


def test_numel_element_size_and_nbytes():
    t = mg.zeros(2, 3)
    assert mg.numel(t) == 6 and t.numel() == 6
    assert t.element_size() == 4 and t.nbytes == 24
    assert mg.zeros(5, dtype=mg.float64).nbytes == 40
    with pytest.raises(TypeError, match="numel: input must be a Tensor"):
        mg.numel([1, 2])


# ---------------------------------------------------------------------------- shapes


def test_movedim_matches_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    for src, dst in ((0, -1), (-1, 0), ((0, 1), (2, 0)), ((0, 2), (1, 0)), ((), ())):
        np.testing.assert_array_equal(mg.tensor(a).movedim(src, dst).numpy(),
                                      np.moveaxis(a, src, dst))


def test_movedim_errors():
    t = mg.zeros(2, 3)
    with pytest.raises(ValueError, match="movedim: source and destination"):
        t.movedim((0, 1), 0)
    with pytest.raises(ValueError, match="repeated dimension"):
        t.movedim((0, 0), (0, 1))
    with pytest.raises(IndexError):
        t.movedim(2, 0)


def test_hstack_vstack_concat_as_numpy():
    a, b = np.arange(3.0), np.arange(3.0, 6.0)
    assert mg.hstack([mg.tensor(a), mg.tensor(b)]).tolist() == np.hstack([a, b]).tolist()
    assert mg.vstack([mg.tensor(a), mg.tensor(b)]).tolist() == np.vstack([a, b]).tolist()
    assert mg.concat([mg.tensor(a), mg.tensor(b)]).tolist() == np.concatenate([a, b]).tolist()
    with pytest.raises(ValueError, match="hstack: expected a non-empty list"):
        mg.hstack([])
    with pytest.raises(TypeError, match="vstack: expected Tensors, got list at position 1"):
        mg.vstack([mg.zeros(2), [0.0, 0.0]])


def test_unflatten_tile_broadcast_to():
    t = mg.arange(24.0).reshape(2, 12)
    assert t.unflatten(1, (3, 4)).shape == (2, 3, 4)
    assert t.unflatten(-1, (-1, 6)).shape == (2, 2, 6)
    assert t.T.unflatten(0, (3, 4)).tolist() == t.numpy().T.reshape(3, 4, 2).tolist()
    for bad in ((5, -1), (3, 5), (-1, -1), ()):
        with pytest.raises(ValueError, match="unflatten"):
            t.unflatten(1, bad)
    assert mg.tile(mg.tensor([1.0, 2.0]), (2, 2)).tolist() == np.tile([1.0, 2.0], (2, 2)).tolist()
    assert mg.broadcast_to(mg.tensor([1.0, 2.0]), (3, 2)).shape == (3, 2)
    with pytest.raises(RuntimeError, match="read-only"):
        mg.broadcast_to(mg.zeros(2), (3, 2)).add_(1.0)


def test_mm_and_dot_refuse_what_matmul_would_broadcast():
    assert mg.mm(mg.ones(2, 3), mg.ones(3, 4)).tolist() == [[3.0] * 4] * 2
    assert mg.dot(mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0])).item() == 11.0
    with pytest.raises(ShapeError, match="mm: input must be 2-D"):
        mg.mm(mg.ones(2, 2, 2), mg.ones(2, 2))
    with pytest.raises(ShapeError, match="mm: shapes"):
        mg.mm(mg.ones(2, 3), mg.ones(2, 3))
    with pytest.raises(ShapeError, match="dot: tensor must be 1-D"):
        mg.dot(mg.ones(2), mg.ones(2, 1))
    with pytest.raises(ShapeError, match="dot: 1-D tensors of one length"):
        mg.dot(mg.ones(2), mg.ones(3))


# ---------------------------------------------------------------------------- factories


def test_linspace_includes_both_ends():
    t = mg.linspace(-1, 1, 5)
    assert t.dtype == np.float32 and t.tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert mg.linspace(0, 1, 3, dtype=mg.float64).dtype == np.float64
    assert mg.linspace(0, 1, 0).shape == (0,)
    with pytest.raises(ValueError, match="linspace: steps must be an int >= 0"):
        mg.linspace(0, 1, -1)
    with pytest.raises(TypeError, match="linspace: end must be a number"):
        mg.linspace(0, "1", 3)
    with pytest.raises(RuntimeError, match="CPU"):
        mg.linspace(0, 1, 3, device="cuda")


def test_as_tensor_shares_what_it_can():
    a = np.zeros(3, dtype=np.float32)
    t = mg.as_tensor(a)
    a[0] = 7.0
    assert t.tolist()[0] == 7.0
    assert mg.as_tensor(t) is t
    copied = mg.as_tensor(a, dtype=mg.float64)
    a[1] = 1.0
    assert copied.dtype == np.float64 and copied.tolist() == [7.0, 0.0, 0.0]
    assert mg.as_tensor([1, 2]).dtype == np.int64
    assert mg.is_tensor(t) and mg.is_tensor(mg.nn.Parameter(mg.zeros(1)))
    assert not mg.is_tensor(a)


def test_new_tensor_takes_the_dtype_of_its_tensor():
    t = mg.zeros(2, dtype=mg.float64)
    n = t.new_tensor([1, 2])
    assert n.dtype == np.float64 and n.tolist() == [1.0, 2.0] and not n.requires_grad
    assert t.new_tensor([1, 2], dtype=mg.int64).dtype == np.int64
    assert t.new_tensor([1.0], requires_grad=True).requires_grad


# ---------------------------------------------------------------------------- grad mode


def test_inference_mode_is_no_grad_and_false_changes_nothing():
    x = mg.ones(2, requires_grad=True)
    with mg.inference_mode():
        assert not (x * 2).requires_grad
    with mg.inference_mode(False):
        assert (x * 2).requires_grad
    with mg.no_grad(), mg.inference_mode(False):
        assert not mg.is_grad_enabled()  # False leaves the mode as it is
    assert mg.is_grad_enabled()

    @mg.inference_mode
    def bare(t):
        return t * 2

    @mg.inference_mode()
    def called(t):
        return t * 2

    @mg.inference_mode(False)
    def off(t):
        return t * 2

    assert not bare(x).requires_grad and not called(x).requires_grad
    assert off(x).requires_grad and mg.is_grad_enabled()


# ---------------------------------------------------------------------------- in place


def _grads(fn, *arrays):
    leaves = [mg.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    (out * mg.tensor(np.arange(1.0, out.numel() + 1).reshape(out.shape))).sum().backward()
    return out.numpy(), [t.grad.numpy() for t in leaves]


@pytest.mark.parametrize("name", ["masked_fill_", "scatter_", "scatter_value_", "scatter_add_"])
def test_inplace_forms_give_the_out_of_place_values_and_gradients(name):
    rng = np.random.default_rng(0)
    x, src = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    mask = mg.tensor(rng.random((3, 4)) < 0.5)
    index = mg.tensor([[0, 2, 1, 0], [2, 1, 0, 1]])
    inplace = {
        "masked_fill_": lambda t, s: (t * 1).masked_fill_(mask, -2.0) + 0 * s.sum(),
        "scatter_": lambda t, s: (t * 1).scatter_(0, index, s),
        "scatter_value_": lambda t, s: (t * 1).scatter_(0, index, value=3.0) + 0 * s.sum(),
        "scatter_add_": lambda t, s: (t * 1).scatter_add_(0, index, s),
    }[name]
    outplace = {
        "masked_fill_": lambda t, s: t.masked_fill(mask, -2.0) + 0 * s.sum(),
        "scatter_": lambda t, s: mg.scatter(t, 0, index, s),
        "scatter_value_": lambda t, s: mg.scatter(t, 0, index, value=3.0) + 0 * s.sum(),
        "scatter_add_": lambda t, s: mg.scatter_add(t, 0, index, s),
    }[name]
    got, got_grads = _grads(inplace, x, src)
    want, want_grads = _grads(outplace, x, src)
    np.testing.assert_array_equal(got, want)
    for g, w in zip(got_grads, want_grads):
        np.testing.assert_array_equal(g, w)


def test_inplace_forms_write_the_tensor_itself_and_bump_its_version():
    t = mg.zeros(2, 3)
    v = t._version
    assert t.masked_fill_(mg.tensor([True, False, True]), 1.0) is t
    assert t.tolist() == [[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]]
    view = t[1]
    view.scatter_add_(0, mg.tensor([0, 0]), mg.tensor([2.0, 3.0]))
    assert t.tolist()[1] == [6.0, 0.0, 1.0]
    assert t._version > v


def test_inplace_forms_refuse_a_leaf_that_requires_grad_and_a_saved_value():
    leaf = mg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.masked_fill_(mg.tensor([True, False, False]), 1.0)
    x = mg.ones(3, requires_grad=True)
    y = x * 1
    z = y.sin()  # saves y
    y.masked_fill_(mg.tensor([True, False, False]), 0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    with pytest.raises(TypeError, match="masked_fill: mask must be a bool tensor"):
        mg.zeros(2).masked_fill_(mg.tensor([1, 0]), 1.0)


# ---------------------------------------------------------------------------- selections


def test_nonzero_matches_numpy_in_both_forms():
    a = np.array([[0, 3, 0], [5, 0, 7]])
    assert mg.tensor(a).nonzero().tolist() == np.argwhere(a).tolist()
    assert mg.tensor(a).nonzero().dtype == np.int64
    rows, cols = mg.nonzero(mg.tensor(a), as_tuple=True)
    assert (rows.tolist(), cols.tolist()) == tuple(w.tolist() for w in np.nonzero(a))
    assert mg.tensor(5).nonzero().shape == (1, 0) and mg.tensor(0).nonzero().shape == (0, 0)
    assert mg.zeros(2, 3).nonzero().shape == (0, 2)


def test_unique_with_inverse_counts_and_dim():
    a = np.array([3, 1, 3, 2, 1, 3])
    values, inverse, counts = mg.unique(mg.tensor(a), return_inverse=True, return_counts=True)
    assert values.tolist() == [1, 2, 3] and counts.tolist() == [2, 1, 3]
    assert values.numpy()[inverse.numpy()].tolist() == a.tolist()
    m = np.array([[1, 2], [0, 1], [1, 2]])
    rows, inv = mg.unique(mg.tensor(m), dim=0, return_inverse=True)
    assert rows.tolist() == [[0, 1], [1, 2]] and inv.tolist() == [1, 0, 1]
    assert not mg.unique(mg.tensor([1.0, 1.0], requires_grad=True)).requires_grad


def test_diag_both_ways_and_its_errors():
    m = np.arange(12.0).reshape(3, 4)
    for k in (-3, -1, 0, 2, 4):
        assert mg.diag(mg.tensor(m), k).tolist() == np.diag(m, k).tolist()
    v = np.array([1.0, 2.0, 3.0])
    for k in (-2, 0, 1):
        assert mg.tensor(v).diag(k).tolist() == np.diag(v, k).tolist()
    with pytest.raises(ShapeError, match="diag: input must be 1-D or 2-D"):
        mg.diag(mg.zeros(2, 2, 2))
    with pytest.raises(TypeError, match="diag: diagonal must be an int"):
        mg.diag(mg.zeros(2), 0.5)


def test_masked_select_and_meshgrid_as_numpy():
    x = np.arange(6.0).reshape(2, 3)
    mask = np.array([True, False, True])
    assert mg.tensor(x).masked_select(mg.tensor(mask)).tolist() == np.broadcast_to(
        x, (2, 3))[np.broadcast_to(mask, (2, 3))].tolist()
    with pytest.raises(TypeError, match="masked_select: mask must be a bool tensor"):
        mg.tensor(x).masked_select(mg.tensor([1, 0, 1]))
    with pytest.raises(ShapeError, match="do not broadcast"):
        mg.tensor(x).masked_select(mg.tensor([True, False]))
    a, b, c = np.arange(2), np.arange(3), np.arange(4)
    for indexing in ("ij", "xy"):
        got = mg.meshgrid(mg.tensor(a), mg.tensor(b), mg.tensor(c), indexing=indexing)
        want = np.meshgrid(a, b, c, indexing=indexing)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
    assert mg.meshgrid([mg.tensor(a), mg.tensor(b)])[0].shape == (2, 3)  # "ij" by default
    with pytest.raises(ValueError, match="meshgrid: indexing must be"):
        mg.meshgrid(mg.tensor(a), indexing="ji")
    with pytest.raises(ShapeError, match="expected 0-D or 1-D tensors"):
        mg.meshgrid(mg.zeros(2, 2))


def test_logspace_as_numpy():
    np.testing.assert_allclose(mg.logspace(0, 3, 4).numpy(), [1.0, 10.0, 100.0, 1000.0])
    np.testing.assert_allclose(mg.logspace(1, 4, 4, base=2.0, dtype=mg.float64).numpy(),
                               np.logspace(1, 4, 4, base=2.0), rtol=1e-15)
    assert mg.logspace(0, 1, 2).dtype == np.float32
    with pytest.raises(TypeError, match="logspace: base must be a number"):
        mg.logspace(0, 1, 2, base="e")


def test_unfold_and_fold_are_each_others_transpose():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 5))
    cols = mg.nn.functional.unfold(mg.tensor(x), (2, 3), dilation=(1, 2), padding=1, stride=2)
    c = rng.standard_normal(cols.shape)
    back = mg.nn.functional.fold(mg.tensor(c), (6, 5), (2, 3), dilation=(1, 2), padding=1,
                                 stride=2)
    # <unfold(x), c> = <x, fold(c)>
    assert np.sum(cols.numpy() * c) == pytest.approx(np.sum(x * back.numpy()), rel=1e-12)
    with pytest.raises(ShapeError, match="fold: input of shape"):
        mg.nn.functional.fold(mg.zeros(1, 5, 4), (3, 3), 2)
    with pytest.raises(ShapeError, match="unfold: the kernel"):
        mg.nn.functional.unfold(mg.zeros(1, 1, 2, 2), 3)


def test_max_pool1d_module():
    x = mg.tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]])
    assert mg.nn.MaxPool1d(2)(x).tolist() == [[[3.0, 5.0]]]
    assert mg.nn.MaxPool1d(3, stride=1, padding=1)(x).tolist() == [[[3.0, 3.0, 5.0, 5.0, 5.0]]]
    with pytest.raises(ShapeError, match="max_pool1d: expected a 2-D"):
        mg.nn.MaxPool1d(2)(mg.zeros(2))
