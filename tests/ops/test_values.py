"""Forward values of the public functions and Tensor methods of API.md against NumPy, the
dtype rules, gradients reduced back to each input's shape under broadcasting (against
analytic gradients written in NumPy), and the in-place ops with their version counter."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg

RNG = np.random.default_rng(1234)


def arr(*shape: int, lo: float = -2.0, hi: float = 2.0, dtype=np.float64) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


def T(a, requires_grad: bool = False) -> mg.Tensor:
    """A memgrad tensor with exactly the dtype of the NumPy array ``a``."""
    return mg.tensor(np.asarray(a), dtype=np.asarray(a).dtype, requires_grad=requires_grad)


def check(t: mg.Tensor, expected, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    expected = np.asarray(expected)
    assert isinstance(t, mg.Tensor), type(t)
    assert t.shape == expected.shape, (t.shape, expected.shape)
    np.testing.assert_allclose(t.numpy(), expected, rtol=rtol, atol=atol)


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_logsumexp(x: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis) if axis is not None else r.reshape(())


# ---------------------------------------------------------------------------- elementwise

UNARY = [
    ("exp", np.exp, (-2, 2)),
    ("log", np.log, (0.1, 3)),
    ("sqrt", np.sqrt, (0.0, 3)),
    ("abs", np.abs, (-2, 2)),
    ("tanh", np.tanh, (-3, 3)),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), (-6, 6)),
    ("relu", lambda x: np.maximum(x, 0), (-2, 2)),
    ("neg", np.negative, (-2, 2)),
]


@pytest.mark.parametrize("name,ref,domain", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_function_and_method(name, ref, domain, dtype):
    a = arr(3, 4, lo=domain[0], hi=domain[1], dtype=dtype)
    expected = ref(a.astype(np.float64))
    tol = 1e-6 if dtype == np.float32 else 1e-12
    by_function = getattr(mg, name)(T(a))
    by_method = getattr(T(a), name)()
    for out in (by_function, by_method):
        check(out, expected, rtol=tol, atol=tol)
        assert out.dtype == dtype


def test_unary_operators():
    a = arr(2, 3)
    check(-T(a), -a)
    check(abs(T(a)), np.abs(a))
    check(+T(a), a)


def test_sigmoid_saturates_without_overflow():
    a = np.array([-800.0, -40.0, 0.0, 40.0, 800.0])
    with np.errstate(over="raise"):
        out = mg.sigmoid(T(a))
    check(out, [0.0, 0.0, 0.5, 1.0, 1.0], atol=1e-15)


@pytest.mark.parametrize("dtype,x", [(np.float64, -40.0), (np.float32, -20.0)])
def test_sigmoid_left_tail_keeps_relative_precision(dtype, x):
    out = mg.sigmoid(T(np.array([x], dtype=dtype)))
    check(out, [1 / (1 + math.exp(-x))], rtol=1e-5, atol=0)


BINARY = [
    ("add", np.add, lambda a, b: a + b),
    ("sub", np.subtract, lambda a, b: a - b),
    ("mul", np.multiply, lambda a, b: a * b),
    ("div", np.divide, lambda a, b: a / b),
    ("maximum", np.maximum, None),
    ("minimum", np.minimum, None),
]
SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((4, 1), (2, 1, 5))]


@pytest.mark.parametrize("name,ref,operator", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("sx,sy", SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
def test_binary_broadcasting(name, ref, operator, sx, sy):
    a, b = arr(*sx), arr(*sy, lo=0.5, hi=2.0)
    expected = ref(a, b)
    check(getattr(mg, name)(T(a), T(b)), expected)
    check(getattr(T(a), name)(T(b)), expected)
    if operator is not None:
        check(operator(T(a), T(b)), expected)


@pytest.mark.parametrize("name,ref,operator", BINARY[:4], ids=[b[0] for b in BINARY[:4]])
def test_binary_with_python_scalars(name, ref, operator):
    a = arr(2, 3, lo=0.5, hi=2.0)
    check(operator(T(a), 1.5), ref(a, 1.5))
    check(operator(1.5, T(a)), ref(1.5, a))
    check(operator(T(a), 2), ref(a, 2))
    check(getattr(mg, name)(T(a), 0.25), ref(a, 0.25))


def test_add_sub_alpha():
    a, b = arr(3), arr(2, 3)
    check(mg.add(T(a), T(b), alpha=2.0), a + 2.0 * b)
    check(mg.sub(T(a), T(b), alpha=0.5), a - 0.5 * b)
    check(T(a).add(T(b), alpha=-1), a - b)


def test_pow():
    x, y = arr(3, 4, lo=0.5, hi=2.0), arr(4)
    check(mg.pow(T(x), T(y)), np.power(x, y))
    check(T(x) ** T(y), np.power(x, y))
    check(T(x).pow(3), x**3)
    check(T(x) ** -0.5, x**-0.5)
    check(2.0 ** T(y), 2.0**y)
    z = arr(5)
    check(T(z) ** 2, z**2)


def test_maximum_minimum_ties_and_max_of_two():
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([1.0, 3.0, 2.0])
    check(mg.maximum(T(a), T(b)), [1.0, 3.0, 3.0])
    check(mg.minimum(T(a), T(b)), [1.0, 2.0, 2.0])
    check(mg.max(T(a), T(b)), [1.0, 3.0, 3.0])
    check(mg.min(T(a), T(b)), [1.0, 2.0, 2.0])


def test_clamp():
    a = arr(4, 5)
    check(mg.clamp(T(a), -0.5, 0.5), np.clip(a, -0.5, 0.5))
    check(T(a).clamp(min=0.1), np.clip(a, 0.1, None))
    check(T(a).clamp(max=-0.1), np.clip(a, None, -0.1))
    lo, hi = arr(5, lo=-1, hi=0), arr(4, 1, lo=0, hi=1)
    check(T(a).clamp(T(lo), T(hi)), np.minimum(np.maximum(a, lo), hi))
    assert T(a.astype(np.float32)).clamp(0, 1).dtype == np.float32


def test_where():
    cond = RNG.random((3, 4)) < 0.5
    a, b = arr(3, 4), arr(4)
    check(mg.where(T(cond), T(a), T(b)), np.where(cond, a, b))
    check(mg.where(T(cond[:, :1]), T(a), 0.0), np.where(cond[:, :1], a, 0.0))
    check(mg.where(T(a) > 0, T(a), -T(a)), np.abs(a))


COMPARISONS = [
    (lambda x, y: x == y, np.equal),
    (lambda x, y: x != y, np.not_equal),
    (lambda x, y: x < y, np.less),
    (lambda x, y: x <= y, np.less_equal),
    (lambda x, y: x > y, np.greater),
    (lambda x, y: x >= y, np.greater_equal),
]


@pytest.mark.parametrize("op,ref", COMPARISONS, ids=["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(op, ref):
    a = RNG.integers(-2, 3, (3, 4)).astype(np.float64)
    b = RNG.integers(-2, 3, (4,)).astype(np.float64)
    ta = T(a, requires_grad=True)
    for out, expected in ((op(ta, T(b)), ref(a, b)), (op(ta, 0.0), ref(a, 0.0))):
        assert out.dtype == np.bool_
        assert not out.requires_grad and out.grad_fn is None
        np.testing.assert_array_equal(out.numpy(), expected)


def test_logical_ops():
    a, b = RNG.random((3, 4)) < 0.5, RNG.random(4) < 0.5
    np.testing.assert_array_equal((T(a) & T(b)).numpy(), a & b)
    np.testing.assert_array_equal((T(a) | T(b)).numpy(), a | b)
    np.testing.assert_array_equal((T(a) ^ T(b)).numpy(), a ^ b)
    np.testing.assert_array_equal((~T(a)).numpy(), ~a)


def test_allclose():
    a = arr(3)
    assert mg.allclose(T(a), T(a + 1e-9))
    assert not mg.allclose(T(a), T(a + 1e-3))
    assert mg.allclose(T(a), T(a + 1e-3), atol=1e-2)


# ---------------------------------------------------------------------------- joining, splitting


def test_cat_and_stack():
    a, b, c = arr(2, 3), arr(1, 3), arr(4, 3)
    check(mg.cat([T(a), T(b), T(c)]), np.concatenate([a, b, c]))
    check(mg.cat([T(a.T), T(c.T)], dim=-1), np.concatenate([a.T, c.T], axis=-1))
    check(mg.cat((T(a), T(a)), 1), np.concatenate([a, a], 1))
    check(mg.stack([T(a), T(a * 2)]), np.stack([a, a * 2]))
    check(mg.stack([T(a), T(a * 2)], dim=-1), np.stack([a, a * 2], axis=-1))
    check(mg.stack([T(a), T(a * 2)], dim=1), np.stack([a, a * 2], axis=1))


@pytest.mark.parametrize("n,chunks,sizes", [(5, 2, [3, 2]), (6, 3, [2, 2, 2]), (6, 4, [2, 2, 2]),
                                            (3, 5, [1, 1, 1]), (7, 3, [3, 3, 1])])
def test_chunk_sizes_follow_pytorch(n, chunks, sizes):
    a = arr(2, n)
    pieces = T(a).chunk(chunks, dim=1)
    assert [p.shape[1] for p in pieces] == sizes
    for p, q in zip(pieces, np.split(a, np.cumsum(sizes)[:-1], axis=1)):
        check(p, q)


def test_split():
    a = arr(7, 2)
    pieces = mg.split(T(a), 3)
    assert [p.shape for p in pieces] == [(3, 2), (3, 2), (1, 2)]
    check(mg.cat(list(pieces)), a)
    pieces = T(a).split([2, 5])
    check(pieces[0], a[:2])
    check(pieces[1], a[2:])
    pieces = T(a).split(1, dim=-1)
    check(pieces[1], a[:, 1:])


# ---------------------------------------------------------------------------- reductions

DIMS = [None, 0, -1, 1, (0, 2), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean(dim, keepdim):
    a = arr(2, 3, 4)
    check(mg.sum(T(a), dim=dim, keepdim=keepdim), np.sum(a, axis=dim, keepdims=keepdim))
    check(T(a).sum(dim, keepdim), np.sum(a, axis=dim, keepdims=keepdim))
    check(mg.mean(T(a), dim=dim, keepdim=keepdim), np.mean(a, axis=dim, keepdims=keepdim))
    check(T(a).mean(dim=dim, keepdim=keepdim), np.mean(a, axis=dim, keepdims=keepdim))


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_amax_amin_logsumexp(dim, keepdim):
    a = arr(2, 3, 4)
    check(mg.amax(T(a), dim=dim, keepdim=keepdim), np.max(a, axis=dim, keepdims=keepdim))
    check(T(a).amin(dim, keepdim), np.min(a, axis=dim, keepdims=keepdim))
    check(T(a).logsumexp(dim=dim, keepdim=keepdim), np_logsumexp(a, dim, keepdim), rtol=1e-10)
    check(mg.logsumexp(T(a), dim, keepdim), np_logsumexp(a, dim, keepdim), rtol=1e-10)


@pytest.mark.parametrize("dim", [0, 1, -1, -3, 2])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_with_dim_return_values_and_indices(dim, keepdim):
    a = arr(2, 3, 4)
    values, indices = mg.max(T(a), dim=dim, keepdim=keepdim)
    check(values, np.max(a, axis=dim, keepdims=keepdim))
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices.numpy(), np.argmax(a, axis=dim, keepdims=keepdim))
    r = T(a).min(dim, keepdim)
    check(r.values, np.min(a, axis=dim, keepdims=keepdim))
    np.testing.assert_array_equal(r.indices.numpy(), np.argmin(a, axis=dim, keepdims=keepdim))
    assert r[0] is r.values and r[1] is r.indices


def test_max_min_without_dim():
    a = arr(3, 4)
    check(mg.max(T(a)), a.max())
    check(T(a).min(), a.min())


@pytest.mark.parametrize("dim", [None, 0, -1, 1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(dim, keepdim):
    a = RNG.integers(0, 3, (3, 4)).astype(np.float64)  # ties: the first occurrence wins
    out = T(a).argmax(dim=dim, keepdim=keepdim)
    assert out.dtype == np.int64 and not out.requires_grad
    expected = np.argmax(a, axis=dim, keepdims=keepdim)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert out.shape == np.shape(expected)
    np.testing.assert_array_equal(mg.argmin(T(a), dim, keepdim).numpy(),
                                  np.argmin(a, axis=dim, keepdims=keepdim))


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_std(dim, keepdim, correction):
    a = arr(3, 4, 5)
    expected = np.var(a, axis=dim, keepdims=keepdim, ddof=correction)
    check(mg.var(T(a), dim, keepdim, correction=correction), expected, rtol=1e-10)
    check(T(a).std(dim=dim, keepdim=keepdim, correction=correction), np.sqrt(expected),
          rtol=1e-10)


def test_var_std_defaults_and_unbiased():
    a = arr(4, 5)
    check(T(a).var(), np.var(a, ddof=1), rtol=1e-10)
    check(T(a).std(1), np.std(a, axis=1, ddof=1), rtol=1e-10)
    check(T(a).var(0, unbiased=False), np.var(a, axis=0), rtol=1e-10)
    check(mg.std(T(a), unbiased=True), np.std(a, ddof=1), rtol=1e-10)


def test_logsumexp_is_stable():
    a = np.array([[1000.0, 1000.0], [-1000.0, -1001.0]])
    check(mg.logsumexp(T(a), dim=1), [1000 + math.log(2), -1000 + math.log1p(math.exp(-1))],
          rtol=1e-12)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax(dim):
    a = arr(3, 4, lo=-5, hi=5)
    check(mg.softmax(T(a), dim), np_softmax(a, dim), rtol=1e-10)
    check(T(a).softmax(dim=dim), np_softmax(a, dim), rtol=1e-10)
    check(mg.log_softmax(T(a), dim=dim), np.log(np_softmax(a, dim)), rtol=1e-10)
    check(T(a).log_softmax(dim), np.log(np_softmax(a, dim)), rtol=1e-10)


def test_softmax_large_values():
    a = np.array([[1000.0, 999.0, -1000.0]])
    check(mg.softmax(T(a), -1), np_softmax(a, -1), rtol=1e-12)
    check(mg.log_softmax(T(a), -1), [[-math.log1p(math.exp(-1)), -1 - math.log1p(math.exp(-1)),
                                      -2000 - math.log1p(math.exp(-1))]], rtol=1e-12)


def test_reductions_keep_float32():
    a = T(arr(3, 4, dtype=np.float32))
    for out in (a.sum(), a.mean(0), a.var(), a.std(1), a.logsumexp(1), a.softmax(0),
                a.log_softmax(1), a.amax(), a.max(0).values):
        assert out.dtype == np.float32, out


# ---------------------------------------------------------------------------- matmul


@pytest.mark.parametrize("sx,sy", [((3, 4), (4, 2)), ((4,), (4,)), ((4,), (4, 3)), ((3, 4), (4,)),
                                   ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                   ((4,), (2, 4, 3)), ((2, 3, 4), (4,))], ids=str)
def test_matmul(sx, sy):
    a, b = arr(*sx), arr(*sy)
    expected = np.matmul(a, b)
    check(mg.matmul(T(a), T(b)), expected, rtol=1e-12)
    check(T(a) @ T(b), expected, rtol=1e-12)
    check(T(a).matmul(T(b)), expected, rtol=1e-12)


# ---------------------------------------------------------------------------- shapes


def test_reshape_view_flatten():
    a = arr(2, 3, 4)
    check(T(a).reshape(6, 4), a.reshape(6, 4))
    check(T(a).reshape((4, -1)), a.reshape(4, -1))
    check(mg.reshape(T(a), (24,)), a.reshape(24))
    check(T(a).view(3, 8), a.reshape(3, 8))
    check(mg.view(T(a), -1, 2), a.reshape(-1, 2))
    check(T(a).flatten(), a.reshape(-1))
    check(T(a).flatten(1), a.reshape(2, 12))
    check(mg.flatten(T(a), 0, 1), a.reshape(6, 4))
    check(T(a).flatten(-2, -1), a.reshape(2, 12))
    check(T(np.array(2.0)).flatten(), [2.0])


def test_views_share_memory():
    t = T(arr(2, 3, 4))
    for v in (t.view(6, 4), t.reshape(24), t.transpose(0, 1), t.permute(2, 0, 1), t.T, t[0],
              t[:, 1:], t.unsqueeze(0), t.expand(5, 2, 3, 4)):
        assert np.shares_memory(v.numpy(), t.numpy())


def test_transpose_permute_T():
    a = arr(2, 3, 4)
    check(T(a).transpose(0, 2), np.swapaxes(a, 0, 2))
    check(mg.transpose(T(a), -1, -2), np.swapaxes(a, -1, -2))
    check(T(a).permute(1, 2, 0), a.transpose(1, 2, 0))
    check(mg.permute(T(a), (2, 0, 1)), a.transpose(2, 0, 1))
    check(T(a).permute(-1, 0, 1), a.transpose(2, 0, 1))
    check(T(a).T, a.T)
    m = arr(3, 5)
    check(T(m).T, m.T)
    check(T(m).mT, m.T)
    v = arr(3)
    check(T(v).T, v)


def test_unsqueeze_squeeze():
    a = arr(3, 1, 4, 1)
    check(T(a).squeeze(), a.squeeze())
    check(T(a).squeeze(1), a.squeeze(1))
    check(T(a).squeeze(-1), a.squeeze(-1))
    check(mg.squeeze(T(a), 0), a)  # size 3: unchanged, as in PyTorch
    check(T(a).squeeze((1, 3)), a.squeeze((1, 3)))
    b = arr(3, 4)
    check(T(b).unsqueeze(0), b[None])
    check(T(b).unsqueeze(-1), b[..., None])
    check(mg.unsqueeze(T(b), 1), b[:, None])
    check(T(b).unsqueeze(2), b[:, :, None])
    check(T(b).unsqueeze(-3), b[None])


def test_expand():
    a = arr(3, 1)
    check(T(a).expand(3, 4), np.broadcast_to(a, (3, 4)))
    check(T(a).expand(2, 3, 5), np.broadcast_to(a, (2, 3, 5)))
    check(T(a).expand(-1, 4), np.broadcast_to(a, (3, 4)))
    check(mg.expand(T(a), (2, -1, 2)), np.broadcast_to(a, (2, 3, 2)))
    check(T(np.array(1.5)).expand(2), [1.5, 1.5])


INDICES = [
    1, -1, (1, 2), slice(1, 3), (slice(None), 0), (Ellipsis, 1), (None, 0), (slice(None, None, 2),),
    (slice(None, None, -1),), [0, 2, 0], ([0, 1], [2, 2]), (slice(1, None), [3, 0]),
    (Ellipsis, [1, 1]), np.array([[0, 1], [3, 3]]), (0, [1, 2]),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_getitem(index):
    a = arr(4, 5)
    expected = a[index if not isinstance(index, list) else np.array(index)]
    check(T(a)[index], expected)


def test_getitem_with_tensor_and_mask_indices():
    a = arr(4, 5)
    check(T(a)[mg.tensor([3, 0, 3])], a[[3, 0, 3]])
    mask = a > 0
    check(T(a)[T(mask)], a[mask])
    check(T(a)[T(a) > 0.5], a[a > 0.5])
    check(T(a)[T(mask[:, 0])], a[mask[:, 0]])
    check(T(a)[:, mg.tensor([True, False, True, False, True])], a[:, [0, 2, 4]])
    assert T(a)[0, 1].shape == ()
    assert T(a)[0, 1].item() == a[0, 1]


def test_iter_and_len():
    a = arr(3, 2)
    rows = list(T(a))
    assert len(T(a)) == 3 and len(rows) == 3
    for r, e in zip(rows, a):
        check(r, e)


def test_setitem():
    a = arr(4, 5)
    t = T(a.copy())
    v0 = t._version
    t[1] = 5.0
    a[1] = 5.0
    check(t, a)
    t[:, 2] = T(np.arange(4.0))
    a[:, 2] = np.arange(4.0)
    check(t, a)
    mask = a > 1
    t[T(mask)] = 0.0
    a[mask] = 0.0
    check(t, a)
    t[[0, 3], 1:3] = T(np.array([[1.0, 2.0], [3.0, 4.0]]))
    a[[0, 3], 1:3] = [[1.0, 2.0], [3.0, 4.0]]
    check(t, a)
    assert t._version == v0 + 4


def test_setitem_casts_value_to_tensor_dtype():
    t = mg.zeros(3)
    t[0] = T(np.array(2.5))  # float64 value into a float32 tensor
    assert t.dtype == np.float32
    check(t, [2.5, 0.0, 0.0])


# ---------------------------------------------------------------------------- dtypes


def test_default_dtype_is_float32():
    assert mg.tensor([1.0, 2.0]).dtype == np.float32
    assert mg.tensor(1.5).dtype == np.float32
    assert mg.zeros(2).dtype == np.float32
    assert mg.ones(2, 3).dtype == np.float32
    assert mg.randn(2).dtype == np.float32
    assert mg.rand(2).dtype == np.float32
    assert mg.arange(3.0).dtype == np.float32
    assert mg.tensor([1, 2]).dtype == np.int64
    assert mg.tensor(np.zeros(2)).dtype == np.float64  # NumPy arrays keep their dtype
    assert mg.tensor([1.0], dtype=mg.float64).dtype == np.float64


def test_python_scalars_keep_float32():
    x = mg.tensor([1.0, 2.0, 4.0])
    for out in (x + 1, x + 1.5, 1.5 - x, x * 2.0, 2 / x, x / 3, x**2, x**0.5, 2.0**x,
                mg.maximum(x, 0.5), mg.where(x > 1, x, 0.0), x.clamp(0.5, 3.5), -x, x.exp(),
                x.relu()):
        assert out.dtype == np.float32, out


@pytest.mark.parametrize("op", [np.add, np.subtract, np.multiply, np.divide, np.power,
                                np.maximum, np.minimum], ids=lambda f: f.__name__)
@pytest.mark.parametrize("da,db", [(np.float32, np.float64), (np.float64, np.float32),
                                   (np.float32, np.float32), (np.float64, np.float64)])
def test_mixed_float_dtypes_follow_numpy(op, da, db):
    a, b = arr(3, lo=0.5, hi=2, dtype=da), arr(2, 3, lo=0.5, hi=2, dtype=db)
    name = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "power": "pow",
            "maximum": "maximum", "minimum": "minimum"}[op.__name__]
    out = getattr(mg, name)(T(a), T(b))
    expected = op(a, b)
    assert out.dtype == expected.dtype == np.result_type(da, db)
    check(out, expected, rtol=1e-6)


def test_mixed_dtype_matmul_and_where_and_cat():
    a, b = arr(2, 3, dtype=np.float32), arr(3, 2)
    assert (T(a) @ T(b)).dtype == np.float64
    cond = T(np.array([True, False, True]))
    assert mg.where(cond, T(a), T(b[:, 0])).dtype == np.float64
    assert mg.cat([T(a), T(a.astype(np.float64))]).dtype == np.float64


# ---------------------------------------------------------------------------- broadcast grads

W_RNG = np.random.default_rng(7)


def _grads(fn, *arrays):
    """Run ``(w * fn(*tensors)).sum().backward()`` for a fixed random ``w``."""
    ts = [T(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    w = W_RNG.standard_normal(out.shape)
    (out * T(w)).sum().backward()
    return w, [t.grad for t in ts]


def unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` down to ``shape`` (written independently of memgrad's sum_to)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


BCAST_SHAPES = [((3, 1), (4,)), ((2, 3, 4), (3, 1)), ((), (2, 3)), ((1, 4), (2, 1, 4)),
                ((5,), (5,))]


@pytest.mark.parametrize("sx,sy", BCAST_SHAPES, ids=str)
def test_broadcast_gradients_of_binary_ops(sx, sy):
    x, y = arr(*sx, lo=0.5, hi=2), arr(*sy, lo=0.5, hi=2)
    cases = [
        (lambda a, b: a + b, lambda w: (w, w)),
        (lambda a, b: a - b, lambda w: (w, -w)),
        (lambda a, b: a * b, lambda w: (w * y, w * x)),
        (lambda a, b: a / b, lambda w: (w / y, -w * x / y**2)),
        (lambda a, b: a**b, lambda w: (w * y * x ** (y - 1), w * x**y * np.log(x))),
    ]
    for fn, analytic in cases:
        w, (gx, gy) = _grads(fn, x, y)
        ex, ey = analytic(w)
        ex, ey = np.broadcast_to(ex, w.shape), np.broadcast_to(ey, w.shape)
        check(gx, unbroadcast(ex, sx), rtol=1e-10, atol=1e-12)
        check(gy, unbroadcast(ey, sy), rtol=1e-10, atol=1e-12)


def test_broadcast_gradients_of_maximum_minimum_where():
    x = np.array([[0.1], [0.7], [-1.0]])
    y = np.array([0.5, -0.3, 2.0, 0.0])
    w, (gx, gy) = _grads(mg.maximum, x, y)
    pick = x > y
    check(gx, np.where(pick, w, 0).sum(1, keepdims=True))
    check(gy, np.where(pick, 0, w).sum(0))
    w, (gx, gy) = _grads(mg.minimum, x, y)
    pick = x < y
    check(gx, np.where(pick, w, 0).sum(1, keepdims=True))
    check(gy, np.where(pick, 0, w).sum(0))
    cond = np.array([[True, False, True, False]])
    w, (gx, gy) = _grads(lambda a, b: mg.where(T(cond), a, b), x, y)
    check(gx, np.where(cond, w, 0).sum(1, keepdims=True))
    check(gy, np.where(cond, 0, w).sum(0))


def test_ties_split_the_gradient_evenly():
    x = T(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = T(np.array([1.0, 1.0, 3.0]), requires_grad=True)
    mg.maximum(x, y).sum().backward()
    check(x.grad, [0.5, 1.0, 0.5])
    check(y.grad, [0.5, 0.0, 0.5])
    x.grad = y.grad = None
    mg.minimum(x, y).sum().backward()
    check(x.grad, [0.5, 0.0, 0.5])
    check(y.grad, [0.5, 1.0, 0.5])
    a = T(np.array([[3.0, 1.0, 3.0], [0.0, 2.0, 1.0]]), requires_grad=True)
    a.amax(dim=1).sum().backward()
    check(a.grad, [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])
    a.grad = None
    a.max().backward()
    check(a.grad, [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])


def test_gradients_keep_input_dtype_under_mixed_dtypes():
    x = T(arr(3, 1, dtype=np.float32), requires_grad=True)
    y = T(arr(4), requires_grad=True)
    (x * y).sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.shape == (3, 1)
    assert y.grad.dtype == np.float64 and y.grad.shape == (4,)
    check(x.grad, np.broadcast_to(y.numpy(), (3, 4)).sum(1, keepdims=True), rtol=1e-6)


def test_gradient_of_matmul_with_batch_broadcasting():
    a, b = arr(2, 1, 3, 4), arr(5, 4, 2)
    w, (ga, gb) = _grads(mg.matmul, a, b)
    check(ga, (w @ np.swapaxes(b, -1, -2)).sum(axis=1, keepdims=True), rtol=1e-10)
    check(gb, (np.swapaxes(a, -1, -2) @ w).sum(axis=0), rtol=1e-10)


def test_gradient_of_reductions_and_softmax():
    a = arr(3, 4)
    w, (ga,) = _grads(lambda t: t.mean(dim=0), a)
    check(ga, np.broadcast_to(w / 3, (3, 4)))
    w, (ga,) = _grads(lambda t: t.var(dim=1, keepdim=True), a)
    check(ga, w * 2 * (a - a.mean(1, keepdims=True)) / 3, rtol=1e-10)
    w, (ga,) = _grads(lambda t: t.softmax(dim=1), a)
    s = np_softmax(a, 1)
    check(ga, s * (w - (w * s).sum(1, keepdims=True)), rtol=1e-10)
    w, (ga,) = _grads(lambda t: t.logsumexp(dim=0), a)
    check(ga, np_softmax(a, 0) * w, rtol=1e-10)


def test_gradient_of_indexing_accumulates_repeats():
    a = arr(4, 3)
    w, (ga,) = _grads(lambda t: t[[0, 2, 0, 0]], a)
    expected = np.zeros_like(a)
    np.add.at(expected, [0, 2, 0, 0], w)
    check(ga, expected)
    mask = a > 0
    w, (ga,) = _grads(lambda t: t[T(mask)], a)
    expected = np.zeros_like(a)
    expected[mask] = w
    check(ga, expected)


# ---------------------------------------------------------------------------- in-place

INPLACE = [
    ("add_", lambda t, o: t.add_(o), lambda a, o: a + o),
    ("sub_", lambda t, o: t.sub_(o), lambda a, o: a - o),
    ("mul_", lambda t, o: t.mul_(o), lambda a, o: a * o),
    ("div_", lambda t, o: t.div_(o), lambda a, o: a / o),
    ("add_-alpha", lambda t, o: t.add_(o, alpha=2.0), lambda a, o: a + 2.0 * o),
    ("sub_-alpha", lambda t, o: t.sub_(o, alpha=3), lambda a, o: a - 3 * o),
    ("iadd", lambda t, o: t.__iadd__(o), lambda a, o: a + o),
    ("imul", lambda t, o: t.__imul__(o), lambda a, o: a * o),
    ("isub", lambda t, o: t.__isub__(o), lambda a, o: a - o),
    ("itruediv", lambda t, o: t.__itruediv__(o), lambda a, o: a / o),
]


@pytest.mark.parametrize("name,op,ref", INPLACE, ids=[i[0] for i in INPLACE])
@pytest.mark.parametrize("other", ["tensor", "bcast", "scalar"])
def test_inplace_arithmetic(name, op, ref, other):
    a = arr(3, 4)
    o = {"tensor": arr(3, 4, lo=0.5), "bcast": arr(4, lo=0.5), "scalar": 1.5}[other]
    t = T(a.copy())
    data = t.numpy()
    v0 = t._version
    result = op(t, T(o) if isinstance(o, np.ndarray) else o)
    assert result is t
    assert t.numpy() is data  # the same array, changed in place
    check(t, ref(a, o))
    assert t._version == v0 + 1


def test_inplace_ops_keep_dtype_and_bump_version_each_time():
    t = mg.ones(3)
    t.add_(T(np.array([1.0, 2.0, 3.0])))  # float64 operand into a float32 tensor
    assert t.dtype == np.float32
    check(t, [2.0, 3.0, 4.0])
    for i in range(3):
        t.mul_(2)
        assert t._version == i + 2
    check(t, [16.0, 24.0, 32.0])


def test_zero_fill_copy():
    a = arr(3, 4)
    t = T(a.copy())
    v = t._version
    assert t.zero_() is t
    check(t, np.zeros((3, 4)))
    assert t._version == v + 1
    assert t.fill_(2.5) is t
    check(t, np.full((3, 4), 2.5))
    assert t._version == v + 2
    t.fill_(T(np.array(-1.0)))
    check(t, np.full((3, 4), -1.0))
    assert t._version == v + 3
    src = arr(4)
    assert t.copy_(T(src)) is t
    check(t, np.broadcast_to(src, (3, 4)))
    assert t._version == v + 4
    f32 = mg.zeros(2, 2)
    f32.copy_(T(np.array([[1.25, 2.5], [3.0, 4.0]])))
    assert f32.dtype == np.float32
    check(f32, [[1.25, 2.5], [3.0, 4.0]])


def test_clamp_relu_inplace():
    a = arr(3, 4)
    t = T(a.copy())
    v = t._version
    assert t.clamp_(-0.5, 0.5) is t
    check(t, np.clip(a, -0.5, 0.5))
    assert t._version == v + 1
    t.clamp_(min=0.1)
    check(t, np.clip(a, 0.1, 0.5))
    t = T(a.copy())
    assert t.relu_() is t
    check(t, np.maximum(a, 0))
    assert t._version == 1



@pytest.mark.parametrize("shape", [(3, 4), (128, 128), (2, 128, 65)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_and_relu_inplace_equal_numpys_maximum_on_each_path(shape, dtype):
    # below, at and above the size from which relu runs its compiled kernel
    a = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    a.reshape(-1)[:4] = [np.nan, -0.0, -np.inf, np.inf]
    want = np.maximum(a, 0)
    x = T(a.copy(), requires_grad=True)
    y = x.relu()
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(want))
    g = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    y.backward(T(g))
    np.testing.assert_array_equal(x.grad.numpy(), g * (want > 0))
    t = T(a.copy())
    t.relu_()
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(want))


@pytest.mark.parametrize("exponent", [2, 2.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_square_by_pow_is_the_exact_square_and_its_gradient(exponent, dtype):
    # the correctly rounded a * a, as PyTorch's x ** 2; NumPy 2.4's power(a, 2) is that too,
    # but NumPy 2.0's, on a CPU with AVX-512, is 1 ulp off for some elements
    a = np.random.default_rng(5).standard_normal(64).astype(dtype)
    a[:4] = [np.nan, -0.0, np.inf, -np.inf]
    x = T(a.copy(), requires_grad=True)
    y = x**exponent
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), a * a)
    np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(a * a))
    g = np.random.default_rng(6).standard_normal(64).astype(dtype)
    y.backward(T(g))
    np.testing.assert_array_equal(x.grad.numpy(), g * 2 * a)
    ints = T(np.arange(-3, 4))
    np.testing.assert_array_equal((ints**2).numpy(), np.arange(-3, 4) ** 2)
    assert (ints**2).dtype == np.int64 and (ints**2.0).dtype == np.float64


def _where_operands():
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((128, 130)).astype(np.float32) for _ in range(2))
    x[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    cond = rng.random((128, 130)) > 0.5
    conds = (cond, cond[:1], cond[:, :1], np.array(True))
    pairs = ((x, y), (x, 0.0), (0.0, y), (x, -0.0), (x, np.float64(2.0)), (x, np.array(-np.inf)),
             (x.astype(np.float64), y), (np.round(x[1:2] * 3).astype(np.int64), 0.5), (x, y[:1]),
             (x[:1], y[:1]), (x.T.copy().T, y))
    return conds, pairs


def test_where_equals_numpys_where_on_each_path():
    # the select kernels (16,640 elements, past their threshold), a broadcast condition, a
    # Python or NumPy scalar on either side, mixed dtypes, and the cases left to NumPy
    conds, pairs = _where_operands()
    for cond in conds:
        for x, y in pairs:
            got = mg.where(T(cond), T(x) if isinstance(x, np.ndarray) else x,
                           T(y) if isinstance(y, np.ndarray) else y).numpy()
            want = np.where(cond, x, y)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_where_and_masked_fill_gradients_on_the_kernel_path():
    conds, ((x, y), *_) = _where_operands()
    g = np.random.default_rng(8).standard_normal(x.shape).astype(np.float32)
    for cond in conds:
        a, b = T(x.copy(), requires_grad=True), T(y.copy(), requires_grad=True)
        mg.where(T(cond), a, b).backward(T(g))
        np.testing.assert_array_equal(a.grad.numpy(), np.where(cond, g, 0.0))
        np.testing.assert_array_equal(b.grad.numpy(), np.where(cond, 0.0, g))
        filled = a.masked_fill(T(cond), -np.inf)
        np.testing.assert_array_equal(filled.numpy(), np.where(cond, -np.inf, x))
        a.grad = None
        filled.backward(T(g))
        np.testing.assert_array_equal(a.grad.numpy(), np.where(cond, 0.0, g))


@pytest.mark.parametrize("n", [100, 20000])
def test_exp_on_each_path_and_its_gradient(n):
    # float32 from 16,384 elements: the compiled kernel, within one ulp of the exact value;
    # float64 and small arrays: NumPy's exp
    rng = np.random.default_rng(11)
    for dtype in (np.float32, np.float64):
        a = (8 * rng.standard_normal(n)).astype(dtype)
        a[:3] = [np.nan, -np.inf, 0.0]
        x = T(a.copy(), requires_grad=True)
        y = x.exp()
        assert y.dtype == dtype
        want = np.exp(a.astype(np.longdouble))
        got = y.numpy().astype(np.longdouble)
        assert np.isnan(got[0]) and got[1] == 0 and got[2] == 1
        ulps = np.abs(got - want)[3:] / np.spacing(want.astype(dtype)).astype(np.longdouble)[3:]
        assert ulps.max() <= (1.01 if dtype == np.float32 and n >= 16384 else 2.5)
        if dtype == np.float64:
            np.testing.assert_array_equal(y.numpy(), np.exp(a))
        g = rng.standard_normal(n).astype(dtype)
        y.backward(T(g))
        np.testing.assert_array_equal(x.grad.numpy(), g * y.numpy())

def test_inplace_on_view_changes_base_and_shares_version():
    a = arr(3, 4)
    base = T(a.copy())
    row = base[1]
    row.mul_(0.0)
    a[1] = 0.0
    check(base, a)
    assert base._version == row._version == 1
    col = base[:, 0]
    col.add_(1.0)
    a[:, 0] += 1.0
    check(base, a)
    assert base._version == 2


def test_inplace_is_recorded_for_autograd():
    x = T(arr(3, lo=0.5), requires_grad=True)
    y = x * 2.0
    y.mul_(x)  # y = 2 x * x
    y.add_(1.0)
    y.sum().backward()
    check(x.grad, 4 * x.numpy())


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_softmax_results_are_contiguous_along_any_dim(name, dim):
    """Along any dim the result is C-contiguous, as PyTorch's is, so ``.view`` of it works
    (also the gradient's: the backward kernels' results); values against NumPy."""
    x = mg.tensor(np.random.default_rng(dim).standard_normal((3, 4, 5)), requires_grad=True)
    y = getattr(mg, name)(x, dim)
    e = np.exp(x.numpy() - x.numpy().max(dim, keepdims=True))
    ref = e / e.sum(dim, keepdims=True)
    np.testing.assert_allclose(y.numpy(), ref if name == "softmax" else np.log(ref),
                               rtol=1e-12, atol=1e-12)
    assert y.numpy().flags.c_contiguous
    (y.view(60) * mg.arange(60.0)).sum().backward()
    assert x.grad.numpy().flags.c_contiguous


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_results_are_contiguous(dim):
    """As PyTorch's, so that ``.view`` of them works; values against NumPy's take, and the
    gradient (repeats summed) against np.add.at."""
    x = mg.tensor(np.random.default_rng(dim).standard_normal((2, 3, 4)), requires_grad=True)
    idx = np.array([0, 1, 1, 0])
    y = mg.index_select(x, dim, mg.tensor(idx))
    np.testing.assert_array_equal(y.numpy(), np.take(x.numpy(), idx, axis=dim))
    assert y.numpy().flags.c_contiguous
    w = np.arange(float(y.numel()))
    (y.view(-1) * mg.tensor(w)).sum().backward()
    ref = np.zeros(x.shape)
    np.add.at(np.moveaxis(ref, dim, 0), idx, np.moveaxis(w.reshape(y.shape), dim, 0))
    np.testing.assert_array_equal(x.grad.numpy(), ref)
