"""index_add_rows and scatter_add_rows against their NumPy reference (np.add.at), over drawn
shapes and dtypes; and their bounds checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels.scatter import (
    index_add_rows,
    index_add_rows_reference,
    scatter_add_rows,
    scatter_add_rows_reference,
)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 20),
    d=st.integers(1, 9),
    m=st.integers(0, 40),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_index_add_rows_matches_numpy(n, d, m, dtype, seed):
    rng = np.random.default_rng(seed)
    index = rng.integers(0, n, size=m).astype(np.int64)  # repeats are likely
    src = rng.standard_normal((m, d)).astype(dtype)
    start = rng.standard_normal((n, d)).astype(dtype)
    got = index_add_rows(start.copy(), index, src)
    want = index_add_rows_reference(start.copy(), index, src)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)


def test_index_add_rows_sums_duplicates_exactly():
    out = np.zeros((3, 2))
    index = np.array([1, 1, 1, 0], dtype=np.int64)
    src = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    index_add_rows(out, index, src)
    np.testing.assert_array_equal(out, [[7.0, 8.0], [9.0, 12.0], [0.0, 0.0]])


@settings(max_examples=40, deadline=None)
@given(
    r=st.integers(0, 8),
    d=st.integers(1, 9),
    k=st.integers(0, 12),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_scatter_add_rows_matches_numpy(r, d, k, dtype, seed):
    rng = np.random.default_rng(seed)
    index = rng.integers(0, d, size=(r, k)).astype(np.int64)
    src = rng.standard_normal((r, k)).astype(dtype)
    start = rng.standard_normal((r, d)).astype(dtype)
    got = scatter_add_rows(start.copy(), index, src)
    want = scatter_add_rows_reference(start.copy(), index, src)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("bad", [-1, 3, 2**40])
def test_out_of_range_indices_raise_before_anything_is_written(bad):
    out = np.zeros((3, 2))
    with pytest.raises(IndexError, match="out of range"):
        index_add_rows(out, np.array([0, bad], dtype=np.int64), np.ones((2, 2)))
    np.testing.assert_array_equal(out, 0)  # the valid row before the bad one was not added
    out = np.zeros((2, 3))
    with pytest.raises(IndexError, match="out of range"):
        scatter_add_rows(out, np.array([[0], [bad]], dtype=np.int64), np.ones((2, 1)))
    np.testing.assert_array_equal(out, 0)
