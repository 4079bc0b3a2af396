"""The nn ops of memgrad/ops/nn.py against independent NumPy formulas, their gradients
against finite differences (first and second order, float64), and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
import memgrad.ops.nn as F
from memgrad.autograd import gradcheck, gradgradcheck
from memgrad.autograd.graph import saved_tensors_hooks
from memgrad.errors import ShapeError


def rand(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def T(a, requires_grad=False):
    return mg.tensor(a, requires_grad=requires_grad)


def leaf(*shape, seed=0):
    return T(rand(*shape, seed=seed), requires_grad=True)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def check(fn, *inputs):
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


def saved_shapes_and_dtypes(fn):
    """What ``fn()`` saves for backward, as (shape, dtype) pairs."""
    saved = []

    def pack(t):
        saved.append((t.shape, t.dtype))
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        fn()
    return saved


# ---------------------------------------------------------------------------- linear


@pytest.mark.parametrize("lead", [(), (5,), (2, 3)])
def test_linear_matches_numpy_and_gradchecks(lead):
    x, w, b = rand(*lead, 4), rand(3, 4, seed=1), rand(3, seed=2)
    np.testing.assert_allclose(F.linear(T(x), T(w), T(b)).numpy(), x @ w.T + b, rtol=1e-12)
    np.testing.assert_allclose(F.linear(T(x), T(w)).numpy(), x @ w.T, rtol=1e-12)
    check(F.linear, T(x, True), T(w, True), T(b, True))
    check(lambda x, w: F.linear(x, w), T(x, True), T(w, True))


@pytest.mark.parametrize("compiled", [True, False])
def test_linear_with_its_bias_first_gradchecks(compiled, monkeypatch):
    # the bias broadcast into the output before BLAS adds the product: in one compiled call,
    # or (as with NUMBA_DISABLE_JIT=1) filled by NumPy before Gemm adds to it
    from memgrad.ops import parts

    if not compiled:
        monkeypatch.setattr(parts.Parts, "addmm", None)
    check(lambda x, w, b: F.linear(x, w, b), leaf(2, 3, 4), leaf(5, 4, seed=1),
          leaf(5, seed=2))


def test_linear_keeps_float32_and_saves_only_what_backward_needs():
    x, w = T(rand(8, 4, dtype=np.float32)), T(rand(3, 4, dtype=np.float32))
    assert F.linear(x, w).dtype == np.float32
    only_w = T(w.numpy(), True)
    assert saved_shapes_and_dtypes(lambda: F.linear(x, only_w)) == [((8, 4), np.float32)]
    only_x = T(x.numpy(), True)
    assert saved_shapes_and_dtypes(lambda: F.linear(only_x, w)) == [((3, 4), np.float32)]
    b = T(np.zeros(3, np.float32), True)
    assert saved_shapes_and_dtypes(lambda: F.linear(x, w, b)) == []


def test_linear_gradients_sum_over_leading_dims():
    x, w, b = leaf(2, 3, 4), leaf(5, 4, seed=1), leaf(5, seed=2)
    g = rand(2, 3, 5, seed=3)
    F.linear(x, w, b).backward(T(g))
    np.testing.assert_allclose(x.grad.numpy(), g @ w.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), g.reshape(6, 5).T @ x.numpy().reshape(6, 4),
                               rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), g.sum(axis=(0, 1)), rtol=1e-12)


def test_linear_errors_name_both_shapes():
    with pytest.raises(ShapeError, match=r"\(2, 4\).*\(3, 5\)"):
        F.linear(T(rand(2, 4)), T(rand(3, 5)))
    with pytest.raises(ShapeError, match="bias"):
        F.linear(T(rand(2, 4)), T(rand(3, 4)), T(rand(4)))
    for bias in (0.5, np.float32(0.5), rand(3)):  # not a Tensor, as PyTorch's TypeError
        with pytest.raises(TypeError, match=r"linear: bias must be a Tensor of shape \(3,\)"):
            F.linear(T(rand(2, 4)), T(rand(3, 4)), bias)


# ---------------------------------------------------------------------------- gelu


def gelu_exact(x):
    return np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(
        x.shape
    )


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("approximate, ref", [("none", gelu_exact), ("tanh", gelu_tanh)])
def test_gelu_matches_formula(approximate, ref):
    x = 3 * rand(4, 5)
    np.testing.assert_allclose(F.gelu(T(x), approximate).numpy(), ref(x), rtol=1e-12,
                               atol=1e-15)
    y32 = F.gelu(T(x.astype(np.float32)), approximate=approximate)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), ref(x.astype(np.float32).astype(np.float64)),
                               rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_first_second_and_third_derivatives(approximate):
    def fn(x):
        return F.gelu(x, approximate=approximate)

    check(fn, leaf(3, 4))
    # the second derivative is itself differentiable: gradgradcheck of the first gradient
    x = leaf(3, 4)

    def first(x):
        with mg.enable_grad():  # gradcheck evaluates fn under no_grad
            (gx,) = mg.autograd.grad(fn(x).sum(), x, create_graph=True)
        return gx

    check(first, x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_of_a_large_tensor_in_parts_equals_one_kernel_call(approximate):
    # large enough that the kernels run in parts on several threads (flat_kernel_in_parts)
    from memgrad._kernels import activation

    x, g = rand(700, 1000, dtype=np.float32), rand(700, 1000, seed=1, dtype=np.float32)
    t = T(x, requires_grad=True)
    y = F.gelu(t, approximate=approximate)
    y.backward(T(g))
    tanh = approximate == "tanh"
    fwd = (activation.gelu_tanh if tanh else activation.gelu)(x.reshape(-1))
    bwd = (activation.gelu_tanh_backward if tanh else activation.gelu_backward)(
        g.reshape(-1), x.reshape(-1))
    np.testing.assert_array_equal(y.numpy(), fwd.reshape(x.shape))
    np.testing.assert_array_equal(t.grad.numpy(), bwd.reshape(x.shape))
    np.testing.assert_allclose(y.numpy(), gelu_tanh(x.astype(np.float64)) if tanh
                               else gelu_exact(x.astype(np.float64)), rtol=2e-6, atol=1e-7)


def test_gelu_rejects_an_unknown_approximation():
    with pytest.raises(ValueError, match="'none' or 'tanh'.*'fast'"):
        F.gelu(T(rand(3)), approximate="fast")
    with pytest.raises(TypeError, match="float32 or float64"):
        F.gelu(mg.tensor([1, 2]))


# ---------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax_match_formula(dim):
    x = 4 * rand(3, 4, 5)
    np.testing.assert_allclose(F.softmax(T(x), dim).numpy(), np_softmax(x, dim), rtol=1e-12)
    np.testing.assert_allclose(F.log_softmax(T(x), dim).numpy(), np.log(np_softmax(x, dim)),
                               rtol=1e-12, atol=1e-13)
    check(lambda x: F.softmax(x, dim), leaf(3, 4, 2))
    check(lambda x: F.log_softmax(x, dim), leaf(3, 4, 2))


@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_of_a_large_tensor_in_parts_equals_one_kernel_call(dim, monkeypatch):
    # rows enough to run in parts on several threads (NOTE [ Row parts ]); each part is one
    # kernel call on its rows, so the result is the one of a single call
    from memgrad._kernels import softmax as S
    from memgrad.ops import parts

    sizes = []
    real = parts.kernel_in_parts
    monkeypatch.setattr(parts, "kernel_in_parts",
                        lambda kernel, blocks, *a: sizes.append(a[1]) or real(kernel, blocks, *a))
    x, g = rand(600, 700, dtype=np.float32), rand(600, 700, seed=1, dtype=np.float32)
    rows = np.ascontiguousarray(np.moveaxis(x, dim, -1))
    grows = np.ascontiguousarray(np.moveaxis(g, dim, -1))
    for op, fwd, bwd in ((F.softmax, S.softmax_forward, S.softmax_backward),
                         (F.log_softmax, S.log_softmax_forward, S.log_softmax_backward)):
        t = T(x, requires_grad=True)
        y = op(t, dim)
        y.backward(T(g))
        want = fwd(rows)
        np.testing.assert_array_equal(y.numpy(), np.moveaxis(want, -1, dim))
        np.testing.assert_array_equal(t.grad.numpy(), np.moveaxis(bwd(grows, want), -1, dim))
    assert len(sizes) == 4 and min(sizes) >= parts.PARTS_MIN_MACS


def test_softmax_masked_entries_and_float32():
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, 5.0]], dtype=np.float32)
    y = F.softmax(T(x), -1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), [[1 / (1 + math.e), 0, math.e / (1 + math.e)],
                                           [0, 0, 1]], rtol=1e-6)


def test_softmax_rejects_integer_input_and_tuple_dims():
    with pytest.raises(TypeError, match="float32 or float64"):
        F.softmax(mg.tensor([1, 2]), 0)
    with pytest.raises(TypeError, match="dim must be an int"):
        F.softmax(T(rand(2, 2)), (0, 1))


# ---------------------------------------------------------------------------- dropout


def test_dropout_is_reproducible_and_replays_from_a_saved_state():
    x = T(np.ones((50, 40)))
    mg.manual_seed(3)
    a = F.dropout(x, 0.3)
    mg.manual_seed(3)
    b = F.dropout(x, 0.3)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    state = mg.get_rng_state()
    c = F.dropout(x, 0.3)
    mg.set_rng_state(state)
    np.testing.assert_array_equal(F.dropout(x, 0.3).numpy(), c.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())


def test_dropout_scales_kept_elements_and_preserves_the_mean():
    mg.manual_seed(0)
    p = 0.3
    y = F.dropout(T(np.ones(200_000, np.float32)), p).numpy()
    assert y.dtype == np.float32
    assert set(np.unique(y)) == {0.0, np.float32(1 / (1 - p))}
    assert abs((y == 0).mean() - p) < 0.005
    assert abs(y.mean() - 1.0) < 0.01


def test_dropout_gradient_is_the_mask_and_the_mask_is_saved_as_bool():
    x = leaf(30, 20)
    mg.manual_seed(1)
    saved = saved_shapes_and_dtypes(lambda: F.dropout(x, 0.5))
    assert saved == [((30, 20), np.bool_)]
    mg.manual_seed(1)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    kept = y.numpy() != 0
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, 2.0, 0.0))

    def seeded(x):
        with mg.random.fork_rng():
            mg.manual_seed(5)
            return F.dropout(x, 0.4)

    check(seeded, leaf(4, 5))


def test_dropout_p_zero_or_eval_returns_the_input_and_p_one_gives_zeros():
    x = leaf(3, 4)
    assert F.dropout(x, 0.0) is x
    assert F.dropout(x, 0.7, training=False) is x
    y = F.dropout(x, 1.0)
    np.testing.assert_array_equal(y.numpy(), 0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_rejects_p_outside_0_1(p):
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(T(rand(3)), p)


# ---------------------------------------------------------------------------- layer_norm


def layer_norm_ref(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def test_layer_norm_matches_mean_var_formula():
    x, w, b = 3 + 2 * rand(2, 3, 4), rand(4, seed=1), rand(4, seed=2)
    np.testing.assert_allclose(F.layer_norm(T(x), 4, T(w), T(b)).numpy(),
                               layer_norm_ref(x, 1, w, b), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(F.layer_norm(T(x), (3, 4), eps=0.1).numpy(),
                               layer_norm_ref(x, 2, eps=0.1), rtol=1e-11, atol=1e-12)
    y32 = F.layer_norm(T(x.astype(np.float32)), [4], T(w.astype(np.float32)))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), layer_norm_ref(x, 1, w), rtol=1e-5, atol=1e-5)


def test_layer_norm_gradients_first_and_second_order():
    check(lambda x, w, b: F.layer_norm(x, 4, w, b), leaf(2, 3, 4), leaf(4, seed=1),
          leaf(4, seed=2))
    check(lambda x, w: F.layer_norm(x, (3, 4), w), leaf(2, 3, 4), leaf(3, 4, seed=1))
    check(lambda x: F.layer_norm(x, 5), leaf(3, 5))


def test_layer_norm_saves_its_input_not_the_normalized_tensor():
    x, w, b = leaf(6, 8), leaf(8, seed=1), leaf(8, seed=2)
    saved = saved_shapes_and_dtypes(lambda: F.layer_norm(x, 8, w, b))
    assert sorted(saved) == [((6, 8), np.float64), ((8,), np.float64)]


def test_layer_norm_errors():
    with pytest.raises(ShapeError, match=r"normalized_shape=\[5\].*\(2, 4\)"):
        F.layer_norm(T(rand(2, 4)), 5)
    with pytest.raises(ShapeError, match="weight"):
        F.layer_norm(T(rand(2, 4)), 4, T(rand(3)))


# ---------------------------------------------------------------------------- embedding


def test_embedding_looks_up_rows_and_sums_gradients_of_repeats():
    w = leaf(6, 3)
    idx = np.array([[1, 4, 1], [5, 0, 1]])
    y = F.embedding(T(idx), w)
    np.testing.assert_array_equal(y.numpy(), w.numpy()[idx])
    g = rand(2, 3, 3, seed=1)
    y.backward(T(g))
    want = np.zeros((6, 3))
    np.add.at(want, idx.ravel(), g.reshape(-1, 3))
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)
    check(lambda w: F.embedding(T(idx), w) ** 2, leaf(6, 3))


@pytest.mark.parametrize("padding_idx", [1, -5])
def test_embedding_padding_row_gets_no_gradient(padding_idx):
    w = leaf(6, 3)
    idx = T(np.array([1, 2, 1, 0]))
    y = F.embedding(idx, w, padding_idx=padding_idx)
    np.testing.assert_array_equal(y.numpy()[0], w.numpy()[1])  # the forward is unchanged
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [1, 0, 1, 0, 0, 0])


def test_embedding_errors():
    w = T(rand(4, 2))
    with pytest.raises(IndexError, match="index 4 is out of range.*4 rows"):
        F.embedding(T(np.array([0, 4])), w)
    with pytest.raises(IndexError, match="index -1"):
        F.embedding(T(np.array([-1])), w)
    with pytest.raises(TypeError, match="integer indices"):
        F.embedding(T(np.array([0.0])), w)
    with pytest.raises(ValueError, match="padding_idx"):
        F.embedding(T(np.array([0])), w, padding_idx=4)


# ---------------------------------------------------------------------------- losses


def ce_ref(x, t, ignore_index=-100, smoothing=0.0):
    """Per-row cross-entropy by the log-sum-exp formula (x is (N, C))."""
    out = []
    for row, k in zip(x, t):
        if k == ignore_index:
            out.append(0.0)
            continue
        m = row.max()
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        nll = lse - row[k]
        smooth = lse - row.mean()
        out.append((1 - smoothing) * nll + smoothing * smooth)
    return np.array(out)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_matches_logsumexp_formula_with_reductions(smoothing):
    x = 3 * rand(6, 5)
    t = np.array([0, 4, -100, 2, 1, -100])
    per = ce_ref(x, t, smoothing=smoothing)
    kw = {"label_smoothing": smoothing}
    np.testing.assert_allclose(F.cross_entropy(T(x), T(t), reduction="none", **kw).numpy(), per,
                               rtol=1e-12)
    np.testing.assert_allclose(F.cross_entropy(T(x), T(t), reduction="sum", **kw).item(),
                               per.sum(), rtol=1e-12)
    # the mean is over the 4 targets that are not ignored
    np.testing.assert_allclose(F.cross_entropy(T(x), T(t), **kw).item(), per.sum() / 4,
                               rtol=1e-12)
    for reduction in ("mean", "sum", "none"):
        check(lambda x, reduction=reduction: F.cross_entropy(x, T(t), reduction=reduction, **kw),
              leaf(6, 5))


def test_cross_entropy_ignored_rows_get_no_gradient_and_custom_ignore_index():
    x = leaf(4, 3)
    t = T(np.array([2, 0, 1, 0]))
    F.cross_entropy(x, t, ignore_index=0).backward()
    np.testing.assert_array_equal(x.grad.numpy()[[1, 3]], 0)
    p = np_softmax(x.numpy(), 1)
    want = (p[[0, 2]] - np.eye(3)[[2, 1]]) / 2
    np.testing.assert_allclose(x.grad.numpy()[[0, 2]], want, rtol=1e-12)


def test_cross_entropy_spatial_and_unbatched_inputs():
    x = rand(2, 3, 4, 5)
    t = np.random.default_rng(1).integers(0, 3, (2, 4, 5))
    per = ce_ref(np.moveaxis(x, 1, -1).reshape(-1, 3), t.reshape(-1)).reshape(2, 4, 5)
    np.testing.assert_allclose(F.cross_entropy(T(x), T(t), reduction="none").numpy(), per,
                               rtol=1e-12)
    check(lambda x: F.cross_entropy(x, T(t)), leaf(2, 3, 4, 5))
    row = rand(7)
    np.testing.assert_allclose(F.cross_entropy(T(row), T(np.array(3))).item(),
                               ce_ref(row[None], [3])[0], rtol=1e-12)


def test_cross_entropy_float32_and_all_ignored():
    x = T(rand(3, 4, dtype=np.float32))
    assert F.cross_entropy(x, T(np.array([0, 1, 2]))).dtype == np.float32
    assert math.isnan(F.cross_entropy(x, T(np.full(3, -100))).item())


def test_cross_entropy_errors_name_shapes_and_dtypes():
    x = T(rand(4, 3))
    with pytest.raises(ShapeError, match=r"input of shape \(4, 3\).*\(4,\).*\(3,\)"):
        F.cross_entropy(x, T(np.array([0, 1, 2])))
    with pytest.raises(TypeError, match="class indices.*bool"):
        F.cross_entropy(x, T(np.array([True, False, True, True])))
    with pytest.raises(ShapeError, match=r"class-probability targets.*\(4, 3\).*\(4,\)"):
        F.cross_entropy(x, T(rand(4)))
    with pytest.raises(IndexError, match="target 3 is out of bounds for 3 classes"):
        F.cross_entropy(x, T(np.array([0, 1, 2, 3])))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x, T(np.array([0, 1, 2, 0])), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, T(np.array([0, 1, 2, 0])), label_smoothing=1.5)


def test_nll_loss_equals_cross_entropy_of_log_softmax():
    x = rand(5, 4)
    t = T(np.array([3, -100, 0, 1, 1]))
    for reduction in ("mean", "sum", "none"):
        a = F.nll_loss(F.log_softmax(T(x), 1), t, reduction=reduction).numpy()
        b = F.cross_entropy(T(x), t, reduction=reduction).numpy()
        np.testing.assert_allclose(a, b, rtol=1e-12)
    logp = rand(5, 4)
    np.testing.assert_allclose(F.nll_loss(T(logp), t, reduction="none").numpy(),
                               [-logp[0, 3], 0, -logp[2, 0], -logp[3, 1], -logp[4, 1]])
    check(lambda x: F.nll_loss(x, t), leaf(5, 4))


def test_mse_loss_reductions_and_gradients():
    a, b = rand(3, 4), rand(3, 4, seed=1)
    np.testing.assert_allclose(F.mse_loss(T(a), T(b)).item(), ((a - b) ** 2).mean())
    np.testing.assert_allclose(F.mse_loss(T(a), T(b), reduction="sum").item(), ((a - b) ** 2).sum())
    np.testing.assert_allclose(F.mse_loss(T(a), T(b), reduction="none").numpy(), (a - b) ** 2)
    check(F.mse_loss, leaf(3, 4), leaf(3, 4, seed=1))
    check(lambda x, y: F.mse_loss(x, y, reduction="sum"), leaf(3, 4), leaf(3, 4, seed=1))
    with pytest.warns(UserWarning, match="differs from input"):
        F.mse_loss(T(a), T(b[0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mse_loss_in_two_ops_equals_the_composite(dtype, reduction):
    # NOTE [ Squared error ]: one op each way; the sum of the squares in float64, the
    # gradient the composite's arithmetic bit for bit
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((5, 6, 7)).astype(dtype) for _ in range(2))
    x, y = T(a, True), T(b, True)
    loss = F.mse_loss(x, y, reduction=reduction)
    assert loss.grad_fn.name() in ("SquaredErrorSumBackward", "DivBackward")
    exact = np.sum((a - b).astype(np.float64) ** 2) / (a.size if reduction == "mean" else 1)
    assert loss.dtype == dtype
    np.testing.assert_allclose(loss.item(), exact, rtol=1e-6 if dtype == np.float32 else 1e-13)
    loss.backward()
    xc, yc = T(a, True), T(b, True)
    d = xc - yc
    ((d * d).mean() if reduction == "mean" else (d * d).sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), xc.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), yc.grad.numpy())


def test_mse_loss_second_derivatives_and_its_composite_cases():
    check(lambda x, y: F.mse_loss(x, y) * F.mse_loss(x, y), leaf(3, 4), leaf(3, 4, seed=1))
    x = leaf(3, 4)
    assert gradgradcheck(lambda a: F.mse_loss(a, T(rand(3, 4, seed=2))), (x,))
    a, b = rand(3, 4), rand(3, 4, seed=1)
    # a target of another dtype, an array target, empty inputs: the composite
    mixed = F.mse_loss(T(a.astype(np.float32)), T(b))
    np.testing.assert_allclose(mixed.item(), ((a.astype(np.float32) - b) ** 2).mean(), rtol=1e-6)
    assert F.mse_loss(T(a), b).grad_fn is None
    assert np.isnan(F.mse_loss(T(np.zeros((0, 2))), T(np.zeros((0, 2)))).item())


# ---------------------------------------------------------------------------- attention


def attention_ref(q, k, v, causal, scale=None, mask=None):
    s = q @ np.swapaxes(k, -1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return np_softmax(s, -1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_explicit_softmax(causal):
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 6, 8, seed=1), rand(2, 3, 6, 5, seed=2)
    out = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=causal)
    np.testing.assert_allclose(out.numpy(), attention_ref(q, k, v, causal), rtol=1e-12)
    out = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=causal, scale=0.3)
    np.testing.assert_allclose(out.numpy(), attention_ref(q, k, v, causal, 0.3), rtol=1e-12)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
          leaf(2, 3, 4), leaf(2, 5, 4, seed=1), leaf(2, 5, 3, seed=2))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_query_whose_keys_are_all_masked_attends_to_nothing(kind):
    # its output row is 0 and its gradients are finite, as PyTorch's safe softmax gives
    # (a softmax over -inf alone would be NaN, and NaN in every gradient)
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 3, seed=2)
    keep = np.ones((2, 3, 5), bool)
    keep[0, 1] = False
    keep[1, 2, :4] = False
    mask = T(keep) if kind == "bool" else T(np.where(keep, 0.0, -np.inf))
    out = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=mask)
    with np.errstate(invalid="ignore"):  # the reference's softmax over -inf alone: NaN
        expected = attention_ref(q, k, v, False, mask=keep)
    expected[0, 1] = 0.0
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-15)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
          leaf(2, 3, 4), leaf(2, 5, 4, seed=1), leaf(2, 5, 3, seed=2))


@pytest.mark.parametrize("sizes", [(9, 9), (7, 11), (11, 5)])
def test_causal_attention_skips_blocks_with_the_values_and_gradients_of_the_full_one(
        monkeypatch, sizes):
    # blocks of 2 rows: the causal products skip blocks; values and gradients as the
    # explicit softmax's, and the same with one block (nothing skipped)
    from memgrad.ops import nn as ops_nn

    length, source = sizes
    q, k, v = rand(2, 3, length, 4), rand(2, 3, source, 4, seed=1), rand(2, 3, source, 5, seed=2)
    g = rand(2, 3, length, 5, seed=3)
    grads = []
    for block in (2, 64):
        monkeypatch.setattr(ops_nn, "CAUSAL_BLOCK", block)
        ts = [mg.tensor(a, requires_grad=True) for a in (q, k, v)]
        out = F.scaled_dot_product_attention(*ts, is_causal=True)
        np.testing.assert_allclose(out.numpy(), attention_ref(q, k, v, True), rtol=1e-12)
        out.backward(T(g))
        grads.append([t.grad.numpy() for t in ts])
    for small, whole in zip(*grads):
        np.testing.assert_allclose(small, whole, rtol=1e-12, atol=1e-14)
    monkeypatch.setattr(ops_nn, "CAUSAL_BLOCK", 2)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          leaf(1, 5, 2), leaf(1, 6, 2, seed=1), leaf(1, 6, 3, seed=2))


def test_causal_attention_of_split_heads_merges_them_back_without_copies():
    # q, k, v as a transformer splits them from (n, t, h * d) projections: the output and
    # the gradients of the projections come in that layout, so merging the heads is a view
    n, t, h, d = 2, 5, 3, 4
    xs = [mg.tensor(rand(n, t, h * d, seed=i), requires_grad=True) for i in range(3)]
    q, k, v = (x.reshape(n, t, h, d).transpose(1, 2) for x in xs)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    merged = y.transpose(1, 2).reshape(n, t, h * d)
    assert np.shares_memory(merged.numpy(), y.numpy())
    a = [x.numpy().reshape(n, t, h, d).transpose(0, 2, 1, 3) for x in xs]
    np.testing.assert_allclose(y.numpy(), attention_ref(*a, True), rtol=1e-12)
    g = rand(n, t, h * d, seed=5)
    merged.backward(T(g))
    want = [mg.tensor(x.numpy(), requires_grad=True) for x in xs]
    qc, kc, vc = (w.reshape(n, t, h, d).transpose(1, 2).contiguous() for w in want)
    F.scaled_dot_product_attention(qc, kc, vc, is_causal=True).transpose(1, 2).reshape(
        n, t, h * d).backward(T(g))
    for x, w in zip(xs, want):
        np.testing.assert_allclose(x.grad.numpy(), w.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_causal_matmul_rejects_operands_that_do_not_fit():
    from memgrad.ops.nn import causal_matmul

    with pytest.raises(ShapeError, match="causal_matmul: .*do not fit form 'ab'"):
        causal_matmul(T(rand(3, 4)), T(rand(3, 2)), form="ab", block=2)
    with pytest.raises(ShapeError, match="one batch shape"):
        causal_matmul(T(rand(2, 3, 4)), T(rand(3, 3, 4)), form="abT", block=2)
    with pytest.raises(ValueError, match="form must be 'abT', 'ab' or 'aTb', got 'ba'"):
        causal_matmul(T(rand(3, 4)), T(rand(3, 4)), form="ba", block=2)
    with pytest.raises(ValueError, match="block must be a positive int, got 0"):
        causal_matmul(T(rand(3, 4)), T(rand(3, 4)), form="abT", block=0)


def test_attention_with_a_bool_mask_and_errors():
    q, k, v = rand(3, 4), rand(5, 4, seed=1), rand(5, 2, seed=2)
    mask = np.random.default_rng(3).random((3, 5)) < 0.6
    mask[:, 0] = True
    out = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(mask))
    np.testing.assert_allclose(out.numpy(), attention_ref(q, k, v, False, mask=mask),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=T(mask), is_causal=True)
    with pytest.raises(ShapeError, match="do not fit"):
        F.scaled_dot_product_attention(T(q), T(k), T(rand(4, 2)))


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_linear_adds_its_bias_and_weight_gradient_inside_the_gemm(dtype, compiled,
                                                                       monkeypatch):
    # the bias is broadcast into the output before the GEMM adds the product to it (NOTE [ A
    # linear layer's bias first ]: compiled, or filled by NumPy before Gemm, which splits a
    # large product over the cores); the weight gradient is added straight into an
    # existing .grad
    from memgrad.ops import nn as ops_nn
    from memgrad.ops import parts

    if not compiled:
        monkeypatch.setattr(parts.Parts, "addmm", None)
    gemms = []
    real = parts.Gemm
    monkeypatch.setattr(parts, "Gemm", lambda *arrays: gemms.append(arrays[2].shape)
                        or real(*arrays))

    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 64, 256)).astype(dtype)
    w = rng.standard_normal((160, 256)).astype(dtype)
    b = rng.standard_normal(160).astype(dtype)
    assert 256 * w.size >= ops_nn.GEMM_MIN_MACS
    g = rng.standard_normal((4, 64, 160)).astype(dtype)
    xt, wt, bt = (mg.tensor(a, requires_grad=True) for a in (x, w, b))
    start = rng.standard_normal(w.shape).astype(dtype)
    wt.grad = mg.tensor(start.copy())
    out = mg.nn.functional.linear(xt, wt, bt)
    out.backward(mg.tensor(g))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out.numpy(), x @ w.T + b, rtol=tol, atol=tol)
    g2, x2 = g.reshape(-1, 160), x.reshape(-1, 256)
    np.testing.assert_allclose(wt.grad.numpy(), start + g2.T @ x2, rtol=tol, atol=tol)
    np.testing.assert_allclose(xt.grad.numpy(), g @ w, rtol=tol, atol=tol)
    np.testing.assert_allclose(bt.grad.numpy(), g2.sum(0), rtol=tol, atol=tol)
    # the forward's Gemm without the compiled call; the weight gradient's into .grad
    assert gemms == ([] if compiled else [(256, 160)]) + [w.shape]
