"""The erf kernel against ``math.erf`` element by element, over drawn sizes, scales and
dtypes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import special


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 2000), scale=st.sampled_from([0.01, 1.0, 3.0, 30.0]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**32 - 1))
def test_erf_matches_reference(n, scale, dtype, seed):
    x = (scale * np.random.default_rng(seed).standard_normal(n)).astype(dtype)
    got = special.erf(x)
    want = special.erf_reference(x.astype(np.float64))
    assert got.dtype == dtype and got.shape == x.shape
    tol = 1e-15 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 1e-2)


def test_erf_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    got = special.erf(x)
    assert got[:4].tolist() == [0.0, -0.0, 1.0, -1.0] and np.isnan(got[4])
    assert np.signbit(got[1])
