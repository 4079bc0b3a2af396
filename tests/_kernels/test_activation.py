"""The activation kernels against their NumPy references, over drawn sizes, scales and
dtypes (the references run in float64)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import activation as A

SETTINGS = settings(max_examples=25, deadline=None)
DTYPES = st.sampled_from([np.float32, np.float64])


def _close(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-12 if dtype == np.float64 else 1e-5
    scale = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-2 * scale)


def _draw(seed, n, scale, dtype):
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal(n)).astype(dtype), rng.standard_normal(n).astype(dtype)


common = given(
    n=st.integers(0, 3000),
    scale=st.sampled_from([0.1, 1.0, 4.0, 12.0]),
    dtype=DTYPES,
    seed=st.integers(0, 2**32 - 1),
)


@SETTINGS
@common
def test_gelu_matches_reference(n, scale, dtype, seed):
    x, _ = _draw(seed, n, scale, dtype)
    _close(A.gelu(x), A.gelu_reference(x.astype(np.float64)), dtype)


@SETTINGS
@common
def test_gelu_backward_matches_reference(n, scale, dtype, seed):
    x, g = _draw(seed, n, scale, dtype)
    want = A.gelu_backward_reference(g.astype(np.float64), x.astype(np.float64))
    _close(A.gelu_backward(g, x), want, dtype)


@SETTINGS
@common
def test_gelu_tanh_matches_reference(n, scale, dtype, seed):
    x, _ = _draw(seed, n, scale, dtype)
    _close(A.gelu_tanh(x), A.gelu_tanh_reference(x.astype(np.float64)), dtype)


@SETTINGS
@common
def test_gelu_tanh_backward_matches_reference(n, scale, dtype, seed):
    x, g = _draw(seed, n, scale, dtype)
    want = A.gelu_tanh_backward_reference(g.astype(np.float64), x.astype(np.float64))
    _close(A.gelu_tanh_backward(g, x), want, dtype)


@SETTINGS
@common
def test_sigmoid_matches_reference(n, scale, dtype, seed):
    x, _ = _draw(seed, n, scale, dtype)
    _close(A.sigmoid(x), A.sigmoid_reference(x.astype(np.float64)), dtype)


def test_float32_sigmoid_is_within_a_few_ulp_everywhere():
    x = np.concatenate([np.linspace(-12, 12, 24001), np.geomspace(1e-30, 0.5, 2001),
                        [0.0, -0.0]]).astype(np.float32)
    want = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    assert np.all(np.abs(A.sigmoid(x) - want) <= 3 * np.spacing(np.abs(want)))
    for v, s in ((np.inf, 1.0), (-np.inf, 0.0)):
        assert A.sigmoid(np.array([v], np.float32))[0] == s


@SETTINGS
@common
def test_sigmoid_backward_matches_reference(n, scale, dtype, seed):
    x, g = _draw(seed, n, scale, dtype)
    y = (0.5 * (1 + np.tanh(0.5 * x))).astype(dtype)
    want = A.sigmoid_backward_reference(g.astype(np.float64), y.astype(np.float64))
    _close(A.sigmoid_backward(g, y), want, dtype)


@SETTINGS
@common
def test_exp_is_within_one_ulp_of_the_exact_value(n, scale, dtype, seed):
    x, _ = _draw(seed, n, scale * 8, dtype)
    out = np.full_like(x, 7.0)
    A.exp_into(x, out)
    np.testing.assert_array_equal(A.exp(x), out)
    assert out.dtype == dtype
    want = np.exp(x.astype(np.longdouble))
    finite = want < np.finfo(dtype).max
    spacing = np.spacing(want.astype(dtype)).astype(np.longdouble)
    assert (np.abs(out.astype(np.longdouble) - want) / spacing)[finite].max(initial=0) <= 1.01
    assert np.isinf(out[~finite]).all()


def test_exp_of_special_values():
    for dtype in (np.float32, np.float64):
        x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1e4, 1e4, 88.0, -103.0], dtype)
        with np.errstate(over="ignore", under="ignore"):
            want = A.exp_reference(x)
        got = A.exp(x)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        finite = np.isfinite(want) & (want > np.finfo(dtype).tiny)
        np.testing.assert_array_equal(got[~finite & ~np.isnan(want)],
                                      want[~finite & ~np.isnan(want)])
        np.testing.assert_allclose(got[finite], want[finite], rtol=3e-7 if dtype == np.float32
                                   else 3e-16)
    with pytest.raises(ValueError, match="out must have the input's shape"):
        A.exp_into(x, np.empty(3, np.float64))


@SETTINGS
@common
def test_relu_matches_reference_exactly(n, scale, dtype, seed):
    x, _ = _draw(seed, n, scale, dtype)
    out = np.empty_like(x)
    A.relu_into(x, out)
    np.testing.assert_array_equal(out, A.relu_reference(x))
    np.testing.assert_array_equal(A.relu(x), out)
    assert A.relu(x).dtype == dtype
    A.relu_into(x, x)  # in place
    np.testing.assert_array_equal(x, out)


def test_relu_keeps_nan_and_clears_the_sign_of_zero():
    for dtype in (np.float32, np.float64):
        x = np.array([np.nan, -0.0, 0.0, -np.inf, np.inf, -1.5, 2.5, -1e-40], dtype)
        out = np.full_like(x, 7.0)
        A.relu_into(x, out)
        want = A.relu_reference(x)
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(np.signbit(out), np.signbit(want))
        frozen = x.copy()
        frozen.flags.writeable = False  # a read-only input (a saved tensor) compiles too
        out = np.full_like(x, 7.0)
        A.relu_into(frozen, out)
        np.testing.assert_array_equal(out, want)
        A.relu_into(x, x)  # in place: its own loop
        np.testing.assert_array_equal(x, want)
        np.testing.assert_array_equal(np.signbit(x), np.signbit(want))
    with pytest.raises(ValueError, match="out must have the input's shape"):
        A.relu_into(x, out[:3])


@SETTINGS
@common
def test_relu_backward_matches_reference_exactly(n, scale, dtype, seed):
    x, g = _draw(seed, n, scale, dtype)
    y = np.maximum(x, 0)
    np.testing.assert_array_equal(A.relu_backward(g, y), A.relu_backward_reference(g, y))
    assert A.relu_backward(g, y).dtype == dtype


def test_relu_backward_keeps_nan_and_the_sign_of_zero():
    g = np.array([np.nan, np.nan, -2.0, -2.0, np.inf, 3.0], np.float32)
    y = np.array([0.0, 1.0, 0.0, 1.0, 0.0, np.nan], np.float32)
    with np.errstate(invalid="ignore"):  # inf * 0, as NumPy's reference does
        got, want = A.relu_backward(g, y), A.relu_backward_reference(g, y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_gelu_float32_is_relatively_accurate_in_the_negative_tail():
    # x * Phi(x) is tiny there; the float32 path keeps its relative accuracy (PyTorch's
    # 0.5 x (1 + erf(x / sqrt 2)) in float32 cancels to 0 below x = -5.5)
    x = np.array([-13.0, -9.0, -6.0, -3.0, -1e-3, 0.0, 1e-3, 2.0, 7.0], dtype=np.float32)
    want = [float(v) * 0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x]
    np.testing.assert_allclose(A.gelu(x), want, rtol=3e-7, atol=0)


def test_kernels_pass_nan_through():
    x = np.array([np.nan, 1.0], dtype=np.float32)
    for out in (A.gelu(x), A.gelu_tanh(x), A.gelu_backward(np.ones(2, np.float32), x),
                A.gelu_tanh_backward(np.ones(2, np.float32), x), A.sigmoid(x)):
        assert np.isnan(out[0]) and np.isfinite(out[1])


def _ulps(got, want):
    """|got - want| in units of the float32 spacing at want (float64 want)."""
    spacing = np.spacing(np.maximum(np.abs(want), np.finfo(np.float32).tiny).astype(np.float32))
    return np.abs(got.astype(np.float64) - want) / spacing.astype(np.float64)


def test_float32_gelu_tanh_and_its_backward_are_rounded_once_everywhere():
    # x * sigmoid(2u) in float64 (np.exp; the tanh reference cancels to 0 for x < -6)
    x = np.concatenate([np.linspace(-12, 12, 48001), -np.geomspace(1e-30, 12, 4001),
                        np.geomspace(1e-30, 12, 4001)]).astype(np.float32)
    v = x.astype(np.float64)
    u = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
    s = 1 / (1 + np.exp(-2 * u))
    du = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * v * v)
    assert _ulps(A.gelu_tanh(x), v * s).max() <= 0.51
    d = s + 2 * v * du * s * (1 - s)
    assert _ulps(A.gelu_tanh_backward(np.ones_like(x), x), d).max() <= 0.51


def test_float32_exact_gelu_is_within_3e_7_relative_everywhere():
    x = np.concatenate([np.linspace(-13, 8, 21001), -np.geomspace(1e-30, 13, 2001)]).astype(
        np.float32)
    v = x.astype(np.float64)
    want = v * 0.5 * np.array([math.erfc(-t / math.sqrt(2)) for t in v])
    np.testing.assert_allclose(A.gelu(x), want, rtol=3e-7, atol=0)


def test_gelu_into_kernels_fill_out_and_reject_an_out_of_another_shape():
    x, g = _draw(0, 50, 2.0, np.float32)
    out = np.empty_like(x)
    A.gelu_tanh_into(x, out)
    np.testing.assert_array_equal(out, A.gelu_tanh(x))
    A.relu_backward_into(g, x, out)
    np.testing.assert_array_equal(out, A.relu_backward_reference(g, x))
    A.gelu_backward_into(g, x, out)
    _close(out, A.gelu_backward_reference(g.astype(np.float64), x.astype(np.float64)),
           np.float32)
    for call in (lambda: A.gelu_into(x, out[:49]), lambda: A.gelu_tanh_into(x, out[:49]),
                 lambda: A.gelu_backward_into(g[:49], x, out),
                 lambda: A.gelu_tanh_backward_into(g, x, out[:49]),
                 lambda: A.relu_backward_into(g, x, out[:49])):
        with pytest.raises(ValueError, match="out must have the input's shape"):
            call()
