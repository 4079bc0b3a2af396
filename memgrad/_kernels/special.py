"""The error function elementwise, which NumPy lacks: libm's ``erf`` through numba, on a
flat float32 or float64 array (``erf_reference`` is the plain-Python form it is tested
against)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["erf", "erf_reference"]


@njit(cache=True, nogil=True)
def erf(x: np.ndarray) -> np.ndarray:
    """``erf`` of each element of the flat array ``x``, in ``x``'s dtype."""
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = math.erf(x[i])
    return out


def erf_reference(x: np.ndarray) -> np.ndarray:
    """``math.erf`` element by element (float64)."""
    return np.array([math.erf(float(v)) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape)
