"""Scatter-add: the backward of advanced indexing and of embedding lookups."""

import numpy as np
from numba import njit

__all__ = ["index_add_rows", "index_add_rows_reference"]


@njit(cache=True, nogil=True)
def index_add_rows(out, index, src):
    """``out[index[i], :] += src[i, :]`` for every i, duplicates summed, in place.

    ``out`` is (N, D), ``index`` (M,) of int64 in [0, N), ``src`` (M, D). Returns ``out``.
    The caller guarantees the bounds (the forward indexing already checked them).
    """
    d = out.shape[1]
    for i in range(index.shape[0]):
        r = index[i]
        for j in range(d):
            out[r, j] += src[i, j]
    return out


def index_add_rows_reference(out, index, src):
    """NumPy formulation of ``index_add_rows`` (unbuffered ``np.add.at``)."""
    np.add.at(out, index, src)
    return out
