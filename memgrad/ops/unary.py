"""More elementwise math, as PyTorch names it: ``sin``, ``cos``, ``tan``, their inverses
``asin``, ``acos``, ``atan`` and ``atan2``, ``sinh``, ``cosh``, ``rsqrt``, ``log1p``,
``log2``, ``log10``, ``expm1``, ``erf``, ``fmod``; ``floor``, ``ceil``, ``trunc`` and
``round`` (whose gradient is zero, as PyTorch's); and the tests ``isfinite``, ``isinf`` and
``isnan``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from memgrad.ops.elementwise import exp, flat_kernel, sqrt
from memgrad.ops.registry import primitive, public
from memgrad.tensor import Tensor

__all__ = ["sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "rsqrt",
           "log1p", "log2", "log10", "expm1", "erf", "fmod", "floor", "ceil", "trunc", "round",
           "isfinite", "isinf", "isnan"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


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


@primitive("tan", saves={"out": (0,)}, public=True)
def tan(x):
    """The tangent elementwise."""
    return np.tan(x)


@tan.vjp
def _(g, out, needs, x):
    return (g * (out * out + 1),)


@primitive("asin", saves={"x": (0,)}, public=True)
def asin(x):
    """The inverse sine elementwise (nan outside [-1, 1])."""
    return np.arcsin(x)


@asin.vjp
def _(g, out, needs, x):
    return (g / sqrt(1 - x * x),)


@primitive("acos", saves={"x": (0,)}, public=True)
def acos(x):
    """The inverse cosine elementwise (nan outside [-1, 1])."""
    return np.arccos(x)


@acos.vjp
def _(g, out, needs, x):
    return (-g / sqrt(1 - x * x),)


@primitive("atan", saves={"x": (0,)}, public=True)
def atan(x):
    """The inverse tangent elementwise."""
    return np.arctan(x)


@atan.vjp
def _(g, out, needs, x):
    return (g / (x * x + 1),)


@primitive("atan2", saves={"x": (0, 1), "y": (0, 1)}, broadcasting=True)
def _atan2(x, y):
    return np.arctan2(x, y)


@_atan2.vjp
def _(g, out, needs, x, y):
    scale = g / (x * x + y * y)
    return scale * y if needs[0] else None, -scale * x if needs[1] else None


@public(method=True)
def atan2(input: Tensor, other: Any) -> Tensor:
    """The angle of the point ``(other, input)`` from the positive x-axis, in ``[-pi, pi]``
    (``atan(input / other)`` with the quadrant from both signs), elementwise with
    broadcasting.

    Example:
        >>> import memgrad as mg
        >>> mg.atan2(mg.tensor([1.0, -1.0]), mg.tensor([-1.0, -1.0]))
        tensor([ 2.3561945, -2.3561945])
    """
    return _atan2(input, other)


@primitive("sinh", saves={"x": (0,)}, public=True)
def sinh(x):
    """The hyperbolic sine elementwise."""
    return np.sinh(x)


@sinh.vjp
def _(g, out, needs, x):
    return (g * cosh(x),)


@primitive("cosh", saves={"x": (0,)}, public=True)
def cosh(x):
    """The hyperbolic cosine elementwise."""
    return np.cosh(x)


@cosh.vjp
def _(g, out, needs, x):
    return (g * sinh(x),)


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


@primitive("log2", saves={"x": (0,)}, public=True)
def log2(x):
    """The base-2 logarithm elementwise."""
    return np.log2(x)


@log2.vjp
def _(g, out, needs, x):
    return (g / (x * _LN2),)


@primitive("log10", saves={"x": (0,)}, public=True)
def log10(x):
    """The base-10 logarithm elementwise."""
    return np.log10(x)


@log10.vjp
def _(g, out, needs, x):
    return (g / (x * _LN10),)


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
trunc = _stepped("trunc", np.trunc)
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


@primitive("isinf", differentiable=False, public=True)
def isinf(x):
    """Whether each element is inf or -inf: a bool tensor."""
    return np.isinf(x)


@primitive("fmod", saves={"x": (1,), "y": (1,)}, broadcasting=True)
def _fmod(x, y):
    return np.fmod(x, y)


@_fmod.vjp
def _(g, out, needs, x, y):
    return g if needs[0] else None, -g * trunc(x / y) if needs[1] else None


@public(method=True)
def fmod(input: Tensor, other: Any) -> Tensor:
    """The remainder of ``input / other`` with the sign of ``input`` (C's ``fmod``, where
    ``remainder`` takes the sign of ``other``); the gradient is 1 for ``input`` and
    ``-trunc(input / other)`` for ``other``.

    Example:
        >>> import memgrad as mg
        >>> mg.fmod(mg.tensor([7.5, -7.5]), 2)
        tensor([ 1.5, -1.5])
    """
    return _fmod(input, other)


@primitive("isnan", differentiable=False, public=True)
def isnan(x):
    """Whether each element is nan: a bool tensor."""
    return np.isnan(x)
