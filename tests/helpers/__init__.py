"""Shared test helpers: the op-table samples, Hypothesis strategies, and an independent
finite-difference gradient written on plain NumPy (no memgrad backward involved)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["numeric_grads"]


def numeric_grads(
    f: Callable[..., float], arrays: Sequence[np.ndarray], eps: float = 1e-6
) -> list[np.ndarray]:
    """Central differences of the scalar function ``f(*arrays)`` with respect to every
    element of every array: ``(f(x + eps e_i) - f(x - eps e_i)) / (2 eps)``.

    ``f`` must be a pure function of the arrays' values (it is called on perturbed copies).
    """
    base = [np.array(a, dtype=np.float64, copy=True) for a in arrays]
    grads = []
    for a in base:
        g = np.zeros_like(a)
        for i in range(a.size):
            old = a.flat[i]
            a.flat[i] = old + eps
            hi = float(f(*base))
            a.flat[i] = old - eps
            lo = float(f(*base))
            a.flat[i] = old
            g.flat[i] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads
