"""Tensor factories: ``tensor``, ``from_numpy``, ``zeros``, ``ones``, ``randn``...

float32 is the default floating dtype: Python floats and float lists become float32;
NumPy arrays keep their dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memgrad import random as _random
from memgrad.ops.movement import shape_args
from memgrad.tensor import Tensor, default_dtype

__all__ = [
    "tensor", "from_numpy", "zeros", "ones", "empty", "full", "zeros_like", "ones_like",
    "full_like", "empty_like", "arange", "eye", "randn", "rand", "randint", "randn_like",
    "rand_like",
]


def _dtype(dtype: Any) -> np.dtype | None:
    return None if dtype is None else np.dtype(dtype)


def _make(data: np.ndarray, requires_grad: bool) -> Tensor:
    return Tensor(data, requires_grad=requires_grad)


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor holding a copy of ``data`` (a number, nested lists, an array or a tensor).

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([[1, 2], [3, 4]]).dtype
        dtype('int64')
        >>> mg.tensor([1.5, 2.0]).dtype
        dtype('float32')
    """
    if isinstance(data, Tensor):
        arr = np.array(data._data, dtype=_dtype(dtype), copy=True)
    else:
        keep = isinstance(data, (np.ndarray, np.generic))
        arr = np.array(data, dtype=_dtype(dtype), copy=True)
        if dtype is None and not keep:
            if arr.dtype == np.float64:
                arr = arr.astype(default_dtype)
            elif arr.dtype.kind in "iu":
                arr = arr.astype(np.int64)
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"tensor: unsupported data of dtype {arr.dtype}; expected numbers, bools, nested "
            "lists of them, or a numeric NumPy array"
        )
    return _make(arr, requires_grad)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor that shares memory with the NumPy array ``a`` (changes show in both)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(a).__name__}")
    return Tensor(a)


def _fill(shape: tuple, value: Any, dtype: Any, requires_grad: bool, api: str) -> Tensor:
    shape = shape_args(shape, api)
    dtype = _dtype(dtype) or default_dtype
    return _make(np.full(shape, value, dtype=dtype), requires_grad)


def zeros(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    return _fill(shape, 0, dtype, requires_grad, "zeros")


def ones(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones: ``ones(2, 3)`` or ``ones((2, 3))``."""
    return _fill(shape, 1, dtype, requires_grad, "ones")


def empty(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """An uninitialised tensor (its values are arbitrary)."""
    shape = shape_args(shape, "empty")
    return _make(np.empty(shape, dtype=_dtype(dtype) or default_dtype), requires_grad)


def full(shape: Any, fill_value: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor filled with ``fill_value`` (its dtype follows the value unless given)."""
    if dtype is None:
        dtype = np.bool_ if isinstance(fill_value, bool) else (
            np.int64 if isinstance(fill_value, int) else default_dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _fill(shape, fill_value, dtype, requires_grad, "full")


def _like(t: Tensor, value: Any, dtype: Any, requires_grad: bool) -> Tensor:
    return _make(np.full(t.shape, value, dtype=_dtype(dtype) or t.dtype), requires_grad)


def zeros_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Zeros of ``input``'s shape and dtype."""
    return _like(input, 0, dtype, requires_grad)


def ones_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Ones of ``input``'s shape and dtype."""
    return _like(input, 1, dtype, requires_grad)


def full_like(input: Tensor, fill_value: Any, dtype: Any = None,
              requires_grad: bool = False) -> Tensor:
    """``fill_value`` in ``input``'s shape and dtype."""
    return _like(input, fill_value, dtype, requires_grad)


def empty_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """An uninitialised tensor of ``input``'s shape and dtype."""
    return _make(np.empty(input.shape, dtype=_dtype(dtype) or input.dtype), requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None,
           requires_grad: bool = False) -> Tensor:
    """``[start, end)`` in steps of ``step``: int64 for ints, else float32.

    Example:
        >>> import memgrad as mg
        >>> mg.arange(3)
        tensor([0, 1, 2])
    """
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = np.int64 if ints else default_dtype
    return _make(np.arange(start, end, step, dtype=_dtype(dtype)), requires_grad)


def eye(n: int, m: int | None = None, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """The ``n x m`` identity matrix."""
    return _make(np.eye(n, m, dtype=_dtype(dtype) or default_dtype), requires_grad)


def _float_dtype(dtype: Any, api: str) -> np.dtype:
    dtype = _dtype(dtype) or default_dtype
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{api}: dtype must be float32 or float64, got {dtype}")
    return dtype


def randn(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Standard normal draws from the global generator."""
    shape = shape_args(shape, "randn")
    dtype = _float_dtype(dtype, "randn")
    return _make(_random.generator().standard_normal(shape, dtype=dtype), requires_grad)


def rand(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform draws from ``[0, 1)`` from the global generator."""
    shape = shape_args(shape, "rand")
    dtype = _float_dtype(dtype, "rand")
    return _make(_random.generator().random(shape, dtype=dtype), requires_grad)


def randn_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Standard normal draws in ``input``'s shape."""
    return randn(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)


def rand_like(input: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform draws in ``input``'s shape."""
    return rand(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)


def randint(low: int, high: int | None = None, size: Any = None, dtype: Any = None) -> Tensor:
    """Integers drawn uniformly from ``[low, high)``: ``randint(low, high, shape)`` or
    ``randint(high, shape)``."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint: expected randint(low, high, size) or randint(high, size)")
        low, high, size = 0, low, high
    size = (size,) if isinstance(size, int) else tuple(size)
    data = _random.generator().integers(low, high, size=size, dtype=np.int64)
    return _make(data if dtype is None else data.astype(dtype), False)
