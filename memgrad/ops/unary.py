"""More elementwise math, as PyTorch names it: ``sin``, ``cos``, ``rsqrt``, ``log1p``,
``expm1``, ``erf``; ``floor``, ``ceil`` and ``round`` (whose gradient is zero, as PyTorch's);
and the tests ``isfinite`` and ``isnan``."""

from __future__ import annotations

import math

import numpy as np

from memgrad.ops.elementwise import exp, flat_kernel
from memgrad.ops.registry import primitive, public
from memgrad.tensor import Tensor

__all__ = ["sin", "cos", "rsqrt", "log1p", "expm1", "erf", "floor", "ceil", "round",
           "isfinite", "isnan"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@primitive("sin", saves={"x": (0,)}, public=True)
def sin(x):
    """The sine elementwise."""
    return np.sin(x)


@sin.vjp
def _(g, out, needs, x):
    return (g * cos(x),)


@primitive("cos", saves={"x": (0,)}, public=True)
def cos(x):
    """The cosine elementwise."""
    return np.cos(x)


@cos.vjp
def _(g, out, needs, x):
    return (-g * sin(x),)


@primitive("rsqrt", saves={"out": (0,)}, public=True)
def rsqrt(x):
    """``1 / sqrt(x)`` elementwise."""
    return np.reciprocal(np.sqrt(x))


@rsqrt.vjp
def _(g, out, needs, x):
    return (g * out * out * out * -0.5,)


@primitive("log1p", saves={"x": (0,)}, public=True)
def log1p(x):
    """``log(1 + x)`` elementwise, accurate for small ``x``."""
    return np.log1p(x)


@log1p.vjp
def _(g, out, needs, x):
    return (g / (x + 1),)


@primitive("expm1", saves={"out": (0,)}, public=True)
def expm1(x):
    """``exp(x) - 1`` elementwise, accurate for small ``x``."""
    return np.expm1(x)


@expm1.vjp
def _(g, out, needs, x):
    return (g * (out + 1),)


@primitive("erf", saves={"x": (0,)}, public=True)
def erf(x):
    """The error function elementwise: ``2 / sqrt(pi)`` times the integral of
    ``exp(-t**2)`` from 0 to ``x``."""
    from memgrad._kernels import special

    if x.dtype in (np.float32, np.float64):
        return flat_kernel(special.erf, x)
    out = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)  # ints give float32
    return flat_kernel(special.erf, x.astype(np.float64)).astype(out)


@erf.vjp
def _(g, out, needs, x):
    return (g * exp(-(x * x)) * _TWO_OVER_SQRT_PI,)


def _stepped(name: str, fn):
    def forward(x):
        return fn(x)

    forward.__name__ = name
    forward.__doc__ = f"``{name}`` elementwise; its gradient is zero, as in PyTorch."
    prim = primitive(name, public=name != "round")(forward)

    @prim.vjp
    def _(g, out, needs, x):
        return (Tensor(np.zeros(x.shape, dtype=g.dtype)),)

    return prim


floor = _stepped("floor", np.floor)
ceil = _stepped("ceil", np.ceil)
_round = _stepped("round", np.round)


@public
def round(input: Tensor, decimals: int = 0) -> Tensor:
    """Round half to even elementwise (as PyTorch), to ``decimals`` decimal places; the
    gradient is zero.

    Example:
        >>> import memgrad as mg
        >>> mg.round(mg.tensor([0.5, 1.5, 2.25]), decimals=0)
        tensor([0., 2., 2.])
    """
    if not isinstance(decimals, int) or isinstance(decimals, bool):
        raise TypeError(f"round: decimals must be an int, got {type(decimals).__name__}")
    if decimals == 0:
        return _round(input)
    scale = 10.0 ** decimals
    return _round(input * scale) / scale


@primitive("isfinite", differentiable=False, public=True)
def isfinite(x):
    """Whether each element is finite (not inf, -inf or nan): a bool tensor."""
    return np.isfinite(x)


@primitive("isnan", differentiable=False, public=True)
def isnan(x):
    """Whether each element is nan: a bool tensor."""
    return np.isnan(x)
