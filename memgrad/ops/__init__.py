"""The public functions over tensors, and the binding of the op table to ``Tensor``.

NOTE [ Public names ]
Every public function is a primitive of the op table or a composite of primitives, declared
public where it is defined: a primitive with ``@primitive(..., public=True)``, a composite
with ``@public`` (``method=False`` for a function that is no Tensor method). This module
collects them: each is ``mg.<name>`` (``memgrad.ops.<name>``) and a Tensor method of the same
name, bound once by ``_bind``; a new primitive needs no line here. What is bound by hand
below maps Python's protocols onto the table: the operators, indexing, the in-place methods
and the conversions. ``memgrad/ops/__init__.pyi`` and ``memgrad/tensor.pyi``, made from
these tables by ``python tools/stubs.py``, show all of it to static tools (a test keeps them
in sync).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from memgrad.ops import conv, indexing, inplace, linalg, movement, nn, reduce  # noqa: F401
from memgrad.ops import elementwise as ew
from memgrad.ops.registry import METHODS, PUBLIC, Primitive, apply, public
from memgrad.ops.registry import REGISTRY as REGISTRY
from memgrad.tensor import Tensor


@public
def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``input + alpha * other`` with broadcasting.

    Example:
        >>> import memgrad as mg
        >>> mg.add(mg.ones(2), 1.0)
        tensor([2., 2.])
    """
    return ew.add(input, other if alpha == 1 else other * alpha)


@public
def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``input - alpha * other`` with broadcasting."""
    return ew.sub(input, other if alpha == 1 else other * alpha)


@public
def mul(input: Any, other: Any) -> Tensor:
    """Elementwise product with broadcasting."""
    return ew.mul(input, other)


@public
def div(input: Any, other: Any) -> Tensor:
    """Elementwise true division with broadcasting."""
    return ew.div(input, other)


@public
def pow(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` elementwise."""
    return ew.pow(input, exponent)


@public
def maximum(input: Any, other: Any) -> Tensor:
    """Elementwise maximum (a tie splits the gradient evenly)."""
    return ew.maximum(input, other)


@public
def minimum(input: Any, other: Any) -> Tensor:
    """Elementwise minimum (a tie splits the gradient evenly)."""
    return ew.minimum(input, other)


@public
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


@public(method=False)
def where(condition: Any, input: Any, other: Any) -> Tensor:
    """Pick ``input`` where ``condition`` holds, else ``other`` (broadcasting all three)."""
    cond = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    if cond.dtype != np.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got dtype {cond.dtype}")
    return ew.where(condition if isinstance(condition, Tensor) else Tensor(cond), input, other)


@public
def matmul(input: Tensor, other: Tensor) -> Tensor:
    """Matrix product with NumPy's rules for 1-D operands and batch broadcasting.

    Example:
        >>> import memgrad as mg
        >>> (mg.ones(2, 3) @ mg.ones(3, 4)).shape
        (2, 4)
    """
    return linalg.matmul(input, other)


@public(method=False)
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
    def method(self: Tensor, other: Any) -> Tensor:
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


def _cast(dtype: Any) -> Any:
    def cast(self: Tensor) -> Tensor:
        return _to(self, dtype)

    cast.__name__ = np.dtype(dtype).name
    return cast


def _expand_as(self: Tensor, other: Tensor) -> Tensor:
    return movement.expand(self, other.shape)


def _view_as(self: Tensor, other: Tensor) -> Tensor:
    return movement.view(self, other.shape)


def _reshape_as(self: Tensor, other: Tensor) -> Tensor:
    return movement.reshape(self, other.shape)


def _all(self: Tensor, dim: Any = None) -> Tensor:
    return Tensor(np.all(self._data, axis=dim))


def _any(self: Tensor, dim: Any = None) -> Tensor:
    return Tensor(np.any(self._data, axis=dim))


def _pos(self: Tensor) -> Tensor:
    return self


def _t(self: Tensor) -> Tensor:
    return movement.permute(self, *range(self.ndim - 1, -1, -1))


def _mt(self: Tensor) -> Tensor:
    return movement.transpose(self, -2, -1)


def _bind() -> None:
    T = Tensor
    methods = dict(METHODS)
    methods.update({
        "to": _to, "sum_to": _sum_to,
        "add_": inplace.add_, "sub_": inplace.sub_, "mul_": inplace.mul_,
        "div_": inplace.div_, "zero_": inplace.zero_, "fill_": inplace.fill_,
        "copy_": inplace.copy_, "clamp_": inplace.clamp_, "relu_": inplace.relu_,
        "__add__": _binary(ew.add), "__radd__": _reflected(ew.add),
        "__sub__": _binary(ew.sub), "__rsub__": _reflected(ew.sub),
        "__mul__": _binary(ew.mul), "__rmul__": _reflected(ew.mul),
        "__truediv__": _binary(ew.div), "__rtruediv__": _reflected(ew.div),
        "__pow__": _binary(ew.pow), "__rpow__": _reflected(ew.pow),
        "__matmul__": _binary(linalg.matmul), "__rmatmul__": _reflected(linalg.matmul),
        "__neg__": _unary(ew.neg), "__abs__": _unary(ew.abs), "__pos__": _pos,
        "__iadd__": inplace.add_, "__isub__": inplace.sub_, "__imul__": inplace.mul_,
        "__itruediv__": inplace.div_,
        "__eq__": _cmp(ew.eq), "__ne__": _cmp(ew.ne), "__lt__": _cmp(ew.lt),
        "__le__": _cmp(ew.le), "__gt__": _cmp(ew.gt), "__ge__": _cmp(ew.ge),
        "__and__": _binary(ew.logical_and), "__or__": _binary(ew.logical_or),
        "__xor__": _binary(ew.logical_xor), "__invert__": _unary(ew.logical_not),
        "logical_not": _unary(ew.logical_not),
        "__getitem__": _getitem, "__setitem__": inplace.setitem, "__iter__": _iter,
        "float": _cast(np.float32), "double": _cast(np.float64), "long": _cast(np.int64),
        "int": _cast(np.int32), "bool": _cast(np.bool_),
        "swapaxes": movement.transpose, "expand_as": _expand_as, "view_as": _view_as,
        "reshape_as": _reshape_as, "all": _all, "any": _any,
    })
    for name, fn in methods.items():
        setattr(T, name, fn)
    T.T = property(_t)
    T.mT = property(_mt)


_bind()


globals().update(PUBLIC)

# NOTE [ Op handles ]
# Every primitive has one public handle, the object a selective-checkpoint policy receives
# as ``op`` (``policy_fn(ctx, op, *args, **params)``): its public function where it has one
# of the same name (``mg.ops.matmul``), else the primitive record itself, reachable as
# ``mg.ops.<name>`` too (``mg.ops.linear``, ``mg.ops.gelu``). Made from the op table, so a
# new primitive has its handle; docs/checkpointing.md's table is made by tools/op_handles.py.
HANDLES: dict[str, Any] = {name: PUBLIC.get(name, prim) for name, prim in REGISTRY.items()}
globals().update({name: h for name, h in HANDLES.items() if name not in PUBLIC})
__all__ = sorted(PUBLIC)
