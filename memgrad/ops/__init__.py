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

import builtins
import numbers
from typing import Any

import numpy as np

from memgrad import factories
from memgrad.ops import (  # noqa: F401
    arrange,
    conv,
    draws,
    indexing,
    inplace,
    linalg,
    movement,
    nn,
    reduce,
    resample,
    unary,
)
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
def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """Elementwise division with broadcasting: true division, or with ``rounding_mode``
    ``"floor"`` (toward -inf, ``floor_divide``) or ``"trunc"`` (toward zero), which keep an
    integer input integer; the rounded quotient's gradient is zero, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([7, -7])
        >>> mg.div(x, 2, rounding_mode="floor"), mg.div(x, 2, rounding_mode="trunc")
        (tensor([ 3, -4]), tensor([ 3, -3]))
    """
    if rounding_mode is None:
        return ew.div(input, other)
    if rounding_mode not in ("floor", "trunc"):
        raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got "
                         f"{rounding_mode!r}")
    q = ew.floor_divide(input, other)
    if rounding_mode == "trunc":
        # floor and trunc differ by one where the signs differ and the division is not exact
        r = ew.remainder(input, other)
        q = q + ((r != 0) & ((ew.lt(input, 0)) != (ew.lt(other, 0)))).to(q.dtype)
    return q


@public
def true_divide(input: Any, other: Any) -> Tensor:
    """``div`` under its other name: true division with broadcasting.

    Example:
        >>> import memgrad as mg
        >>> mg.true_divide(mg.tensor([1.0, 3.0]), 2)
        tensor([0.5, 1.5])
    """
    return ew.div(input, other)


@public
def lerp(input: Tensor, end: Any, weight: Any) -> Tensor:
    """``input + weight * (end - input)`` elementwise with broadcasting (``weight`` a number
    or a tensor).

    Example:
        >>> import memgrad as mg
        >>> mg.lerp(mg.zeros(2), mg.tensor([2.0, 4.0]), 0.25)
        tensor([0.5, 1. ])
    """
    return input + weight * (end - input)


@public
def floor_divide(input: Any, other: Any) -> Tensor:
    """``input // other`` elementwise: the quotient rounded toward -inf (an integer input
    stays integer); its gradient is zero.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([7, -7]) // 2
        tensor([ 3, -4])
    """
    return ew.floor_divide(input, other)


@public
def remainder(input: Any, other: Any) -> Tensor:
    """``input % other`` elementwise, with the sign of ``other`` (Python's and PyTorch's
    convention); the gradient is 1 for ``input`` and ``-(input // other)`` for ``other``.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([7.5, -7.5]) % 2
        tensor([1.5, 0.5])
    """
    return ew.remainder(input, other)


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


@public
def clip(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """``clamp``'s other name, as in PyTorch."""
    return clamp(input, min, max)


@public
def square(input: Any) -> Tensor:
    """``input * input`` elementwise."""
    return ew.mul(input, input)


def _compare(prim: Primitive, doc: str) -> Any:
    def fn(input: Any, other: Any) -> Tensor:
        return apply(prim, (input, other), _NO_PARAMS)

    fn.__name__ = fn.__qualname__ = prim.name
    fn.__doc__ = doc
    return public(fn)


eq = _compare(ew.eq, "``input == other`` elementwise, a bool tensor (broadcasting).")
ne = _compare(ew.ne, "``input != other`` elementwise, a bool tensor (broadcasting).")
lt = _compare(ew.lt, "``input < other`` elementwise, a bool tensor (broadcasting).")
le = _compare(ew.le, "``input <= other`` elementwise, a bool tensor (broadcasting).")
gt = _compare(ew.gt, "``input > other`` elementwise, a bool tensor (broadcasting).")
ge = _compare(ew.ge, "``input >= other`` elementwise, a bool tensor (broadcasting).")
logical_and = _compare(ew.logical_and, "Elementwise logical and (nonzero is true).")
logical_or = _compare(ew.logical_or, "Elementwise logical or (nonzero is true).")
logical_xor = _compare(ew.logical_xor, "Elementwise logical xor (nonzero is true).")


@public(method=False)
def where(condition: Any, input: Any, other: Any) -> Tensor:
    """Pick ``input`` where ``condition`` holds, else ``other`` (broadcasting all three)."""
    cond = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    if cond.dtype != np.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got dtype {cond.dtype}")
    return ew.where(condition if isinstance(condition, Tensor) else Tensor(cond), input, other)


def _bool_reduce(api: str, fn: Any, input: Tensor, dim: Any, keepdim: bool) -> Tensor:
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    dims = None if dim is None else reduce.normalize_dims(dim, builtins.max(input.ndim, 1), api)
    data = input._data if input.ndim else input._data.reshape(1)
    out = fn(data, axis=dims, keepdims=bool(keepdim))
    return Tensor(np.asarray(out).reshape(()) if input.ndim == 0 else np.asarray(out))


@public
def all(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether every element (along ``dim``, if given) is nonzero: a bool tensor.

    Example:
        >>> import memgrad as mg
        >>> mg.all(mg.tensor([[1, 0], [1, 1]]), dim=1)
        tensor([False,  True])
    """
    return _bool_reduce("all", np.all, input, dim, keepdim)


@public
def any(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Whether some element (along ``dim``, if given) is nonzero: a bool tensor.

    Example:
        >>> import memgrad as mg
        >>> mg.any(mg.tensor([[1, 0], [0, 0]]), dim=1)
        tensor([ True, False])
    """
    return _bool_reduce("any", np.any, input, dim, keepdim)


@public
def equal(input: Tensor, other: Tensor) -> bool:
    """Whether two tensors have the same shape and the same elements (a Python bool).

    Example:
        >>> import memgrad as mg
        >>> mg.equal(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 2.0]))
        True
    """
    for name, t in (("input", input), ("other", other)):
        if not isinstance(t, Tensor):
            raise TypeError(f"equal: {name} must be a Tensor, got {type(t).__name__}")
    return input.shape == other.shape and bool(np.array_equal(input._data, other._data))


@public(method=False)
def numel(input: Tensor) -> int:
    """The number of elements of ``input``.

    Example:
        >>> import memgrad as mg
        >>> mg.numel(mg.zeros(2, 3))
        6
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"numel: input must be a Tensor, got {type(input).__name__}")
    return input.numel()


def _where_method(self: Tensor, condition: Any, other: Any) -> Tensor:
    return where(condition, self, other)


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:
    return factories.tensor(data, dtype=self.dtype if dtype is None else dtype,
                            requires_grad=requires_grad, device=device)


def _element_size(self: Tensor) -> int:
    return int(self._data.itemsize)


def _nbytes(self: Tensor) -> int:
    return int(self._data.nbytes)


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


def _reflected(prim: Primitive):
    def method(self: Tensor, other: Any) -> Tensor:
        return prim.call2(other, self)

    return method


def _cmp(prim: Primitive):
    def method(self: Tensor, other: Any) -> Tensor:
        if not isinstance(other, _OPERANDS):
            return NotImplemented
        return apply(prim, (self, other), _NO_PARAMS)

    return method


def _to(self: Tensor, *args: Any, dtype: Any = None, device: Any = None,
        non_blocking: bool = False, copy: bool = False) -> Tensor:
    """This tensor with ``dtype`` (or ``other``'s dtype), as PyTorch's ``to``:
    ``t.to(mg.float64)``, ``t.to("cpu")``, ``t.to(device="cpu", dtype=mg.float32)``,
    ``t.to(other)``. ``self`` when nothing changes, unless ``copy=True``. The device can
    only be the CPU (another is a RuntimeError).

    Example:
        >>> import memgrad as mg
        >>> mg.ones(2).to("cpu", mg.float64).dtype
        dtype('float64')
    """
    if len(args) > 2:
        raise TypeError(f"Tensor.to: expected at most 2 positional arguments (a device and a "
                        f"dtype, or a tensor), got {len(args)}")
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, (str, factories.device)):
            device = a
        else:
            dtype = a
    factories.check_device(device, "Tensor.to")
    dt = self._data.dtype if dtype is None else factories.dtype_of(dtype, "Tensor.to")
    if dt == self._data.dtype:
        return ew.clone(self) if copy else self
    return ew.to(self, dtype=dt)


_CPU = factories.device("cpu")


def _device(self: Tensor) -> Any:
    return _CPU


def _cpu(self: Tensor, memory_format: Any = None) -> Tensor:
    """This tensor: it is on the CPU already."""
    return self


def _contiguous(self: Tensor, memory_format: Any = None) -> Tensor:
    """This tensor if its array is C-contiguous, else a contiguous copy (in the graph)."""
    if self._data.flags.c_contiguous:
        return self
    return arrange.contiguous(self)


def _is_contiguous(self: Tensor, memory_format: Any = None) -> bool:
    """Whether the array is C-contiguous (row-major, no gaps)."""
    return bool(self._data.flags.c_contiguous)


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    """This tensor cast to ``other``'s dtype."""
    if not isinstance(other, Tensor):
        raise TypeError(f"Tensor.type_as: other must be a Tensor, got {type(other).__name__}")
    return _to(self, other.dtype)


# Tensor.type()'s names: PyTorch's names of its CPU tensor types, under memgrad's prefix
_TYPE_NAMES = {np.dtype(np.float16): "HalfTensor", np.dtype(np.float32): "FloatTensor",
               np.dtype(np.float64): "DoubleTensor", np.dtype(np.int8): "CharTensor",
               np.dtype(np.uint8): "ByteTensor", np.dtype(np.int16): "ShortTensor",
               np.dtype(np.int32): "IntTensor", np.dtype(np.int64): "LongTensor",
               np.dtype(np.bool_): "BoolTensor"}
_TYPE_DTYPES = {name: dt for dt, name in _TYPE_NAMES.items()}


def _dtype_named(name: str) -> np.dtype:
    """The dtype of a type name as ``Tensor.type`` takes it: memgrad's (``"memgrad.FloatTensor"``)
    or PyTorch's for the CPU (``"torch.FloatTensor"``); a CUDA one is refused."""
    prefix, _, kind = name.rpartition(".")
    if prefix in ("torch.cuda", "memgrad.cuda"):
        factories.check_device("cuda", "Tensor.type")
    if prefix not in ("torch", "memgrad") or kind not in _TYPE_DTYPES:
        known = ", ".join(f"'memgrad.{k}'" for k in _TYPE_DTYPES)
        raise ValueError(f"Tensor.type: invalid type {name!r}; expected a dtype such as "
                         f"mg.float64 or one of {known} ('torch.' in place of 'memgrad.' "
                         "is taken too)")
    return _TYPE_DTYPES[kind]


def _type(self: Tensor, dtype: Any = None, non_blocking: bool = False) -> Any:
    """With no ``dtype``: the tensor's type name, PyTorch's name for a CPU tensor of its
    dtype under memgrad's prefix (``"memgrad.FloatTensor"`` where PyTorch says
    ``"torch.FloatTensor"``). With a dtype, or a type name (``"memgrad.DoubleTensor"``, or
    PyTorch's ``"torch.DoubleTensor"``): the tensor cast to it, this tensor itself if it has
    that dtype already.

    Example:
        >>> import memgrad as mg
        >>> x = mg.zeros(2)
        >>> x.type(), x.type(mg.float64).type(), x.type("torch.LongTensor").dtype
        ('memgrad.FloatTensor', 'memgrad.DoubleTensor', dtype('int64'))
    """
    if dtype is None:
        name = _TYPE_NAMES.get(self._data.dtype)
        if name is None:
            raise TypeError(f"Tensor.type: a tensor of dtype {self._data.dtype} has no type "
                            "name (PyTorch has no such CPU tensor type); read .dtype instead")
        return f"memgrad.{name}"
    if isinstance(dtype, str):
        dtype = _dtype_named(dtype)
    elif not isinstance(dtype, (np.dtype, type)):
        raise TypeError(f"Tensor.type: dtype must be a dtype or a type name such as "
                        f"'memgrad.FloatTensor', got {type(dtype).__name__}")
    return _to(self, dtype)


def _cuda(self: Tensor, device: Any = None, non_blocking: bool = False,
          memory_format: Any = None) -> Tensor:
    """Refused: memgrad runs on the CPU only (a RuntimeError that says so)."""
    factories.check_device("cuda" if device is None else device, "Tensor.cuda")
    raise RuntimeError("Tensor.cuda: memgrad runs on the CPU only (its tensors are NumPy "
                       "arrays in host memory); leave the tensor where it is, or call .cpu()")


@public(method=False)
def dropout(input: Tensor, p: float, train: bool) -> Tensor:
    """``torch.dropout``: ``mg.nn.functional.dropout(input, p, training=train)`` with
    PyTorch's positional signature (all three arguments required).

    Example:
        >>> import memgrad as mg
        >>> mg.dropout(mg.ones(3), 0.5, False)
        tensor([1., 1., 1.])
    """
    return nn.dropout(input, p, train)


def _new(fill: Any, api: str) -> Any:
    def new(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:
        return fill(*size, dtype=self.dtype if dtype is None else dtype, device=device,
                    requires_grad=requires_grad)

    new.__name__ = api
    new.__doc__ = f"``mg.{fill.__name__}`` with this tensor's dtype unless ``dtype`` is given."
    return new


def _new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: Any = None,
              device: Any = None, requires_grad: bool = False) -> Tensor:
    """``mg.full(size, fill_value)`` with this tensor's dtype unless ``dtype`` is given."""
    return factories.full(size, fill_value, dtype=self.dtype if dtype is None else dtype,
                          device=device, requires_grad=requires_grad)


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
        "normal_": draws.normal_, "uniform_": draws.uniform_,
        "__add__": ew.add.call2, "__radd__": _reflected(ew.add),
        "__sub__": ew.sub.call2, "__rsub__": _reflected(ew.sub),
        "__mul__": ew.mul.call2, "__rmul__": _reflected(ew.mul),
        "__truediv__": ew.div.call2, "__rtruediv__": _reflected(ew.div),
        "__floordiv__": ew.floor_divide.call2, "__rfloordiv__": _reflected(ew.floor_divide),
        "__mod__": ew.remainder.call2, "__rmod__": _reflected(ew.remainder),
        "__pow__": ew.pow.call2, "__rpow__": _reflected(ew.pow),
        "__matmul__": linalg.matmul.call2, "__rmatmul__": _reflected(linalg.matmul),
        "__neg__": ew.neg.call1, "__abs__": ew.abs.call1, "__pos__": _pos,
        "__iadd__": inplace.add_, "__isub__": inplace.sub_, "__imul__": inplace.mul_,
        "__itruediv__": inplace.div_,
        "__eq__": _cmp(ew.eq), "__ne__": _cmp(ew.ne), "__lt__": _cmp(ew.lt),
        "__le__": _cmp(ew.le), "__gt__": _cmp(ew.gt), "__ge__": _cmp(ew.ge),
        "__and__": ew.logical_and.call2, "__or__": ew.logical_or.call2,
        "__xor__": ew.logical_xor.call2, "__invert__": ew.logical_not.call1,
        "logical_not": ew.logical_not.call1,
        "__getitem__": _getitem, "__setitem__": inplace.setitem, "__iter__": _iter,
        "float": _cast(np.float32), "double": _cast(np.float64), "long": _cast(np.int64),
        "int": _cast(np.int32), "bool": _cast(np.bool_), "half": _cast(np.float16),
        "cpu": _cpu, "contiguous": _contiguous, "is_contiguous": _is_contiguous,
        "type_as": _type_as, "type": _type, "cuda": _cuda,
        "new_zeros": _new(factories.zeros, "new_zeros"),
        "new_ones": _new(factories.ones, "new_ones"),
        "new_empty": _new(factories.empty, "new_empty"), "new_full": _new_full,
        "swapaxes": movement.transpose, "expand_as": _expand_as, "view_as": _view_as,
        "reshape_as": _reshape_as, "where": _where_method, "new_tensor": _new_tensor,
        "element_size": _element_size, "masked_fill_": inplace.masked_fill_,
        "scatter_": inplace.scatter_, "scatter_add_": inplace.scatter_add_,
    })
    for name, fn in methods.items():
        setattr(T, name, fn)
    T.T = property(_t)
    T.mT = property(_mt)
    T.device = property(_device, doc="Where the tensor lives: always ``mg.device('cpu')``.")
    T.nbytes = property(_nbytes, doc="The bytes of the tensor's elements.")


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
