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
