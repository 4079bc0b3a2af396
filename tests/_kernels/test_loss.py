"""The negative log-likelihood kernels against their NumPy references, over drawn shapes,
targets (some ignored), label smoothing and dtypes (the references run in float64); and
their bounds checks: a target out of range raises before any memory is touched."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import loss as L

SETTINGS = settings(max_examples=25, deadline=None)


def _close(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-12 if dtype == np.float64 else 2e-5
    scale = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@st.composite
def problems(draw):
    n, c = draw(st.integers(0, 40)), draw(st.integers(1, 300))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logp = (draw(st.sampled_from([0.1, 3.0, 40.0])) * rng.standard_normal((n, c))).astype(dtype)
    ignore_index = draw(st.sampled_from([-100, 0]))
    target = rng.integers(0, c, n)
    target[rng.random(n) < 0.2] = ignore_index
    g = rng.standard_normal(n).astype(dtype)
    return logp, target, ignore_index, draw(st.sampled_from([0.0, 0.1, 1.0])), g


@SETTINGS
@given(problems())
def test_nll_forward_matches_reference(p):
    logp, t, ignore, smoothing, _ = p
    want = L.nll_forward_reference(logp.astype(np.float64), t, ignore, smoothing)
    _close(L.nll_forward(logp, t, ignore, smoothing), want, logp.dtype)


@SETTINGS
@given(problems())
def test_nll_backward_matches_reference(p):
    logp, t, ignore, smoothing, g = p
    c = logp.shape[1]
    want = L.nll_backward_reference(g.astype(np.float64), t, c, ignore, smoothing)
    _close(L.nll_backward(g, t, c, ignore, smoothing), want, g.dtype)


def test_ignored_rows_lose_nothing_and_get_no_gradient():
    logp = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]))
    t = np.array([2, -100])
    np.testing.assert_allclose(L.nll_forward(logp, t, -100, 0.0), [-np.log(0.5), 0.0])
    np.testing.assert_array_equal(L.nll_backward(np.ones(2), t, 3, -100, 0.0)[1], 0)


@pytest.mark.parametrize("bad", [3, -1, 10**9, -(10**9)])
def test_out_of_range_targets_raise_before_touching_memory(bad):
    logp = np.zeros((2, 3))
    t = np.array([0, bad])
    with pytest.raises(IndexError, match="out of range"):
        L.nll_forward(logp, t, -100, 0.0)
    with pytest.raises(IndexError, match="out of range"):
        L.nll_backward(np.ones(2), t, 3, -100, 0.1)


@SETTINGS
@given(st.integers(0, 3000), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([0.1, 3.0, 1e3]), st.floats(-4.0, 4.0))
def test_squared_error_kernels_match_reference(n, dtype, spread, scale):
    rng = np.random.default_rng(n)
    x, t = (spread * rng.standard_normal(n)).astype(dtype), rng.standard_normal(n).astype(dtype)
    got = L.squared_error_sum(x, t)
    want = L.squared_error_sum_reference(x, t)
    assert got == pytest.approx(want, rel=1e-12, abs=0)
    # the sum of the exact squares of the rounded differences, not of float32 squares
    assert want == pytest.approx(float(np.sum((x - t).astype(np.float64) ** 2)), rel=1e-13)
    out = np.empty_like(x)
    L.squared_error_grad_into(x, t, scale, out)
    np.testing.assert_array_equal(out, L.squared_error_grad_reference(x, t, scale))
    np.testing.assert_allclose(out, 2 * scale * (x.astype(np.float64) - t), rtol=2e-6 if
                               dtype == np.float32 else 1e-14, atol=1e-30)


def test_squared_error_kernels_refuse_arrays_of_other_shapes():
    x = np.ones(4)
    with pytest.raises(ValueError, match="one shape"):
        L.squared_error_sum(x, np.ones(3))
    with pytest.raises(ValueError, match="one shape"):
        L.squared_error_grad_into(x, x, 1.0, np.empty(3))
