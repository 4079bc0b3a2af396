"""The select kernels against NumPy's where, over drawn lengths, dtypes and conditions,
with NaN, signed zeros and infinities among the values."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import select as S

SETTINGS = settings(max_examples=25, deadline=None)


def _draw(seed, n, dtype, share):
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    specials = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf], dtype)
    x[: min(n, 5)] = specials[: min(n, 5)]
    y[-min(n, 5):] = specials[: min(n, 5)] if n else y[:0]
    return rng.random(n) < share, x, y


common = given(n=st.integers(0, 3000), dtype=st.sampled_from([np.float32, np.float64]),
               share=st.sampled_from([0.0, 0.5, 1.0]), seed=st.integers(0, 2**32 - 1))


def _same(got, want):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert got.dtype == want.dtype


@SETTINGS
@common
def test_where_matches_numpy(n, dtype, share, seed):
    cond, x, y = _draw(seed, n, dtype, share)
    out = np.full(n, 7.0, dtype)
    S.where_into(cond, x, y, out)
    _same(out, S.where_reference(cond, x, y))
    _same(S.where(cond, x, y), out)


@SETTINGS
@common
def test_where_with_a_value_matches_numpy(n, dtype, share, seed):
    cond, x, _ = _draw(seed, n, dtype, share)
    for value in (0.0, -0.0, -np.inf, np.nan, 2.5):
        for a_when in (True, False):
            out = np.full(n, 7.0, dtype)
            S.where_value_into(cond, x, dtype(value), a_when, out)
            _same(out, S.where_value_reference(cond, x, value, a_when))


def test_kernels_reject_operands_of_another_length():
    cond, x, y = _draw(0, 10, np.float32, 0.5)
    out = np.empty(10, np.float32)
    for call in (lambda: S.where_into(cond[:9], x, y, out),
                 lambda: S.where_into(cond, x, y[:9], out),
                 lambda: S.where_value_into(cond, x[:9], np.float32(0), True, out),
                 lambda: S.where_value_into(cond, x, np.float32(0), True, out[:9])):
        with pytest.raises(ValueError, match="must have one shape"):
            call()
