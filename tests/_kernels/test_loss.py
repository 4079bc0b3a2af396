"""The fused cross-entropy kernels against their NumPy references, over drawn shapes,
targets (some ignored), label smoothing and dtypes (the references run in float64)."""

import numpy as np
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
    x = (draw(st.sampled_from([0.1, 3.0, 40.0])) * rng.standard_normal((n, c))).astype(dtype)
    ignore_index = draw(st.sampled_from([-100, 0]))
    target = rng.integers(0, c, n)
    target[rng.random(n) < 0.2] = ignore_index
    g = rng.standard_normal(n).astype(dtype)
    return x, target, ignore_index, draw(st.sampled_from([0.0, 0.1, 1.0])), g


@SETTINGS
@given(problems())
def test_cross_entropy_forward_matches_reference(p):
    x, t, ignore, smoothing, _ = p
    want = L.cross_entropy_forward_reference(x.astype(np.float64), t, ignore, smoothing)
    _close(L.cross_entropy_forward(x, t, ignore, smoothing), want, x.dtype)


@SETTINGS
@given(problems())
def test_cross_entropy_backward_matches_reference(p):
    x, t, ignore, smoothing, g = p
    want = L.cross_entropy_backward_reference(g.astype(np.float64), x.astype(np.float64), t,
                                              ignore, smoothing)
    _close(L.cross_entropy_backward(g, x, t, ignore, smoothing), want, x.dtype)


def test_ignored_rows_lose_nothing_and_get_no_gradient():
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    t = np.array([2, -100])
    assert L.cross_entropy_forward(x, t, -100, 0.0)[1] == 0.0
    np.testing.assert_array_equal(L.cross_entropy_backward(np.ones(2), x, t, -100, 0.0)[1], 0)
