"""Rearranging and selecting, as PyTorch names it: ``contiguous``, ``tril``/``triu``,
``roll``, ``flip``, ``repeat``, ``repeat_interleave``, ``index_select``, ``scatter``,
``masked_fill``, ``sort``/``argsort``/``topk``, ``cumsum``, ``cumprod`` and ``prod``.

``tril``, ``triu``, ``roll``, ``flip``, ``cumsum``, ``cumprod`` and ``scatter`` are primitives;
the rest are composites (``prod`` multiplies halves until one is left, so its gradient is right
at zeros too; ``cumprod``'s VJP treats zeros in its input apart, see ``_cumprod_grad``;
``sort`` and ``topk`` gather their values at the indices they return, so backward keeps the
indices, as PyTorch's does).

The index-taking functions check their indices (an IndexError naming the function) before
anything runs, and their index arrays reach backward through the saved-value path (an
index tensor changed in place after the forward makes backward raise) or as private copies.
"""

from __future__ import annotations

import builtins
import numbers
from collections import namedtuple
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import state
from memgrad.errors import ShapeError
from memgrad.ops.elementwise import where
from memgrad.ops.indexing import _index_tensor, gather
from memgrad.ops.movement import cat, check_indices, expand, getitem, index_scatter, reshape
from memgrad.ops.reduce import normalize_dims
from memgrad.ops.registry import primitive, public
from memgrad.tensor import Tensor

__all__ = ["contiguous", "tril", "triu", "roll", "flip", "repeat", "tile", "repeat_interleave",
           "index_select", "scatter", "masked_fill", "sort", "argsort", "topk", "cumsum", "cumprod",
           "prod",
           "nonzero", "masked_select", "unique", "diag", "meshgrid",
           "SortResult", "TopkResult"]

SortResult = namedtuple("SortResult", ["values", "indices"])
TopkResult = namedtuple("TopkResult", ["values", "indices"])


def _dim(dim: Any, ndim: int, api: str) -> int:
    (d,) = normalize_dims(dim, ndim, api)
    return d


@primitive("contiguous", kind="movement")
def contiguous(x):
    """A C-contiguous copy of ``x`` (``Tensor.contiguous()`` calls it only when ``x`` is not
    contiguous already)."""
    return np.array(x, order="C", copy=True)


@contiguous.vjp
def _(g, out, needs, x):
    return (g,)


def _triangle(name: str, np_fn):
    @primitive(name, kind="movement")
    def prim(x, *, diagonal):
        return np_fn(x, k=diagonal)

    @prim.vjp
    def _(g, out, needs, x, diagonal):
        return (prim(g, diagonal=diagonal),)

    return prim


_tril = _triangle("tril", np.tril)
_triu = _triangle("triu", np.triu)


def _check_matrix(input: Tensor, diagonal: Any, api: str) -> int:
    if input.ndim < 2:
        raise ShapeError(f"{api}: input must have at least 2 dimensions, got shape {input.shape}")
    if not isinstance(diagonal, numbers.Integral) or isinstance(diagonal, bool):
        raise TypeError(f"{api}: diagonal must be an int, got {type(diagonal).__name__}")
    return int(diagonal)


@public
def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions (elements above ``diagonal`` zeroed).

    Example:
        >>> import memgrad as mg
        >>> mg.ones(2, 2).tril()
        tensor([[1., 0.],
                [1., 1.]])
    """
    return _tril(input, diagonal=_check_matrix(input, diagonal, "tril"))


@public
def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dimensions (elements below ``diagonal`` zeroed)."""
    return _triu(input, diagonal=_check_matrix(input, diagonal, "triu"))


@primitive("roll", kind="movement")
def _roll(x, *, shifts, dims):
    return np.roll(x, shifts, axis=dims)


@_roll.vjp
def _(g, out, needs, x, shifts, dims):
    back = -shifts if isinstance(shifts, int) else tuple(-s for s in shifts)
    return (_roll(g, shifts=back, dims=dims),)


def _ints(value: Any, api: str, name: str) -> tuple[int, ...]:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    for v in items:
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"{api}: {name} must be an int or a tuple of ints, got {value!r}")
    return tuple(int(v) for v in items)


@public
def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    """Shift elements along ``dims`` by ``shifts``, wrapping around; with ``dims=None`` the
    flattened tensor is rolled and its shape restored.

    Example:
        >>> import memgrad as mg
        >>> mg.roll(mg.tensor([1.0, 2.0, 3.0]), 1)
        tensor([3., 1., 2.])
    """
    s = _ints(shifts, "roll", "shifts")
    if dims is None:
        if len(s) != 1:
            raise ValueError(f"roll: with dims=None, shifts must be one int, got {shifts!r}")
        return _roll(input, shifts=s[0], dims=None)
    d = _ints(dims, "roll", "dims")
    if len(d) != len(s):
        raise ValueError(
            f"roll: shifts and dims must have the same length, got {shifts!r} and {dims!r}"
        )
    axes = tuple(_dim(x, input.ndim, "roll") for x in d)
    return _roll(input, shifts=s, dims=axes)


@primitive("flip", kind="movement")
def _flip(x, *, dims):
    return np.flip(x, axis=dims).copy()


@_flip.vjp
def _(g, out, needs, x, dims):
    return (_flip(g, dims=dims),)


@public
def flip(input: Tensor, dims: Any) -> Tensor:
    """Reverse the order of elements along ``dims`` (a copy, as in PyTorch).

    Example:
        >>> import memgrad as mg
        >>> mg.flip(mg.tensor([[1.0, 2.0], [3.0, 4.0]]), (1,))
        tensor([[2., 1.],
                [4., 3.]])
    """
    axes = normalize_dims(_ints(dims, "flip", "dims"), input.ndim, "flip")
    if input.ndim == 0:
        return _flip(input, dims=())
    return _flip(input, dims=axes)


@public
def repeat(input: Tensor, *sizes: Any) -> Tensor:
    """Tile the tensor: ``t.repeat(2, 3)`` repeats it twice along the first dimension and
    three times along the second (``sizes`` may have more entries than ``t`` dimensions).

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([1.0, 2.0]).repeat(2)
        tensor([1., 2., 1., 2.])
    """
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    reps = _ints(sizes, "repeat", "sizes")
    if len(reps) < input.ndim:
        raise ValueError(
            f"repeat: the number of repeat sizes ({len(reps)}) must be at least the number of "
            f"dimensions of the tensor ({input.ndim}); give one per dimension, e.g. "
            f"t.repeat({', '.join(['1'] * input.ndim)})"
        )
    if any(r < 0 for r in reps):
        raise ValueError(f"repeat: sizes must not be negative, got {reps}")
    shape = (1,) * (len(reps) - input.ndim) + tuple(input.shape)
    spread = tuple(x for s in shape for x in (1, s))
    wide = tuple(x for r, s in zip(reps, shape) for x in (r, s))
    return reshape(expand(reshape(input, spread), wide), tuple(r * s for r, s in zip(reps, shape)))


@public
def tile(input: Tensor, dims: Any) -> Tensor:
    """``repeat`` with ``dims`` padded with leading 1s to the tensor's dimensions (so fewer
    entries than dimensions repeat the last ones).

    Example:
        >>> import memgrad as mg
        >>> mg.tile(mg.tensor([[1.0, 2.0]]), (2,))
        tensor([[1., 2., 1., 2.]])
    """
    reps = _ints(dims, "tile", "dims")
    return repeat(input, *((1,) * (input.ndim - len(reps)) + reps))


def _select(input: Tensor, d: int, index: np.ndarray) -> Tensor:
    return getitem(input, index=(slice(None),) * d + (index, Ellipsis))


@public
def index_select(input: Tensor, dim: int, index: Any) -> Tensor:
    """The entries of ``input`` at ``index`` (a 1-D integer tensor) along ``dim``; the
    gradient is added back at the indices (repeats summed).

    Example:
        >>> import memgrad as mg
        >>> mg.index_select(mg.tensor([[1.0, 2.0], [3.0, 4.0]]), 0, mg.tensor([1, 1]))
        tensor([[3., 4.],
                [3., 4.]])
    """
    index = _index_tensor(index, "index_select")
    if index.ndim > 1:
        raise ShapeError(
            f"index_select: index must be 1-D (or 0-d), got shape {index.shape}"
        )
    if input.ndim == 0:
        return reshape(index_select(reshape(input, 1), dim, index), (index.numel(),))
    d = _dim(dim, input.ndim, "index_select")
    picks = index.numpy().reshape(-1).astype(np.int64)
    check_indices(picks, input.shape[d], "index_select", dim=d)
    out = _select(input, d, picks)  # NumPy lays out x[:, idx] with the picked dim first
    return out if out._data.flags.c_contiguous else contiguous(out)  # PyTorch's is contiguous


@public
def repeat_interleave(input: Tensor, repeats: Any, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``dim`` (an int, or one count per element);
    with ``dim=None`` the flattened tensor.

    Example:
        >>> import memgrad as mg
        >>> mg.repeat_interleave(mg.tensor([1.0, 2.0]), mg.tensor([1, 2]))
        tensor([1., 2., 2.])
    """
    if dim is None:
        input = reshape(input, -1)
        dim = 0
    if input.ndim == 0:
        input = reshape(input, 1)
    d = _dim(dim, input.ndim, "repeat_interleave")
    n = input.shape[d]
    counts = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
    if counts.dtype.kind not in "iu":
        raise TypeError(f"repeat_interleave: repeats must be integers, got dtype {counts.dtype}")
    counts = counts.reshape(-1)
    if counts.size not in (1, n):
        raise ShapeError(
            f"repeat_interleave: repeats must have one entry or one per element along dim={d} "
            f"({n}), got {counts.size}"
        )
    if (counts < 0).any():
        raise ValueError("repeat_interleave: repeats must not be negative")
    picks = np.repeat(np.arange(n, dtype=np.int64), np.broadcast_to(counts, (n,)))
    if output_size is not None and output_size != picks.size:
        raise ValueError(
            f"repeat_interleave: output_size={output_size}, but the repeats give {picks.size}"
        )
    return _select(input, d, picks)


@primitive("scatter", saves={"index": (0, 2)}, kind="movement")
def _scatter(x, index, src, *, dim):
    out = np.array(x, copy=True)
    grid = _grid(index, dim)
    out[grid] = src[_lead(index)] if isinstance(src, np.ndarray) and src.ndim else src
    return out


def _grid(index: np.ndarray, dim: int) -> tuple:
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    return tuple(grid)


def _lead(index: Any) -> tuple:
    return tuple(slice(0, k) for k in index.shape)


def _winners(index: np.ndarray, dim: int, shape: tuple) -> np.ndarray:
    """Which ``src`` element each written position keeps: the one the forward's assignment
    wrote last (the same assignment, of element numbers)."""
    ids = np.arange(index.size).reshape(index.shape)
    last = np.full(shape, -1, dtype=np.int64)
    grid = _grid(index, dim)
    last[grid] = ids
    return last[grid] == ids


@_scatter.vjp
def _(g, out, needs, x, index, src, dim):
    gx = _scatter(g, index, 0.0, dim=dim) if needs[0] else None
    gsrc = None
    if needs[2]:
        keep = _winners(index.numpy(), dim, g.shape)
        gsrc = where(Tensor(keep), gather(g, dim, index), 0.0)
        for i, (k, s) in enumerate(zip(index.shape, src.shape)):
            if s > k:  # src elements past index's extent are not written: zero gradient
                rest = gsrc.shape[:i] + (s - k,) + gsrc.shape[i + 1:]
                gsrc = cat([gsrc, Tensor(np.zeros(rest, dtype=gsrc.dtype))], i)
    return gx, None, gsrc


@public
def scatter(input: Tensor, dim: int, index: Any, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> Tensor:
    """A copy of ``input`` with ``src[i][j]`` written at ``[index[i][j]][j]`` for ``dim=0``
    (likewise for other dims), or ``value`` everywhere ``index`` points. ``index`` has
    ``input``'s number of dimensions and sizes at most ``src``'s (and ``input``'s outside
    ``dim``). Where ``index`` repeats a position, one write wins and only it gets a gradient.
    ``reduce="add"`` is ``scatter_add``.

    Example:
        >>> import memgrad as mg
        >>> mg.scatter(mg.zeros(2, 3), 1, mg.tensor([[2], [0]]), mg.tensor([[5.0], [6.0]]))
        tensor([[0., 0., 5.],
                [6., 0., 0.]])
    """
    from memgrad.ops.indexing import scatter_add

    if src is None:
        src = value
    elif value is not None:
        raise TypeError("scatter: give src or value, not both")
    if src is None:
        raise TypeError("scatter: src (a tensor) or value (a number) must be given")
    index = _index_tensor(index, "scatter")
    d = _dim(dim, builtins.max(input.ndim, 1), "scatter")
    if reduce == "add":
        if not isinstance(src, Tensor):
            src = Tensor(np.full(index.shape, src, dtype=input.dtype))
        return scatter_add(input, d, index, src)
    if reduce is not None:
        raise ValueError(f"scatter: reduce must be None or 'add', got {reduce!r}; for "
                         "'multiply' scatter into ones and multiply")
    _check_scatter(input, d, index, src)
    if isinstance(src, Tensor):
        if src.dtype != input.dtype:
            src = src.to(input.dtype)
    else:
        src = input.dtype.type(src)
    if input.ndim == 0:
        return reshape(_scatter(reshape(input, 1), reshape(index, 1),
                                reshape(src, 1) if isinstance(src, Tensor) else src, dim=0), ())
    return _scatter(input, index, src, dim=d)


def _check_scatter(input: Tensor, d: int, index: Tensor, src: Any) -> None:
    if index.ndim != input.ndim:
        raise ShapeError(f"scatter: index must have as many dimensions as input ({input.ndim}), "
                         f"got index of shape {index.shape}")
    if isinstance(src, Tensor):
        if src.ndim != index.ndim or any(k > s for k, s in zip(index.shape, src.shape)):
            raise ShapeError(f"scatter: index of shape {index.shape} must be no larger than src "
                             f"of shape {src.shape} in any dimension")
    elif not isinstance(src, (numbers.Number, np.generic)):
        raise TypeError(f"scatter: src must be a Tensor or a number, got {type(src).__name__}")
    for i, (s, k) in enumerate(zip(input.shape, index.shape)):
        if i != d and k > s:
            raise ShapeError(f"scatter: index of shape {index.shape} is larger than input of "
                             f"shape {input.shape} in dimension {i} (other than dim={d})")
    check_indices(index.numpy(), input.shape[d] if input.ndim else 1, "scatter", dim=d)


@public
def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:
    """``input`` with ``value`` (a number or a 0-d tensor) where the bool ``mask`` (broadcast
    to ``input``'s shape) is True.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([1.0, 2.0]).masked_fill(mg.tensor([True, False]), -1.0)
        tensor([-1.,  2.])
    """
    if not isinstance(mask, Tensor):
        mask = Tensor(np.asarray(mask))
    if mask.dtype != np.bool_:
        raise TypeError(f"masked_fill: mask must be a bool tensor, got dtype {mask.dtype}; "
                        "compare first, e.g. t.masked_fill(t > 0, 0.0)")
    try:
        fits = np.broadcast_shapes(mask.shape, input.shape) == input.shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"masked_fill: mask of shape {mask.shape} does not broadcast to input "
                         f"of shape {input.shape}")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got shape "
                             f"{value.shape}")
        if value.dtype != input.dtype:
            value = value.to(input.dtype)
    elif isinstance(value, (numbers.Number, np.generic)):
        value = input.dtype.type(value)
    else:
        raise TypeError(f"masked_fill: value must be a number or a 0-d tensor, got "
                        f"{type(value).__name__}")
    return where(mask, value, input)


def _order(data: np.ndarray, d: int, descending: bool) -> np.ndarray:
    # a stable sort; descending: sort the reversed array and reverse, so ties keep their order
    if not descending:
        return np.argsort(data, axis=d, kind="stable")
    n = data.shape[d]
    flipped = np.argsort(np.flip(data, d), axis=d, kind="stable")
    return np.flip(n - 1 - flipped, d)


@public
def argsort(input: Tensor, dim: int = -1, descending: bool = False,
            stable: bool = False) -> Tensor:
    """The int64 indices that sort ``input`` along ``dim`` (ties in their original order).

    Example:
        >>> import memgrad as mg
        >>> mg.argsort(mg.tensor([3.0, 1.0, 2.0]))
        tensor([1, 2, 0])
    """
    if input.ndim == 0:
        _dim(dim, 1, "argsort")
        return Tensor(np.zeros((), dtype=np.int64))
    d = _dim(dim, input.ndim, "argsort")
    return Tensor(np.ascontiguousarray(_order(input.numpy(), d, bool(descending)),
                                       dtype=np.int64))


@public
def sort(input: Tensor, dim: int = -1, descending: bool = False,
         stable: bool = False) -> SortResult:
    """``(values, indices)``: ``input`` sorted along ``dim`` and the int64 indices it came
    from; the gradient goes back to the indices.

    Example:
        >>> import memgrad as mg
        >>> mg.sort(mg.tensor([3.0, 1.0, 2.0]), descending=True)
        SortResult(values=tensor([3., 2., 1.]), indices=tensor([0, 2, 1]))
    """
    index = argsort(input, dim, descending, stable)
    if input.ndim == 0:
        return SortResult(input.clone(), index)
    return SortResult(gather(input, dim, index), index)


@public
def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> TopkResult:
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) elements along
    ``dim``, in order; the indices are int64 and the gradient goes back to them.

    Example:
        >>> import memgrad as mg
        >>> mg.topk(mg.tensor([1.0, 5.0, 3.0]), 2)
        TopkResult(values=tensor([5., 3.]), indices=tensor([1, 2]))
    """
    if not isinstance(k, numbers.Integral) or isinstance(k, bool):
        raise TypeError(f"topk: k must be an int, got {type(k).__name__}")
    size = input.shape[_dim(dim, input.ndim, "topk")] if input.ndim else 1
    if not 0 <= k <= size:
        raise IndexError(f"topk: k={k} is out of range for a dimension of size {size} "
                         f"(valid: 0 to {size})")
    if input.ndim == 0:
        return TopkResult(input.clone(), Tensor(np.zeros((), dtype=np.int64)))
    d = _dim(dim, input.ndim, "topk")
    order = _order(input.numpy(), d, bool(largest))
    index = Tensor(np.ascontiguousarray(order[(slice(None),) * d + (slice(0, k),)],
                                        dtype=np.int64))
    return TopkResult(gather(input, d, index), index)


@primitive("cumsum", kind="reduce")
def _cumsum(x, *, dim):
    dtype = np.int64 if x.dtype.kind in "biu" else None
    return np.cumsum(x, axis=dim, dtype=dtype)


@_cumsum.vjp
def _(g, out, needs, x, dim):
    return (_flip(_cumsum(_flip(g, dims=(dim,)), dim=dim), dims=(dim,)),)


@public
def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running sums along ``dim`` (integers and bools sum as int64).

    Example:
        >>> import memgrad as mg
        >>> mg.cumsum(mg.tensor([1.0, 2.0, 3.0]), 0)
        tensor([1., 3., 6.])
    """
    if dtype is not None:
        input = input.to(dtype)
    if input.ndim == 0:
        _dim(dim, 1, "cumsum")
        return reshape(_cumsum(reshape(input, 1), dim=0), ())
    return _cumsum(input, dim=_dim(dim, input.ndim, "cumsum"))


@primitive("cumprod", saves={"x": (0,), "out": (0,)}, kind="reduce")
def _cumprod(x, *, dim):
    dtype = np.int64 if x.dtype.kind in "biu" else None
    return np.cumprod(x, axis=dim, dtype=dtype)


def _revcumsum(t: Tensor, dim: int) -> Tensor:
    return _flip(_cumsum(_flip(t, dims=(dim,)), dim=dim), dims=(dim,))


def _cumprod_grad_by_definition(g: Tensor, x: Tensor, dim: int) -> Tensor:
    """Each input's gradient from the definition, sum over j >= i of g_j times the product
    of x_m for m <= j, m != i: an (n, n) block per slice, every term a polynomial in x, so
    that its derivative is cumprod's second derivative at zeros too."""
    xl = x.movedim(dim, -1)
    n = xl.shape[-1]
    omit = Tensor(np.eye(n, dtype=np.bool_))  # [i, m]: leave x_i out of row i
    rows = _cumprod(where(omit, 1.0, xl.unsqueeze(-2)), dim=xl.ndim)  # [..., i, j]
    later = Tensor(np.triu(np.ones((n, n), dtype=np.bool_)))  # j >= i
    grad = (where(later, rows, 0.0) * g.movedim(dim, -1).unsqueeze(-2)).sum(-1)
    return grad.movedim(-1, dim)


def _cumprod_grad(g: Tensor, out: Tensor, x: Tensor, dim: int) -> Tensor:
    """cumprod's VJP. Without zeros: the reversed running sum of ``g * out``, divided by
    ``x``. With zeros and no graph to record, O(n): before a slice's first zero the same
    quotient (``x`` is nonzero there), at the first zero the reversed running sum of ``g``
    times the running product with that zero taken as 1, after it zero. With zeros under
    ``create_graph`` the gradient by its definition (O(n^2)), as the O(n) form's derivative
    is not cumprod's second derivative."""
    zeros = x._data == 0
    if not zeros.any():
        return _revcumsum(g * out, dim) / x
    if state.grad_enabled:
        return _cumprod_grad_by_definition(g, x, dim)
    seen = np.cumsum(zeros, axis=dim)
    first = Tensor(zeros & (seen == 1))
    before = Tensor(seen == 0)
    quotient = _revcumsum(g * out, dim) / where(Tensor(zeros), 1.0, x)
    at_zero = _revcumsum(g * _cumprod(where(first, 1.0, x), dim=dim), dim)
    return where(before, quotient, 0.0) + where(first, at_zero, 0.0)


@_cumprod.vjp
def _(g, out, needs, x, dim):
    return (_cumprod_grad(g, out, x, dim),)


@public
def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running products along ``dim`` (integers and bools multiply as int64). The gradient
    is right at zeros too, and so is the second derivative.

    Example:
        >>> import memgrad as mg
        >>> mg.cumprod(mg.tensor([1.0, 2.0, 3.0]), 0)
        tensor([1., 2., 6.])
    """
    if dtype is not None:
        input = input.to(dtype)
    if input.ndim == 0:
        _dim(dim, 1, "cumprod")
        return reshape(_cumprod(reshape(input, 1), dim=0), ())
    return _cumprod(input, dim=_dim(dim, input.ndim, "cumprod"))


def _prod_along(x: Tensor, d: int) -> Tensor:
    n = x.shape[d]
    lead = (slice(None),) * d
    if n == 0:
        shape = tuple(s for i, s in enumerate(x.shape) if i != d)
        return Tensor(np.ones(shape, dtype=x.dtype))
    while n > 1:
        half = n // 2
        p = x[lead + (slice(0, half),)] * x[lead + (slice(half, 2 * half),)]
        if n % 2:
            p = cat([p, x[lead + (slice(2 * half, n),)]], d)
        x = p
        n = x.shape[d]
    return x.squeeze(d)


@public
def prod(input: Tensor, dim: int | None = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """The product of the elements (over ``dim``, or all); integers and bools multiply as
    int64. The gradient is right at zeros too (each element gets the product of the others).

    Example:
        >>> import memgrad as mg
        >>> mg.prod(mg.tensor([[1.0, 2.0], [3.0, 4.0]]), 1)
        tensor([ 2., 12.])
    """
    if dtype is not None:
        input = input.to(dtype)
    elif input.dtype.kind in "biu":
        input = input.to(np.int64)
    if dim is None:
        out = _prod_along(reshape(input, -1), 0)
        return reshape(out, (1,) * input.ndim) if keepdim else out
    if input.ndim == 0:
        _dim(dim, 1, "prod")
        return input.clone()
    d = _dim(dim, input.ndim, "prod")
    out = _prod_along(input, d)
    return out.unsqueeze(d) if keepdim else out


@public
def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    """The indices of the nonzero elements: an ``(n, ndim)`` int64 tensor in row-major
    order, or with ``as_tuple=True`` one 1-D tensor per dimension (what indexing takes).

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([[0, 3], [5, 0]]).nonzero()
        tensor([[0, 1],
                [1, 0]])
    """
    data = input._data if input.ndim else input._data.reshape(1)
    where_ = np.nonzero(data)
    if as_tuple:
        return tuple(Tensor(np.asarray(w, dtype=np.int64)) for w in where_)
    found = np.stack(where_, axis=1).astype(np.int64) if data.ndim else np.zeros((0, 0))
    return Tensor(found if input.ndim else found[:, :0])


@public
def masked_select(input: Tensor, mask: Any) -> Tensor:
    """The elements of ``input`` where the bool ``mask`` is True (the two broadcast to one
    shape), as a 1-D tensor in row-major order; the gradient goes back to those elements.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> x.masked_select(x > 1.5)
        tensor([2., 3., 4.])
    """
    if not isinstance(mask, Tensor):
        mask = Tensor(np.asarray(mask))
    if mask.dtype != np.bool_:
        raise TypeError(f"masked_select: mask must be a bool tensor, got dtype {mask.dtype}; "
                        "compare first, e.g. t.masked_select(t > 0)")
    try:
        shape = np.broadcast_shapes(input.shape, mask.shape)
    except ValueError:
        raise ShapeError(f"masked_select: mask of shape {mask.shape} and input of shape "
                         f"{input.shape} do not broadcast") from None
    full = input if input.shape == shape else expand(input, *shape)
    picks = np.broadcast_to(mask._data, shape)
    if not shape:
        return getitem(reshape(full, (1,)), index=(picks.reshape(1).copy(),))
    return getitem(full, index=(picks.copy(),))


@public
def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None) -> Any:
    """The distinct elements (or, with ``dim``, the distinct slices along it), sorted; with
    ``return_inverse`` also where each element went, with ``return_counts`` how often each
    occurs. Not differentiable, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> mg.unique(mg.tensor([3, 1, 3, 2]), return_counts=True)
        (tensor([1, 2, 3]), tensor([1, 1, 2]))
    """
    data = input._data
    if dim is None:
        values, inverse, counts = np.unique(data.reshape(-1), return_inverse=True,
                                            return_counts=True)
        inverse = inverse.reshape(data.shape)
    else:
        d = _dim(dim, builtins.max(input.ndim, 1), "unique")
        values, inverse, counts = np.unique(data, return_inverse=True, return_counts=True,
                                            axis=d)
        inverse = inverse.reshape(-1)
    out: list[Tensor] = [Tensor(values)]
    if return_inverse:
        out.append(Tensor(inverse.astype(np.int64)))
    if return_counts:
        out.append(Tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


@public
def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor's square matrix with it on the ``diagonal``-th diagonal (0 the main one,
    positive above), or a 2-D tensor's ``diagonal``-th diagonal as a 1-D tensor.

    Example:
        >>> import memgrad as mg
        >>> mg.diag(mg.tensor([1.0, 2.0]))
        tensor([[1., 0.],
                [0., 2.]])
    """
    if not isinstance(diagonal, numbers.Integral) or isinstance(diagonal, bool):
        raise TypeError(f"diag: diagonal must be an int, got {diagonal!r}")
    k = int(diagonal)
    if input.ndim == 1:
        n = input.shape[0] + builtins.abs(k)
        at = np.arange(input.shape[0])
        rows, cols = (at, at + k) if k >= 0 else (at - k, at)
        flat = rows * n + cols
        return reshape(index_scatter(input, index=(flat,), shape=(n * n,)), (n, n))
    if input.ndim == 2:
        r, c = input.shape
        start_r, start_c = (0, k) if k >= 0 else (-k, 0)
        length = builtins.max(0, builtins.min(r - start_r, c - start_c))
        at = np.arange(length)
        return getitem(input, index=(at + start_r, at + start_c))
    raise ShapeError(f"diag: input must be 1-D or 2-D, got shape {input.shape}")


@public(method=False)
def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D tensors: with ``indexing="ij"`` (PyTorch's default) output
    ``i`` varies along dimension ``i``; with ``"xy"`` the first two are swapped (NumPy's
    default). The grids are read-only views.

    Example:
        >>> import memgrad as mg
        >>> a, b = mg.meshgrid(mg.tensor([1, 2]), mg.tensor([3, 4, 5]), indexing="ij")
        >>> a.shape, b.tolist()[0]
        ((2, 3), [3, 4, 5])
    """
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor) or t.ndim > 1:
            got = t.shape if isinstance(t, Tensor) else type(t).__name__
            raise ShapeError(f"meshgrid: expected 0-D or 1-D tensors, got {got} at position {i}")
    if not tensors:
        raise ValueError("meshgrid: expected at least one tensor")
    flat = [reshape(t, (-1,)) for t in tensors]
    order = list(range(len(flat)))
    if indexing == "xy" and len(flat) >= 2:
        order[0], order[1] = 1, 0
    shape = tuple(flat[j].shape[0] for j in order)
    grids = []
    for i, t in enumerate(flat):
        axis = order.index(i)
        view = (1,) * axis + (t.shape[0],) + (1,) * (len(flat) - axis - 1)
        grids.append(expand(reshape(t, view), *shape))
    return tuple(grids)
