"""Padding, resizing and encoding, as ``torch.nn.functional`` names them: ``pad``,
``interpolate`` and ``one_hot`` (``mg.nn.functional.pad``...).

Constant padding is the ``pad`` primitive, its own adjoint: its VJP pads ``g`` by the negated
widths (a positive width becomes a crop, a negative one, a crop in the forward, zeros). The
other padding modes and ``interpolate`` are composites: index selections (whose gradient sums
back at the indices) and, for the linear modes, products with constant weights.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops.arrange import _select
from memgrad.ops.registry import primitive
from memgrad.tensor import Tensor

__all__ = ["pad", "interpolate", "one_hot"]


@primitive("pad", kind="movement")
def _pad(x, *, widths, value):
    crop = tuple(slice(max(-a, 0), n - max(-b, 0)) for (a, b), n in zip(widths, x.shape))
    grow = tuple((max(a, 0), max(b, 0)) for a, b in widths)
    return np.pad(x[crop], grow, mode="constant", constant_values=value)


@_pad.vjp
def _(g, out, needs, x, widths, value):
    return (_pad(g, widths=tuple((-a, -b) for a, b in widths), value=0),)


def _width(p: Any, pad: Any) -> int:
    # an int, or anything that is one as an index (a one-element integer tensor, as PyTorch's
    # sizes are), but not a bool
    if not isinstance(p, bool):
        try:
            return operator.index(p)
        except (TypeError, RuntimeError):
            pass
    raise TypeError(f"pad: pad must be a sequence of ints, got {pad!r}; e.g. pad=(1, 1)")


def _widths(pad: Any, ndim: int) -> tuple[tuple[int, int], ...]:
    if not isinstance(pad, Sequence):
        raise TypeError(f"pad: pad must be a sequence of ints, got {pad!r}; e.g. pad=(1, 1)")
    pad = [_width(p, pad) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise ValueError(
            f"pad: pad must have an even length of at most 2 * ndim ({2 * ndim}), got "
            f"{len(pad)}; it lists (left, right) for the last dimension, then the one before..."
        )
    pairs = [(int(pad[i]), int(pad[i + 1])) for i in range(0, len(pad), 2)]
    return tuple([(0, 0)] * (ndim - len(pairs)) + pairs[::-1])


def _source(mode: str, n: int, left: int, right: int) -> np.ndarray:
    """Which input positions the padded positions of a dimension of size ``n`` read."""
    at = np.arange(-left, n + right)
    if mode == "replicate":
        return np.clip(at, 0, n - 1)
    if mode == "circular":
        return at % n
    at = np.abs(at)  # reflect: about the first and the last element, which are not repeated
    return np.where(at > n - 1, 2 * (n - 1) - at, at)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions: ``pad=(left, right)`` pads the last one,
    ``(left, right, top, bottom)`` the last two, as ``torch.nn.functional.pad``. ``mode`` is
    ``"constant"`` (``value``, 0 by default; negative widths crop), ``"reflect"``,
    ``"replicate"`` or ``"circular"``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.pad(mg.tensor([1.0, 2.0]), (1, 2), value=9.0)
        tensor([9., 1., 2., 9., 9.])
        >>> mg.nn.functional.pad(mg.tensor([1.0, 2.0, 3.0]), (2, 1), mode="reflect")
        tensor([3., 2., 1., 2., 3., 2.])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"pad: input must be a Tensor, got {type(input).__name__}")
    widths = _widths(pad, input.ndim)
    for (a, b), n in zip(widths, input.shape):
        if n + a + b < 0 or (a < 0 and -a > n) or (b < 0 and -b > n):
            raise ValueError(f"pad: widths {pad} crop more than the input's shape {input.shape}")
    if mode == "constant":
        return _pad(input, widths=widths, value=0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', "
                         f"got {mode!r}")
    if value is not None:
        raise ValueError(f"pad: value is for mode='constant', not {mode!r}")
    out = input
    for d, ((a, b), n) in enumerate(zip(widths, input.shape)):
        if a == b == 0:
            continue
        if a < 0 or b < 0:
            raise ValueError(f"pad: mode={mode!r} takes widths >= 0, got {pad}")
        if mode == "reflect" and (a >= n or b >= n):
            raise ValueError(f"pad: reflect padding must be smaller than the dimension it pads, "
                             f"got widths ({a}, {b}) for size {n}")
        if mode != "reflect" and n == 0 or mode == "circular" and (a > n or b > n):
            raise ValueError(f"pad: {mode} padding of ({a}, {b}) does not fit a dimension of "
                             f"size {n}")
        out = _select(out, d, _source(mode, n, a, b))
    return out


def _out_sizes(spatial: tuple, size: Any, scale_factor: Any) -> tuple[tuple, tuple | None]:
    k = len(spatial)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        sizes = (size,) * k if isinstance(size, numbers.Integral) else tuple(size)
        if len(sizes) != k or any(not isinstance(s, numbers.Integral) or s <= 0 for s in sizes):
            raise ValueError(f"interpolate: size must be {k} positive int(s), got {size!r}")
        return tuple(int(s) for s in sizes), None
    scales = (scale_factor,) * k if isinstance(scale_factor, numbers.Real) else tuple(
        scale_factor)
    if len(scales) != k or any(not isinstance(s, numbers.Real) or s <= 0 for s in scales):
        raise ValueError(f"interpolate: scale_factor must be {k} positive number(s), got "
                         f"{scale_factor!r}")
    sizes = tuple(int(math.floor(n * s)) for n, s in zip(spatial, scales))
    if min(sizes) <= 0:
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} gives an empty output for "
                         f"input sizes {spatial}")
    return sizes, tuple(float(s) for s in scales)


_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
    """Resize the spatial dimensions of an ``(N, C, *spatial)`` tensor to ``size`` (or by
    ``scale_factor``), as ``torch.nn.functional.interpolate``: ``mode="nearest"`` (any of 1-3
    spatial dimensions), ``"linear"``, ``"bilinear"`` or ``"trilinear"`` (1, 2 or 3 of them;
    ``align_corners`` as PyTorch's).

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
        >>> mg.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")[0, 0, 0]
        tensor([1.  , 1.25, 1.75, 2.  ])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: input must be a Tensor, got {type(input).__name__}")
    if input.ndim not in (3, 4, 5):
        raise ShapeError(f"interpolate: input must be (N, C, *spatial) with 1 to 3 spatial "
                         f"dimensions, got shape {input.shape}")
    spatial = input.shape[2:]
    if mode == "nearest":
        if align_corners is not None:
            raise ValueError("interpolate: align_corners is for the linear modes, not 'nearest'")
    elif mode in _LINEAR:
        if _LINEAR[mode] != len(spatial):
            raise ShapeError(f"interpolate: mode={mode!r} takes {_LINEAR[mode] + 2}-D input, got "
                             f"shape {input.shape}")
    else:
        raise NotImplementedError(f"interpolate: mode={mode!r} is not supported; use 'nearest', "
                                  "'linear', 'bilinear' or 'trilinear'")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported")
    sizes, scales = _out_sizes(spatial, size, scale_factor)
    if recompute_scale_factor:
        scales = None
    out = input
    for i, (n, m) in enumerate(zip(spatial, sizes)):
        scale = n / m if scales is None else 1.0 / scales[i]
        if mode == "nearest":
            out = _select(out, 2 + i, np.minimum(np.floor(np.arange(m) * scale).astype(np.int64),
                                                 n - 1))
        else:
            out = _linear(out, 2 + i, n, m, scale, bool(align_corners))
    return out


def _linear(x: Tensor, d: int, n: int, m: int, scale: float, align_corners: bool) -> Tensor:
    dst = np.arange(m, dtype=np.float64)
    if align_corners:
        src = dst * ((n - 1) / (m - 1) if m > 1 else 0.0)
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    w = (src - lo).reshape((m,) + (1,) * (x.ndim - d - 1)).astype(x.dtype)
    return _select(x, d, lo) * Tensor(1 - w) + _select(x, d, hi) * Tensor(w)


@primitive("one_hot", differentiable=False)
def _one_hot(x, *, num_classes):
    return np.eye(num_classes, dtype=np.int64)[x]


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """An int64 tensor of shape ``tensor.shape + (num_classes,)`` with a 1 at each class index
    (``num_classes=-1``: one more than the largest index), as
    ``torch.nn.functional.one_hot``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.one_hot(mg.tensor([0, 2]), 3)
        tensor([[1, 0, 0],
                [0, 0, 1]])
    """
    if not isinstance(tensor, Tensor) or tensor.dtype != np.int64:
        got = tensor.dtype if isinstance(tensor, Tensor) else type(tensor).__name__
        raise TypeError(f"one_hot: expected an int64 tensor of class indices, got {got}; "
                        "convert it with .long()")
    if not isinstance(num_classes, numbers.Integral) or isinstance(num_classes, bool):
        raise TypeError(f"one_hot: num_classes must be an int, got {num_classes!r}")
    data = tensor.numpy()
    if num_classes == -1:
        if data.size == 0:
            raise RuntimeError("one_hot: cannot infer num_classes from an empty tensor; give it")
        num_classes = int(data.max()) + 1
    if num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be -1 or >= 0, got {num_classes}")
    if data.size and (int(data.min()) < 0 or int(data.max()) >= num_classes):
        bad = int(data.min()) if int(data.min()) < 0 else int(data.max())
        raise IndexError(f"one_hot: class index {bad} is out of range for num_classes="
                         f"{num_classes} (valid: 0 to {num_classes - 1})")
    return _one_hot(tensor, num_classes=int(num_classes))
