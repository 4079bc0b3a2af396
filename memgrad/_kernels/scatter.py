"""Scatter-add: the backward of advanced indexing, of embedding lookups and of gather."""

import numpy as np
from numba import njit

__all__ = [
    "index_add_rows",
    "index_add_rows_reference",
    "scatter_add_rows",
    "scatter_add_rows_reference",
]


@njit(cache=True, nogil=True)
def index_add_rows(out, index, src):
    """``out[index[i], :] += src[i, :]`` for every i, duplicates summed, in place.

    ``out`` is (N, D), ``index`` (M,) of int64 in [0, N), ``src`` (M, D). Returns ``out``.
    Every index is checked before anything is written: one outside [0, N) raises IndexError
    (callers check first, with a message that names the op and the value).
    """
    n = out.shape[0]
    for i in range(index.shape[0]):
        if index[i] < 0 or index[i] >= n:
            raise IndexError("index_add_rows: an index is out of range")
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


@njit(cache=True, nogil=True)
def scatter_add_rows(out, index, src):
    """``out[r, index[r, k]] += src[r, k]`` for every r and k, duplicates summed, in place.

    ``out`` is (R, D), ``index`` and ``src`` (R, K); every index must be in [0, D).
    Returns ``out``.
    """
    d = out.shape[1]
    for r in range(index.shape[0]):
        for k in range(index.shape[1]):
            j = index[r, k]
            if j < 0 or j >= d:
                raise IndexError("scatter_add_rows: an index is out of range")
    for r in range(index.shape[0]):
        for k in range(index.shape[1]):
            out[r, index[r, k]] += src[r, k]
    return out


def scatter_add_rows_reference(out, index, src):
    """NumPy formulation of ``scatter_add_rows``."""
    rows = np.broadcast_to(np.arange(out.shape[0])[:, None], index.shape)
    np.add.at(out, (rows, index), src)
    return out
