"""The row-wise softmax kernels and ``fast_exp`` against their NumPy references, over drawn
shapes, scales and dtypes (the references run in float64)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from memgrad._kernels import softmax as S

SETTINGS = settings(max_examples=25, deadline=None)


def _close(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-12 if dtype == np.float64 else 2e-5
    scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@st.composite
def logits(draw):
    """(N, D) rows in ``dtype``, some entries -inf (masked), never a whole row."""
    n, d = draw(st.integers(0, 12)), draw(st.integers(1, 300))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0, 30.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = scale * rng.standard_normal((n, d)) + draw(st.sampled_from([0.0, 80.0, -1e3]))
    if draw(st.booleans()) and d > 1:
        masked = rng.random((n, d)) < 0.3
        masked[:, 0] = False
        x[masked] = -np.inf
    return x.astype(dtype), rng.standard_normal((n, d)).astype(dtype)


@SETTINGS
@given(logits())
def test_softmax_forward_matches_reference(xg):
    x, _ = xg
    _close(S.softmax_forward(x), S.softmax_forward_reference(x.astype(np.float64)), x.dtype)


@SETTINGS
@given(logits())
def test_log_softmax_forward_matches_reference(xg):
    x, _ = xg
    want = S.log_softmax_forward_reference(x.astype(np.float64))
    _close(S.log_softmax_forward(x), want, x.dtype)


@SETTINGS
@given(logits())
def test_softmax_backward_matches_reference(xg):
    x, g = xg
    y = S.softmax_forward_reference(x.astype(np.float64)).astype(x.dtype)
    want = S.softmax_backward_reference(g.astype(np.float64), y.astype(np.float64))
    _close(S.softmax_backward(g, y), want, x.dtype)


@SETTINGS
@given(logits())
def test_log_softmax_backward_matches_reference(xg):
    x, g = xg
    y = S.log_softmax_forward_reference(x.astype(np.float64)).astype(x.dtype)
    want = S.log_softmax_backward_reference(g.astype(np.float64), y.astype(np.float64))
    _close(S.log_softmax_backward(g, y), want, x.dtype)


def test_rows_that_are_all_minus_inf_or_hold_nan_give_nan():
    x = np.array([[-np.inf, -np.inf], [1.0, np.nan], [0.0, -np.inf]], dtype=np.float32)
    with np.errstate(invalid="ignore"):  # -inf - -inf, with NUMBA_DISABLE_JIT=1
        out = S.softmax_forward(x), S.log_softmax_forward(x)
    for o in out:
        assert np.isnan(o[:2]).all() and not np.isnan(o[2]).any()
    np.testing.assert_array_equal(out[0][2], [1.0, 0.0])


def test_empty_rows():
    x = np.zeros((3, 0), dtype=np.float32)
    assert S.softmax_forward(x).shape == (3, 0)
    assert S.log_softmax_forward(x).shape == (3, 0)


def test_into_forms_write_what_the_kernels_return_and_check_shapes():
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((2, 5, 7)).astype(np.float32)
    cases = ((S.softmax_forward_into, S.softmax_forward, (x,)),
             (S.log_softmax_forward_into, S.log_softmax_forward, (x,)),
             (S.softmax_backward_into, S.softmax_backward, (g, S.softmax_forward(x))),
             (S.log_softmax_backward_into, S.log_softmax_backward,
              (g, S.log_softmax_forward(x))))
    for into, whole, inputs in cases:
        out = np.full_like(x, 7.0)
        into(*inputs, out)
        np.testing.assert_array_equal(out, whole(*inputs))
        with pytest.raises(ValueError, match="shape"):  # checked before any row is read
            into(*inputs, np.empty((5, 6), np.float32))
        if len(inputs) == 2:
            with pytest.raises(ValueError, match="shape"):
                into(inputs[0][:4], inputs[1], np.empty_like(x))


@njit
def _exp_all(y):
    out = np.empty_like(y)
    for i in range(y.shape[0]):
        out[i] = S.fast_exp(y[i])
    return out


def test_fast_exp_float32_is_accurate_over_its_whole_range():
    y = np.concatenate([
        np.linspace(-110.0, 90.0, 40001),
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.73, -87.33, -87.34, -103.9, -104.0],
    ]).astype(np.float32)
    with np.errstate(over="ignore"):  # exp(89) to float32, with NUMBA_DISABLE_JIT=1
        got = _exp_all(y).astype(np.float64)
        want = np.exp(y.astype(np.float64)).astype(np.float32).astype(np.float64)
    normal = np.isfinite(want) & (want >= 2.0**-126)
    np.testing.assert_allclose(got[normal], want[normal], rtol=2.5e-7, atol=0)
    # subnormal results within one unit of the smallest subnormal; 0, inf and nan as IEEE
    np.testing.assert_allclose(got[~normal & np.isfinite(want)],
                               want[~normal & np.isfinite(want)], rtol=0, atol=2.0**-149)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_fast_exp_float64_is_within_an_ulp():
    y = np.concatenate([np.linspace(-750.0, 709.0, 40001), [np.nan, -np.inf, 0.0]])
    got, want = _exp_all(y), np.exp(y)
    normal = want >= 2.0**-1022
    assert np.all(np.abs(got - want)[normal] <= np.spacing(want[normal]))
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=2.0**-1074)


@st.composite
def scores(draw):
    """(N, D) rows in ``dtype``, a scale, and ``causal``: 0 or a number of rows per matrix
    (N a multiple of it)."""
    causal = draw(st.sampled_from([0, 1, 3, 7]))
    n = draw(st.integers(0, 4)) * max(causal, 1) + (draw(st.integers(0, 5)) if not causal else 0)
    d = draw(st.integers(1, 200))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = draw(st.sampled_from([0.1, 1.0, 30.0])) * rng.standard_normal((n, d))
    scale = draw(st.sampled_from([0.125, 1.0, 3.0, -0.5]))
    return x.astype(dtype), rng.standard_normal((n, d)).astype(dtype), scale, causal


@SETTINGS
@given(scores())
def test_scaled_softmax_forward_matches_reference(case):
    x, _, scale, causal = case
    got = S.scaled_softmax_forward(x, scale, causal)
    want = S.scaled_softmax_forward_reference(x.astype(np.float64), scale, causal)
    _close(got, want, x.dtype)
    if causal:  # the masked entries are exactly 0
        above = np.arange(x.shape[1])[None, :] > (np.arange(x.shape[0]) % causal)[:, None]
        assert np.all(got[above] == 0)


def test_scaled_softmax_forward_is_the_scaled_masked_softmax_bit_for_bit():
    # the same float32 result as multiplying, adding the -inf mask and taking softmax
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2 * 128, 128)).astype(np.float32)
    mask = np.triu(np.full((128, 128), -np.inf, np.float32), 1)
    z = (x.reshape(2, 128, 128) * np.float32(0.125) + mask).reshape(-1, 128)
    np.testing.assert_array_equal(S.scaled_softmax_forward(x, 0.125, 128), S.softmax_forward(z))


@SETTINGS
@given(scores())
def test_scaled_softmax_backward_matches_reference(case):
    x, g, scale, causal = case
    y = S.scaled_softmax_forward_reference(x.astype(np.float64), scale, causal).astype(x.dtype)
    want = S.scaled_softmax_backward_reference(g.astype(np.float64), y.astype(np.float64), scale)
    _close(S.scaled_softmax_backward(g, y, scale), want, x.dtype)


def test_scaled_softmax_into_kernels_fill_out_and_check_their_shapes():
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    out = np.empty_like(x)
    S.scaled_softmax_forward_into(x, 0.5, 3, out)
    want = S.scaled_softmax_forward_reference(x, 0.5, 3)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-15)
    S.scaled_softmax_backward_into(g, want, 0.5, out)
    np.testing.assert_allclose(out, S.scaled_softmax_backward_reference(g, want, 0.5),
                               rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="out must have the input's shape"):
        S.scaled_softmax_forward_into(x, 0.5, 0, out[:2])
    with pytest.raises(ValueError, match="divide the row count"):
        S.scaled_softmax_forward_into(x, 0.5, 4, out)
    with pytest.raises(ValueError, match="out must have the input's shape"):
        S.scaled_softmax_backward_into(g[:2], want, 0.5, out)
