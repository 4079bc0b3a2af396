"""Selecting by index: ``gather``, ``take_along_dim``, ``scatter_add`` and their backward
primitives, and ``max``/``min`` over a dimension, whose values are gathered at the indices
they return (so that backward keeps the indices, as PyTorch's does)."""

from __future__ import annotations

import builtins
from collections import namedtuple
from typing import Any

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops.elementwise import maximum, minimum
from memgrad.ops.movement import check_indices, expand, getitem, reshape
from memgrad.ops.reduce import amax, amin, normalize_dims
from memgrad.ops.registry import primitive, public
from memgrad.tensor import Tensor

__all__ = ["gather", "gather_backward", "take_along_dim", "scatter_add", "max", "min",
           "MaxResult"]

MaxResult = namedtuple("MaxResult", ["values", "indices"])


@primitive("gather", saves={"index": (0,)}, kind="movement")
def _gather(x, index, *, dim):
    return np.take_along_axis(x, index, axis=dim)


@_gather.vjp
def _(g, out, needs, x, index, dim):
    return gather_backward(g, index, dim=dim, shape=x.shape), None


@primitive("gather_backward", saves={"index": (0,)}, kind="movement")
def gather_backward(g, index, *, dim, shape):
    """Zeros of ``shape`` with each ``g`` element added at its ``index`` along ``dim``
    (repeats summed): the backward of ``gather``, and ``scatter_add`` into zeros.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.movement import gather_backward
        >>> gather_backward(mg.tensor([[1.0, 2.0]]), mg.tensor([[2, 2]]), dim=1, shape=(1, 3))
        tensor([[0., 0., 3.]])
    """
    from memgrad._kernels.scatter import scatter_add_rows

    check_indices(index, shape[dim], "gather_backward", dim=dim)
    moved = tuple(shape[:dim]) + tuple(shape[dim + 1:]) + (shape[dim],)
    rows = np.zeros((int(np.prod(moved[:-1], dtype=np.int64)), shape[dim]), dtype=g.dtype)
    k = index.shape[dim]
    idx = np.ascontiguousarray(np.moveaxis(index, dim, -1), dtype=np.int64).reshape(-1, k)
    src = np.ascontiguousarray(np.moveaxis(g, dim, -1)).reshape(-1, k)
    scatter_add_rows(rows, idx, src)
    return np.moveaxis(rows.reshape(moved), -1, dim)


@gather_backward.vjp
def _(gg, out, needs, g, index, dim, shape):
    return _gather(gg, index, dim=dim), None


def _index_tensor(index: Any, api: str) -> Tensor:
    if not isinstance(index, Tensor):
        index = Tensor(np.array(index))
    if index.dtype.kind not in "iu":
        raise TypeError(
            f"{api}: index must be an integer tensor (e.g. mg.int64), got {index.dtype}"
        )
    return index


@public
def gather(input: Tensor, dim: int, index: Any) -> Tensor:
    """``out[i][j][k] = input[i][index[i][j][k]][k]`` for ``dim=1`` (likewise for other dims):
    pick elements along ``dim`` at ``index``, which has ``input``'s number of dimensions and
    sizes at most ``input``'s in the other dimensions. The gradient is added back at
    ``index`` (repeats summed).

    Example:
        >>> import memgrad as mg
        >>> mg.gather(mg.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, mg.tensor([[1, 1], [0, 1]]))
        tensor([[2., 2.],
                [3., 4.]])
    """
    index = _index_tensor(index, "gather")
    if index.ndim != input.ndim:
        raise ShapeError(
            f"gather: index must have as many dimensions as input ({input.ndim}), got index of "
            f"shape {index.shape}"
        )
    if input.ndim == 0:
        return reshape(gather(reshape(input, 1), 0, reshape(index, 1)), ())
    (d,) = normalize_dims(dim, input.ndim, "gather")
    for i, (s, k) in enumerate(zip(input.shape, index.shape)):
        if i != d and k > s:
            raise ShapeError(
                f"gather: index of shape {index.shape} is larger than input of shape "
                f"{input.shape} in dimension {i}; it may be larger only along dim={d}"
            )
    check_indices(index.numpy(), input.shape[d], "gather", dim=d)
    if any(k < s for i, (s, k) in enumerate(zip(input.shape, index.shape)) if i != d):
        lead = tuple(slice(0, k) if i != d else slice(None) for i, k in enumerate(index.shape))
        input = getitem(input, index=lead + (Ellipsis,))
    return _gather(input, index, dim=d)


@public
def take_along_dim(input: Tensor, indices: Any, dim: int) -> Tensor:
    """``gather`` with ``indices`` broadcast against ``input`` in the other dimensions, as
    NumPy's ``take_along_axis``.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([[10.0, 30.0, 20.0]])
        >>> mg.take_along_dim(x, x.argmax(1, keepdim=True), 1)
        tensor([[30.]])
    """
    indices = _index_tensor(indices, "take_along_dim")
    (d,) = normalize_dims(dim, input.ndim, "take_along_dim")
    if indices.ndim != input.ndim:
        raise ShapeError(
            f"take_along_dim: indices must have as many dimensions as input ({input.ndim}), "
            f"got shape {indices.shape}"
        )
    if input.ndim:
        check_indices(indices.numpy(), input.shape[d], "take_along_dim", dim=d)
    shape = tuple(builtins.max(a, b) if i != d else None for i, (a, b) in
                  enumerate(zip(input.shape, indices.shape)))
    x_shape = tuple(s if i != d else input.shape[d] for i, s in enumerate(shape))
    i_shape = tuple(s if i != d else indices.shape[d] for i, s in enumerate(shape))
    try:
        if input.shape != x_shape:
            input = expand(input, x_shape)
        if indices.shape != i_shape:
            indices = expand(indices, i_shape)
    except ValueError as e:
        raise ShapeError(
            f"take_along_dim: input of shape {input.shape} and indices of shape "
            f"{indices.shape} do not broadcast outside dim={d} ({e})"
        ) from None
    return gather(input, d, indices)


@public
def scatter_add(input: Tensor, dim: int, index: Any, src: Tensor) -> Tensor:
    """A copy of ``input`` with each element of ``src`` added at its ``index`` along ``dim``
    (repeats summed); ``index`` and ``src`` have the same shape.

    Example:
        >>> import memgrad as mg
        >>> mg.scatter_add(mg.zeros(3), 0, mg.tensor([0, 2, 0]), mg.tensor([1.0, 2.0, 3.0]))
        tensor([4., 0., 2.])
    """
    index = _index_tensor(index, "scatter_add")
    if index.shape != src.shape or index.ndim != input.ndim:
        raise ShapeError(
            f"scatter_add: index and src must have the same shape and input's number of "
            f"dimensions; got input {input.shape}, index {index.shape}, src {src.shape}"
        )
    (d,) = normalize_dims(dim, input.ndim, "scatter_add")
    if any(k != s for i, (s, k) in enumerate(zip(input.shape, index.shape)) if i != d):
        raise ShapeError(
            f"scatter_add: index of shape {index.shape} must match input of shape "
            f"{input.shape} in every dimension but dim={d}"
        )
    check_indices(index.numpy(), input.shape[d], "scatter_add", dim=d)
    return input + gather_backward(src, index, dim=d, shape=input.shape)


@public
def max(input: Tensor, dim=None, keepdim: bool = False):
    """``max(t)``: the largest element (ties share the gradient evenly). ``max(t, dim)``: a
    ``(values, indices)`` pair as in PyTorch; the gradient goes to the returned index.
    ``max(a, b)``: elementwise, as ``maximum``.

    Example:
        >>> import memgrad as mg
        >>> v, i = mg.tensor([[1.0, 5.0], [7.0, 2.0]]).max(dim=1)
        >>> v, i
        (tensor([5., 7.]), tensor([1, 0]))
    """
    return _max_min(input, dim, keepdim, amax, np.argmax, "max")


@public
def min(input: Tensor, dim=None, keepdim: bool = False):
    """As ``max``, for the smallest values."""
    return _max_min(input, dim, keepdim, amin, np.argmin, "min")


def _max_min(input, dim, keepdim, reduce_fn, arg_fn, api):
    if isinstance(dim, Tensor):
        return (maximum if api == "max" else minimum)(input, dim)
    if dim is None:
        return reduce_fn(input)
    dims = normalize_dims(dim, input.ndim, api)  # a bad dim is reported under the caller's name
    if not isinstance(dim, (int, np.integer)):
        return reduce_fn(input, dim, keepdim)
    if input.ndim == 0:  # PyTorch allows dim 0 (or -1) on a 0-d tensor: the element itself
        index = Tensor(np.zeros((), dtype=np.int64))
        return MaxResult(gather(input, 0, index), index)
    (d,) = dims
    if input.shape[d] == 0:
        raise IndexError(
            f"{api}(): cannot reduce over dimension {d} of size 0 (input of shape {input.shape})"
        )
    # as in PyTorch, the values are gathered at the indices, which backward keeps
    index = Tensor(arg_fn(input._data, axis=d, keepdims=True).astype(np.int64, copy=False))
    values = gather(input, d, index)
    if keepdim:
        return MaxResult(values, index)
    return MaxResult(values.squeeze(d), index.squeeze(d))
