"""The public functions over tensors, and the binding of the op table to ``Tensor``.

Every function here is a primitive of the op table or a composite of primitives; the
``Tensor`` methods and operators are these same functions, bound once by ``_bind``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from memgrad.ops import elementwise as ew
from memgrad.ops import inplace, linalg, movement, reduce
from memgrad.ops.indexing import gather, max, min, scatter_add, take_along_dim
from memgrad.ops.movement import (
    cat,
    chunk,
    expand,
    flatten,
    permute,
    reshape,
    split,
    squeeze,
    stack,
    transpose,
    unsqueeze,
    view,
)
from memgrad.ops.reduce import (
    amax,
    amin,
    argmax,
    argmin,
    log_softmax,
    logsumexp,
    mean,
    softmax,
    std,
    sum,
    var,
)
from memgrad.ops.registry import REGISTRY, Primitive, apply
from memgrad.tensor import Tensor

__all__ = [
    "REGISTRY", "Primitive",
    "add", "sub", "mul", "div", "neg", "pow", "exp", "log", "sqrt", "abs", "sign", "tanh",
    "sigmoid", "relu", "maximum", "minimum", "clamp", "where", "matmul", "allclose",
    "cat", "stack", "chunk", "split", "reshape", "view", "permute", "transpose", "expand",
    "squeeze", "unsqueeze", "flatten", "sum", "mean", "max", "min", "amax", "amin", "var",
    "std", "logsumexp", "softmax", "log_softmax", "argmax", "argmin", "clone", "gather",
    "take_along_dim", "scatter_add",
]

neg = ew.neg
exp = ew.exp
log = ew.log
sqrt = ew.sqrt
abs = ew.abs
sign = ew.sign
tanh = ew.tanh
sigmoid = ew.sigmoid
relu = ew.relu
clone = ew.clone


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``input + alpha * other`` with broadcasting.

    Example:
        >>> import memgrad as mg
        >>> mg.add(mg.ones(2), 1.0)
        tensor([2., 2.])
    """
    return ew.add(input, other if alpha == 1 else other * alpha)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``input - alpha * other`` with broadcasting."""
    return ew.sub(input, other if alpha == 1 else other * alpha)


def mul(input: Any, other: Any) -> Tensor:
    """Elementwise product with broadcasting."""
    return ew.mul(input, other)


def div(input: Any, other: Any) -> Tensor:
    """Elementwise true division with broadcasting."""
    return ew.div(input, other)


def pow(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` elementwise."""
    return ew.pow(input, exponent)


def maximum(input: Any, other: Any) -> Tensor:
    """Elementwise maximum (a tie splits the gradient evenly)."""
    return ew.maximum(input, other)


def minimum(input: Any, other: Any) -> Tensor:
    """Elementwise minimum (a tie splits the gradient evenly)."""
    return ew.minimum(input, other)


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to ``[min, max]``; the gradient passes where ``min <= x <= max``.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([-2.0, 0.5, 3.0]).clamp(0, 1)
        tensor([0. , 0.5, 1. ])
    """
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = input
        if min is not None:
            out = ew.maximum(out, min)
        if max is not None:
            out = ew.minimum(out, max)
        return out
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    return ew.clamp(input, min=min, max=max)


def where(condition: Any, input: Any, other: Any) -> Tensor:
    """Pick ``input`` where ``condition`` holds, else ``other`` (broadcasting all three)."""
    cond = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    if cond.dtype != np.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got dtype {cond.dtype}")
    return ew.where(condition if isinstance(condition, Tensor) else Tensor(cond), input, other)


def matmul(input: Tensor, other: Tensor) -> Tensor:
    """Matrix product with NumPy's rules for 1-D operands and batch broadcasting.

    Example:
        >>> import memgrad as mg
        >>> (mg.ones(2, 3) @ mg.ones(3, 4)).shape
        (2, 4)
    """
    return linalg.matmul(input, other)


def allclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether all elements are close: ``|input - other| <= atol + rtol * |other|``."""
    a = input._data if isinstance(input, Tensor) else np.asarray(input)
    b = other._data if isinstance(other, Tensor) else np.asarray(other)
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


# ---------------------------------------------------------------------------- methods

_OPERANDS = (Tensor, numbers.Number, np.ndarray, np.generic, list, tuple)


_NO_PARAMS: dict = {}


def _binary(prim: Primitive):
    def method(self: Tensor, other: Any) -> Tensor:
        return apply(prim, (self, other), _NO_PARAMS)

    return method


def _reflected(prim: Primitive):
    def method(self: Tensor, other: Any) -> Tensor:
        return apply(prim, (other, self), _NO_PARAMS)

    return method


def _unary(prim: Primitive):
    def method(self: Tensor) -> Tensor:
        return apply(prim, (self,), _NO_PARAMS)

    return method


def _cmp(prim: Primitive):
    def method(self: Tensor, other: Any) -> Any:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return apply(prim, (self, other), _NO_PARAMS)

    return method


def _to(self: Tensor, dtype: Any) -> Tensor:
    dtype = np.dtype(dtype)
    if dtype == self._data.dtype:
        return self
    return ew.to(self, dtype=dtype)


def _iter(self: Tensor):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    for i in range(self.shape[0]):
        yield movement.getitem(self, index=(i, Ellipsis))


def _getitem(self: Tensor, index: Any) -> Tensor:
    return movement.getitem(self, index=movement.normalize_index(index))


def _sum_to(self: Tensor, shape: tuple) -> Tensor:
    return reduce.sum_to(self, shape=tuple(shape))


def _bind() -> None:
    T = Tensor
    methods = {
        "add": add, "sub": sub, "mul": mul, "div": div, "pow": pow, "neg": _unary(neg),
        "exp": _unary(exp), "log": _unary(log), "sqrt": _unary(sqrt), "abs": _unary(abs),
        "sign": _unary(sign), "tanh": _unary(tanh), "sigmoid": _unary(sigmoid),
        "relu": _unary(relu), "clamp": clamp, "maximum": maximum, "minimum": minimum,
        "matmul": matmul, "sum": sum, "mean": mean, "max": max, "min": min, "amax": amax,
        "amin": amin, "var": var, "std": std, "logsumexp": logsumexp, "softmax": softmax,
        "log_softmax": log_softmax, "argmax": argmax, "argmin": argmin, "reshape": reshape,
        "view": view, "transpose": transpose, "permute": permute, "unsqueeze": unsqueeze,
        "squeeze": squeeze, "expand": expand, "flatten": flatten, "chunk": chunk,
        "split": split, "clone": _unary(clone), "to": _to, "sum_to": _sum_to,
        "gather": gather, "take_along_dim": take_along_dim, "scatter_add": scatter_add,
        "add_": inplace.add_, "sub_": inplace.sub_, "mul_": inplace.mul_,
        "div_": inplace.div_, "zero_": inplace.zero_, "fill_": inplace.fill_,
        "copy_": inplace.copy_, "clamp_": inplace.clamp_, "relu_": inplace.relu_,
        "__add__": _binary(ew.add), "__radd__": _reflected(ew.add),
        "__sub__": _binary(ew.sub), "__rsub__": _reflected(ew.sub),
        "__mul__": _binary(ew.mul), "__rmul__": _reflected(ew.mul),
        "__truediv__": _binary(ew.div), "__rtruediv__": _reflected(ew.div),
        "__pow__": _binary(ew.pow), "__rpow__": _reflected(ew.pow),
        "__matmul__": _binary(linalg.matmul), "__rmatmul__": _reflected(linalg.matmul),
        "__neg__": _unary(ew.neg), "__abs__": _unary(ew.abs), "__pos__": lambda s: s,
        "__iadd__": inplace.add_, "__isub__": inplace.sub_, "__imul__": inplace.mul_,
        "__itruediv__": inplace.div_,
        "__eq__": _cmp(ew.eq), "__ne__": _cmp(ew.ne), "__lt__": _cmp(ew.lt),
        "__le__": _cmp(ew.le), "__gt__": _cmp(ew.gt), "__ge__": _cmp(ew.ge),
        "__and__": _binary(ew.logical_and), "__or__": _binary(ew.logical_or),
        "__xor__": _binary(ew.logical_xor), "__invert__": _unary(ew.logical_not),
        "logical_not": _unary(ew.logical_not),
        "__getitem__": _getitem, "__setitem__": inplace.setitem, "__iter__": _iter,
        "float": lambda s: _to(s, np.float32), "double": lambda s: _to(s, np.float64),
        "long": lambda s: _to(s, np.int64), "int": lambda s: _to(s, np.int32),
        "bool": lambda s: _to(s, np.bool_),
        "swapaxes": transpose,
        "expand_as": lambda s, o: expand(s, o.shape),
        "view_as": lambda s, o: view(s, o.shape),
        "reshape_as": lambda s, o: reshape(s, o.shape),
        "all": lambda s, dim=None: Tensor(np.all(s._data, axis=dim)),
        "any": lambda s, dim=None: Tensor(np.any(s._data, axis=dim)),
    }
    for name, fn in methods.items():
        setattr(T, name, fn)
    T.T = property(lambda s: permute(s, *range(s.ndim - 1, -1, -1)))
    T.mT = property(lambda s: transpose(s, -2, -1))


_bind()
