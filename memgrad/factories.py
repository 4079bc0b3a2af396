"""Tensor factories: ``tensor``, ``from_numpy``, ``zeros``, ``ones``, ``randn``..., and
``device``, the one place a tensor can live.

float32 is the default floating dtype: Python floats and float lists become float32;
NumPy arrays keep their dtype.

Every factory takes ``device=`` as PyTorch's do. memgrad's tensors are NumPy arrays in host
memory, so ``"cpu"`` (or ``mg.device("cpu")``) is the one device; any other (``"cuda"``,
``"cuda:0"``, ``"mps"``...) is refused with a RuntimeError that says so, never ignored.

Sizes are ints (not floats, strings or bools) and never negative. A tensor whose bytes are
more than this machine's physical memory (``os.sysconf``: ``SC_PHYS_PAGES`` times
``SC_PAGE_SIZE``) is refused with a ``MemoryError`` before anything is allocated, since it
could never be filled; one that fits in principle but not in the memory free now gets
NumPy's ``MemoryError``, with the factory's name.
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from memgrad import random as _random
from memgrad.sizes import physical_memory
from memgrad.tensor import Tensor, default_dtype

__all__ = [
    "tensor", "from_numpy", "zeros", "ones", "empty", "full", "zeros_like", "ones_like",
    "full_like", "empty_like", "arange", "linspace", "logspace", "eye", "as_tensor", "is_tensor",
    "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm", "device",
    "check_device", "dtype_of",
]

# below this, no request can exceed a machine's memory worth asking about
_CHECKED_BYTES = 2**30

# device types PyTorch knows (named in the error, which says memgrad has only the CPU)
_OTHER_DEVICES = ("cuda", "mps", "xpu", "xla", "meta", "hip", "ipu", "mtia", "hpu", "vulkan",
                  "privateuseone")


def _no_device(text: str, api: str) -> RuntimeError:
    return RuntimeError(
        f"{api}: memgrad runs on the CPU only (its tensors are NumPy arrays in host memory), "
        f"so device {text!r} is not available; use device='cpu', or leave device out"
    )


class device:
    """Where a tensor lives, as ``torch.device``: ``device("cpu")``, ``device("cpu", 0)`` or
    ``device("cpu:0")``. memgrad runs on the CPU, so that is the one device; naming another
    (``"cuda"``, ``"cuda:1"``, ``"mps"``, a CUDA ordinal such as ``0``) raises a RuntimeError.

    Like PyTorch's, a device compares equal to another of the same type and index
    (``device("cpu") != device("cpu", 0)``) and prints as its string form.

    Example:
        >>> import memgrad as mg
        >>> d = mg.device("cpu")
        >>> d, str(d), d.type, d == mg.zeros(1).device
        (device(type='cpu'), 'cpu', 'cpu', True)
    """

    __slots__ = ("_type", "_index")

    def __init__(self, type: Any, index: int | None = None) -> None:
        kind, at = _parse_device(type, index, "device")
        self._type = kind
        self._index = at

    @property
    def type(self) -> str:
        """The device type: always ``"cpu"``."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device index: None unless one was given (it can only be 0)."""
        return self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, device):
            return NotImplemented
        return (self._type, self._index) == (other._type, other._index)

    def __hash__(self) -> int:
        return hash((self._type, self._index))

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        at = "" if self._index is None else f", index={self._index}"
        return f"device(type={self._type!r}{at})"


def _parse_device(value: Any, index: Any, api: str) -> tuple[str, int | None]:
    """``(type, index)`` of a device given as a ``device``, a string or a CUDA ordinal."""
    if isinstance(value, device):
        if index is not None:
            raise TypeError(f"{api}: an index cannot be given with a device object, got {index!r}")
        return value.type, value.index
    if _is_int(value):
        raise _no_device(f"cuda:{value}", api)  # PyTorch's legacy spelling of a CUDA device
    if not isinstance(value, str):
        raise TypeError(
            f"{api}: a device is a string such as 'cpu' or a mg.device, got "
            f"{builtins.type(value).__name__} {value!r}"
        )
    kind, colon, at = value.partition(":")
    if kind in _OTHER_DEVICES:
        raise _no_device(value if index is None else f"{value}:{index}", api)
    if kind != "cpu":
        raise RuntimeError(
            f"{api}: expected a device type such as 'cpu' at the start of the device string, "
            f"got {value!r}; memgrad runs on the CPU, so use device='cpu'"
        )
    if colon:
        if index is not None or not at.isdigit():
            raise RuntimeError(f"{api}: invalid device string {value!r}; use 'cpu' or 'cpu:0'")
        index = int(at)
    if index is not None and (not _is_int(index) or index != 0):
        raise RuntimeError(
            f"{api}: the CPU device has index 0 only, got {index!r}; use mg.device('cpu')"
        )
    return kind, None if index is None else 0


def check_device(value: Any, api: str) -> None:
    """Refuse any ``device=`` argument other than None, ``"cpu"`` or ``mg.device("cpu")``
    (a RuntimeError naming ``api``): memgrad runs on the CPU.

    Example:
        >>> from memgrad.factories import check_device
        >>> check_device("cpu", "zeros")
    """
    if value is not None and not isinstance(value, device):
        _parse_device(value, None, api)


def _dtype(dtype: Any, api: str) -> np.dtype | None:
    if dtype is None:
        return None
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind not in "biuf":
        raise TypeError(
            f"{api}: dtype must be a numeric dtype, got {dtype!r}; pass one such as "
            "mg.float32, mg.float64, mg.int64 or mg.bool_"
        )
    return dt


def dtype_of(dtype: Any, api: str) -> np.dtype:
    """``dtype`` as a NumPy dtype, or a TypeError naming ``api`` if it is not a numeric one.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.factories import dtype_of
        >>> dtype_of(mg.long, "Tensor.to")
        dtype('int64')
    """
    dt = _dtype(dtype, api)
    if dt is None:
        raise TypeError(f"{api}: expected a dtype such as mg.float32, got None")
    return dt


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _sizes(shape: tuple, api: str, example: str | None = None) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean shape (2, 3); each size an int >= 0."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    example = example or f"e.g. {api}(2, 3) or {api}((2, 3))"
    for i, s in enumerate(shape):
        if not _is_int(s):
            fix = " (convert it with int())" if isinstance(s, (float, np.floating)) else ""
            raise TypeError(
                f"{api}: sizes must be ints, got {type(s).__name__} {s!r} at position {i} of "
                f"{shape!r}{fix}; {example}"
            )
        if s < 0:
            raise ValueError(
                f"{api}: sizes must not be negative, got {s} at position {i} of {shape!r}; "
                f"{example}"
            )
    return tuple(int(s) for s in shape)


def _alloc(api: str, shape: tuple[int, ...], dtype: np.dtype,
           make: Callable[[], np.ndarray]) -> np.ndarray:
    """``make()``, once the tensor's bytes are known to fit this machine's memory."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > _CHECKED_BYTES:
        limit = physical_memory()
        if limit is not None and nbytes > limit:
            raise MemoryError(
                f"{api}: a tensor of shape {shape} and dtype {dtype} needs {nbytes:,} bytes, "
                f"more than this machine's {limit:,} bytes of memory; choose smaller sizes"
            )
    try:
        return make()
    except MemoryError as e:
        raise MemoryError(f"{api}: {e}; choose smaller sizes or free memory") from None


def _make(data: np.ndarray, requires_grad: bool) -> Tensor:
    return Tensor(data, requires_grad=requires_grad)


def _ragged(data: Any) -> str | None:
    """Where nested lists first disagree in length or depth, level by level, or None."""
    level = [("data", data)]
    while level:
        nested = [(path, _entries(x)) for path, x in level]
        first_path, first = nested[0]
        for path, entries in nested[1:]:
            if (entries is None) != (first is None):
                return f"{path} is {_what(entries)} where {first_path} is {_what(first)}"
            if entries is not None and len(entries) != len(first):
                return f"{path} has {_count(entries)} where {first_path} has {_count(first)}"
        if first is None:
            return None
        level = [(f"{path}[{i}]", x) for path, entries in nested for i, x in enumerate(entries)]
    return None


def _count(entries: list) -> str:
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"


def _what(entries: list | None) -> str:
    return "a number" if entries is None else f"a sequence of {_count(entries)}"


def _entries(x: Any) -> list | None:
    """The entries of a list, tuple, array or tensor; None for a scalar."""
    if isinstance(x, Tensor):
        x = x.numpy()
    if isinstance(x, np.ndarray):
        return None if x.ndim == 0 else list(x)
    if isinstance(x, (list, tuple)):
        return list(x)
    return None


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """A tensor holding a copy of ``data`` (a number, nested lists, an array or a tensor).

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([[1, 2], [3, 4]]).dtype
        dtype('int64')
        >>> mg.tensor([1.5, 2.0]).dtype
        dtype('float32')
    """
    check_device(device, "tensor")
    dt = _dtype(dtype, "tensor")
    if isinstance(data, Tensor):
        arr = np.array(data._data, dtype=dt, copy=True)
    else:
        keep = isinstance(data, (np.ndarray, np.generic))
        try:
            arr = np.array(data, dtype=dt, copy=True)
        except ValueError as e:
            where = _ragged(data)
            if where is None:
                raise ValueError(f"tensor: cannot read data as numbers: {e}") from None
            raise ValueError(
                f"tensor: nested lists must be rectangular, but {where}; pad the short ones "
                "to the same length, or make one tensor of each"
            ) from None
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


def _fill(shape: tuple, value: Any, dtype: Any, requires_grad: bool, api: str,
          example: str | None = None) -> Tensor:
    shape = _sizes(shape, api, example)
    dtype = _dtype(dtype, api) or default_dtype
    return _make(_alloc(api, shape, dtype, lambda: np.full(shape, value, dtype=dtype)),
                 requires_grad)


def zeros(*shape: Any,
          dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))``.

    Example:
        >>> import memgrad as mg
        >>> mg.zeros(2, 3).shape
        (2, 3)
    """
    check_device(device, "zeros")
    return _fill(shape, 0, dtype, requires_grad, "zeros")


def ones(*shape: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """A tensor of ones: ``ones(2, 3)`` or ``ones((2, 3))``."""
    check_device(device, "ones")
    return _fill(shape, 1, dtype, requires_grad, "ones")


def empty(*shape: Any,
          dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """An uninitialised tensor (its values are arbitrary)."""
    check_device(device, "empty")
    shape = _sizes(shape, "empty")
    dtype = _dtype(dtype, "empty") or default_dtype
    return _make(_alloc("empty", shape, dtype, lambda: np.empty(shape, dtype=dtype)),
                 requires_grad)


def _fill_value(value: Any, api: str) -> Any:
    if not isinstance(value, (numbers.Number, np.generic)) or isinstance(value, complex):
        raise TypeError(
            f"{api}: fill_value must be a number or a bool, got {type(value).__name__} "
            f"{value!r}; e.g. {api}((2, 3), 0.5)"
        )
    return value


def full(shape: Any, fill_value: Any,
         dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """A tensor filled with ``fill_value`` (its dtype follows the value unless given).

    Example:
        >>> import memgrad as mg
        >>> mg.full((2,), 7).tolist()
        [7, 7]
    """
    check_device(device, "full")
    fill_value = _fill_value(fill_value, "full")
    if dtype is None:
        dtype = np.bool_ if isinstance(fill_value, bool) else (
            np.int64 if isinstance(fill_value, int) else default_dtype)
    if _is_int(shape):
        shape = (shape,)
    elif not isinstance(shape, (tuple, list)):
        raise TypeError(
            f"full: shape must be an int or a tuple of ints, got {type(shape).__name__} "
            f"{shape!r}; e.g. full((2, 3), {fill_value!r})"
        )
    return _fill(tuple(shape), fill_value, dtype, requires_grad, "full",
                 f"e.g. full((2, 3), {fill_value!r})")


def _like(t: Tensor, value: Any, dtype: Any, requires_grad: bool, api: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(
            f"{api}: input must be a Tensor, got {type(t).__name__}; make one first, e.g. "
            f"{api}(mg.tensor(data))"
        )
    dtype = _dtype(dtype, api) or t.dtype
    make = (lambda: np.empty(t.shape, dtype=dtype)) if value is None else (
        lambda: np.full(t.shape, value, dtype=dtype))
    return _make(_alloc(api, t.shape, dtype, make), requires_grad)


def zeros_like(input: Tensor,
               dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Zeros of ``input``'s shape and dtype."""
    check_device(device, "zeros_like")
    return _like(input, 0, dtype, requires_grad, "zeros_like")


def ones_like(input: Tensor,
              dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Ones of ``input``'s shape and dtype."""
    check_device(device, "ones_like")
    return _like(input, 1, dtype, requires_grad, "ones_like")


def full_like(input: Tensor, fill_value: Any, dtype: Any = None,
              requires_grad: bool = False, device: Any = None) -> Tensor:
    """``fill_value`` in ``input``'s shape and dtype."""
    check_device(device, "full_like")
    return _like(input, _fill_value(fill_value, "full_like"), dtype, requires_grad, "full_like")


def empty_like(input: Tensor,
               dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """An uninitialised tensor of ``input``'s shape and dtype."""
    check_device(device, "empty_like")
    return _like(input, None, dtype, requires_grad, "empty_like")


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None,
           requires_grad: bool = False, device: Any = None) -> Tensor:
    """``[start, end)`` in steps of ``step``: int64 for ints, else float32.

    Example:
        >>> import memgrad as mg
        >>> mg.arange(3)
        tensor([0, 1, 2])
    """
    check_device(device, "arange")
    if end is None:
        start, end = 0, start
    for name, value in (("start", start), ("end", end), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"arange: {name} must be a number, got {type(value).__name__} {value!r}; "
                "e.g. arange(10) or arange(0, 1, 0.25)"
            )
        if not math.isfinite(value):
            raise ValueError(f"arange: {name} must be finite, got {value!r}; e.g. arange(0, 10)")
    if step == 0:
        raise ValueError("arange: step must not be 0; e.g. arange(0, 10, 2)")
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = np.int64 if ints else default_dtype
    dtype = _dtype(dtype, "arange")
    count = max(0, math.ceil((end - start) / step))
    return _make(_alloc("arange", (count,), dtype,
                        lambda: np.arange(start, end, step, dtype=dtype)), requires_grad)


def linspace(start: Any, end: Any, steps: int, dtype: Any = None,
             requires_grad: bool = False, device: Any = None) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end``, both included (float32
    unless ``dtype`` says otherwise).

    Example:
        >>> import memgrad as mg
        >>> mg.linspace(0, 1, 5)
        tensor([0.  , 0.25, 0.5 , 0.75, 1.  ])
    """
    check_device(device, "linspace")
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"linspace: {name} must be a number, got {type(value).__name__} "
                            f"{value!r}; e.g. linspace(0, 1, 5)")
    if not _is_int(steps) or steps < 0:
        raise ValueError(f"linspace: steps must be an int >= 0, got {steps!r}; e.g. "
                         "linspace(0, 1, 5)")
    dtype = _dtype(dtype, "linspace") or default_dtype
    return _make(_alloc("linspace", (steps,), dtype,
                        lambda: np.linspace(start, end, steps, dtype=dtype)), requires_grad)


def logspace(start: Any, end: Any, steps: int, base: float = 10.0, dtype: Any = None,
             requires_grad: bool = False, device: Any = None) -> Tensor:
    """``base ** linspace(start, end, steps)``: ``steps`` values spaced evenly on a log
    scale from ``base**start`` to ``base**end``.

    Example:
        >>> import memgrad as mg
        >>> mg.logspace(0, 2, 3)
        tensor([  1.,  10., 100.])
    """
    check_device(device, "logspace")
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"logspace: base must be a number, got {type(base).__name__}")
    exponents = linspace(start, end, steps, dtype=np.float64).numpy()
    dtype = _dtype(dtype, "logspace") or default_dtype
    return _make(np.power(float(base), exponents).astype(dtype), requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a tensor without a copy where it can: a tensor of the asked dtype is
    returned itself, a NumPy array of it is shared (changes show in both); anything else is
    copied as ``mg.tensor`` copies it.

    Example:
        >>> import numpy as np
        >>> import memgrad as mg
        >>> a = np.zeros(2, dtype=np.float32)
        >>> t = mg.as_tensor(a)
        >>> a[0] = 5.0
        >>> t
        tensor([5., 0.], dtype=float32)
    """
    check_device(device, "as_tensor")
    want = _dtype(dtype, "as_tensor")
    if isinstance(data, Tensor):
        return data if want is None or data.dtype == want else data.to(want)
    if isinstance(data, np.ndarray) and (want is None or data.dtype == want):
        return from_numpy(data)
    return tensor(data, dtype=dtype)


def is_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a memgrad Tensor (a Parameter is one).

    Example:
        >>> import memgrad as mg
        >>> mg.is_tensor(mg.zeros(1)), mg.is_tensor([0.0])
        (True, False)
    """
    return isinstance(obj, Tensor)


def eye(n: int, m: int | None = None,
        dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """The ``n x m`` identity matrix.

    Example:
        >>> import memgrad as mg
        >>> mg.eye(2).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    check_device(device, "eye")
    for name, value in (("n", n), ("m", m)):
        if value is not None and (not _is_int(value) or value < 0):
            raise (ValueError if _is_int(value) else TypeError)(
                f"eye: {name} must be an int >= 0, got {type(value).__name__} {value!r}; "
                "e.g. eye(3) or eye(2, 3)"
            )
    shape = (int(n), int(n if m is None else m))
    dtype = _dtype(dtype, "eye") or default_dtype
    return _make(_alloc("eye", shape, dtype, lambda: np.eye(*shape, dtype=dtype)),
                 requires_grad)


def _float_dtype(dtype: Any, api: str) -> np.dtype:
    dtype = _dtype(dtype, api) or default_dtype
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{api}: dtype must be float32 or float64, got {dtype}")
    return dtype


def randn(*shape: Any,
          dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Standard normal draws from the global generator."""
    check_device(device, "randn")
    shape = _sizes(shape, "randn")
    dtype = _float_dtype(dtype, "randn")
    return _make(_alloc("randn", shape, dtype,
                        lambda: _random.generator().standard_normal(shape, dtype=dtype)),
                 requires_grad)


def rand(*shape: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Uniform draws from ``[0, 1)`` from the global generator."""
    check_device(device, "rand")
    shape = _sizes(shape, "rand")
    dtype = _float_dtype(dtype, "rand")
    return _make(_alloc("rand", shape, dtype,
                        lambda: _random.generator().random(shape, dtype=dtype)), requires_grad)


def randn_like(input: Tensor,
               dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Standard normal draws in ``input``'s shape."""
    check_device(device, "randn_like")
    if not isinstance(input, Tensor):
        raise TypeError(f"randn_like: input must be a Tensor, got {type(input).__name__}")
    return randn(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)


def rand_like(input: Tensor,
              dtype: Any = None, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Uniform draws in ``input``'s shape."""
    check_device(device, "rand_like")
    if not isinstance(input, Tensor):
        raise TypeError(f"rand_like: input must be a Tensor, got {type(input).__name__}")
    return rand(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)


def randint(low: int, high: int | None = None, size: Any = None, dtype: Any = None,
            device: Any = None) -> Tensor:
    """Integers drawn uniformly from ``[low, high)``: ``randint(low, high, shape)`` or
    ``randint(high, shape)``.

    Example:
        >>> import memgrad as mg
        >>> mg.randint(0, 10, (2, 3)).shape
        (2, 3)
    """
    check_device(device, "randint")
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint: expected randint(low, high, size) or randint(high, size)")
        low, high, size = 0, low, high
    for name, value in (("low", low), ("high", high)):
        if not _is_int(value):
            raise TypeError(
                f"randint: {name} must be an int, got {type(value).__name__} {value!r}; "
                "e.g. randint(0, 10, (2, 3))"
            )
    if low >= high:
        raise ValueError(
            f"randint: low must be less than high, got low={low}, high={high}; the draws are "
            "from [low, high), e.g. randint(0, 10, (2, 3))"
        )
    shape = _sizes(tuple(size) if isinstance(size, (tuple, list)) else (size,), "randint",
                   "e.g. randint(0, 10, (2, 3))")
    out = _dtype(dtype, "randint")
    data = _alloc("randint", shape, np.dtype(np.int64),
                  lambda: _random.generator().integers(low, high, size=shape, dtype=np.int64))
    return _make(data if out is None else data.astype(out), False)


def randint_like(input: Tensor, low: int = 0, high: int | None = None, dtype: Any = None,
                 device: Any = None) -> Tensor:
    """Integers from ``[low, high)`` in ``input``'s shape and dtype: ``randint_like(t, high)``
    or ``randint_like(t, low, high)``.

    Example:
        >>> import memgrad as mg
        >>> mg.randint_like(mg.zeros(2, 3), 5).shape
        (2, 3)
    """
    check_device(device, "randint_like")
    if not isinstance(input, Tensor):
        raise TypeError(f"randint_like: input must be a Tensor, got {type(input).__name__}")
    if high is None:
        low, high = 0, low
    return randint(low, high, input.shape, dtype=dtype or input.dtype)


def randperm(n: int, dtype: Any = None, requires_grad: bool = False,
             device: Any = None) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 unless ``dtype`` says otherwise), drawn
    from the global generator.

    Example:
        >>> import memgrad as mg
        >>> sorted(mg.randperm(4).tolist())
        [0, 1, 2, 3]
    """
    check_device(device, "randperm")
    if not _is_int(n) or n < 0:
        raise (ValueError if _is_int(n) else TypeError)(
            f"randperm: n must be an int >= 0, got {type(n).__name__} {n!r}; e.g. randperm(10)"
        )
    dt = _dtype(dtype, "randperm") or np.dtype(np.int64)
    data = _alloc("randperm", (int(n),), np.dtype(np.int64),
                  lambda: _random.generator().permutation(int(n)))
    return _make(data.astype(dt, copy=False), requires_grad)
