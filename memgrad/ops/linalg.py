"""Matrix products."""

from __future__ import annotations

import numpy as np

from memgrad.ops.registry import primitive

__all__ = ["matmul"]


@primitive("matmul", saves={"x": (1,), "y": (0,)}, kind="matmul")
def matmul(x, y):
    if np.ndim(x) == 0 or np.ndim(y) == 0:
        raise ValueError(
            f"matmul: both arguments need at least one dimension, got shapes {np.shape(x)} "
            f"and {np.shape(y)}; use * for a product with a scalar"
        )
    k_y = y.shape[-2] if y.ndim > 1 else y.shape[0]
    if x.shape[-1] != k_y:
        raise ValueError(
            f"shapes {x.shape} and {y.shape} are not aligned: {x.shape[-1]} (the last dimension "
            f"of the first) != {k_y} (dimension {-2 if y.ndim > 1 else 0} of the second)"
        )
    return np.matmul(x, y)


@matmul.vjp
def _(g, out, needs, x, y):
    # NumPy's rules: a 1-D left operand is a row (k,) -> (1, k), a 1-D right operand a
    # column (k,) -> (k, 1); batch dimensions broadcast and are summed back.
    x1, y1 = len(x.shape) == 1, len(y.shape) == 1
    if x1 and y1:
        return (g * y if needs[0] else None, g * x if needs[1] else None)
    if x1:
        g = g.unsqueeze(-2)
    if y1:
        g = g.unsqueeze(-1)
    gx = gy = None
    if needs[0]:
        yy = y.unsqueeze(-1) if y1 else y
        gx = g @ yy.mT
        if x1:
            gx = gx.squeeze(-2)
        if gx.shape != x.shape:
            gx = gx.sum_to(x.shape)
    if needs[1]:
        xx = x.unsqueeze(0) if x1 else x
        gy = xx.mT @ g
        if y1:
            gy = gy.squeeze(-1)
        if gy.shape != y.shape:
            gy = gy.sum_to(y.shape)
    return gx, gy
