"""The column-sum kernel against its float64 NumPy reference, over drawn shapes and dtypes,
and against NumPy's own float32 sum, which it beats on many rows."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import reduce as R

SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(n=st.integers(0, 300), d=st.integers(0, 70),
       dtype=st.sampled_from([np.float32, np.float64]),
       offset=st.sampled_from([0.0, 100.0]), seed=st.integers(0, 2**32 - 1))
def test_column_sum_matches_reference(n, d, dtype, offset, seed):
    rng = np.random.default_rng(seed)
    x = (offset + rng.standard_normal((n, d))).astype(dtype)
    out = np.full(d, np.nan, dtype=dtype)
    got = R.column_sum_into(x, out)
    assert got is out and got.dtype == dtype
    tol = 1e-13 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(got, R.column_sum_reference(x), rtol=tol,
                               atol=tol * max(n, 1) * (offset + 1))


def test_float32_column_sum_of_many_rows_is_closer_than_numpys():
    rng = np.random.default_rng(0)
    x = (1.0 + rng.random((20000, 8))).astype(np.float32)
    want = x.astype(np.float64).sum(axis=0)
    got = R.column_sum_into(x, np.empty(8, np.float32)).astype(np.float64)
    assert np.abs(got - want).max() < np.abs(x.sum(axis=0) - want).max()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_column_sum_checks_out():
    with pytest.raises(ValueError, match="out must have the rows' length"):
        R.column_sum_into(np.zeros((3, 4)), np.zeros(3))
