"""Shape and indexing primitives (``reshape``, ``permute``, ``expand``, ``getitem``,
``index_scatter``, ``index_put``, ``cat``) and the composites built on them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops.reduce import normalize_dims, sum_to
from memgrad.ops.registry import REGISTRY, primitive, public
from memgrad.tensor import Tensor

__all__ = [
    "reshape",
    "view",
    "permute",
    "transpose",
    "expand",
    "squeeze",
    "unsqueeze",
    "flatten",
    "t",
    "narrow",
    "unbind",
    "getitem",
    "index_scatter",
    "index_put",
    "cat",
    "concat",
    "hstack",
    "vstack",
    "stack",
    "movedim",
    "broadcast_to",
    "unflatten",
    "chunk",
    "split",
    "normalize_index",
    "shape_args",
    "check_indices",
    "memory_order",
    "view_write",
]


def shape_args(shape: tuple, api: str) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean shape (2, 3)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if s.__class__ is not int:  # NumPy integers (and bools) are converted
            if not isinstance(s, (int, np.integer)):
                raise TypeError(f"{api}: sizes must be ints, got {shape!r}")
            return tuple(int(s) for s in shape)
    return shape


@primitive("reshape", view=True, kind="movement")
def _reshape(x, *, shape):
    return x.reshape(shape) if x.__class__ is np.ndarray else np.reshape(x, shape)


@_reshape.vjp
def _(g, out, needs, x, shape):
    return (_reshape(g, shape=x.shape),)


@public
def reshape(input: Tensor, *shape) -> Tensor:
    """A tensor with the same data in a new shape (a view when possible); -1 infers a size.

    Example:
        >>> import memgrad as mg
        >>> mg.arange(6).reshape(2, 3).shape
        (2, 3)
    """
    return _reshape(input, shape=shape_args(shape, "reshape"))


@public
def view(input: Tensor, *shape) -> Tensor:
    """As ``reshape``, but raises instead of copying when the data cannot be viewed."""
    shape = shape_args(shape, "view")
    data = input._data
    # np.reshape returns a view whenever one exists, so a result in a fresh buffer means the
    # strides forbid a view (NumPy 2.0 has no reshape(copy=False) to ask directly)
    try:
        viewed = np.reshape(data, shape)
    except ValueError as e:
        why = str(e)
    else:
        if viewed.size == 0 or np.may_share_memory(viewed, data):
            return _reshape(input, shape=shape)
        why = "its strides do not allow one"
    raise RuntimeError(
        f"view: cannot view a tensor of shape {input.shape} (strides {data.strides}) as shape "
        f"{shape} without copying ({why}); use .reshape(...) instead"
    )


@primitive("permute", view=True, kind="movement")
def _permute(x, *, dims):
    return x.transpose(dims) if x.__class__ is np.ndarray else np.transpose(x, dims)


@_permute.vjp
def _(g, out, needs, x, dims):
    return (_permute(g, dims=tuple(sorted(range(len(dims)), key=dims.__getitem__))),)


@public
def permute(input: Tensor, *dims) -> Tensor:
    """Reorder the dimensions (a view)."""
    dims = shape_args(dims, "permute")
    n = input._data.ndim
    normal = tuple(d % n for d in dims) if n else dims
    if sorted(normal) != list(range(n)):
        raise ValueError(
            f"permute: dims {dims} must be a permutation of the {n} dimensions of a "
            f"tensor of shape {input.shape}"
        )
    return _permute(input, dims=normal)


@public
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dimensions (a view).

    Example:
        >>> import memgrad as mg
        >>> mg.zeros(2, 3).transpose(0, 1).shape
        (3, 2)
    """
    n = input._data.ndim
    if n < 2 and dim0 in (0, -1) and dim1 in (0, -1):
        return _reshape(input, shape=input.shape)
    d0, d1 = normalize_dims(dim0, n, "transpose")[0], normalize_dims(dim1, n, "transpose")[0]
    dims = list(range(n))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _permute(input, dims=tuple(dims))


@primitive("expand", view=True, kind="movement")
def _expand(x, *, shape):
    return np.broadcast_to(x, shape)


@_expand.vjp
def _(g, out, needs, x, shape):
    return (sum_to(g, shape=x.shape),)


@public
def expand(input: Tensor, *sizes) -> Tensor:
    """Broadcast to a larger shape without copying; -1 keeps a size. The result is
    read-only: in-place changes to it raise."""
    sizes = shape_args(sizes, "expand")
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise ValueError(
            f"expand: the number of sizes ({len(sizes)}) must be at least the number of "
            f"dimensions of the tensor ({input.ndim})"
        )
    shape = tuple(
        input.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes)
    )
    return _expand(input, shape=shape)


@public
def squeeze(input: Tensor, dim=None) -> Tensor:
    """Remove dimensions of size 1 (all of them, or those in ``dim``)."""
    if dim is None:
        shape = tuple(s for s in input.shape if s != 1)
    else:
        dims = normalize_dims(dim, input.ndim, "squeeze") if input.ndim else ()
        shape = tuple(s for i, s in enumerate(input.shape) if not (i in dims and s == 1))
    return _reshape(input, shape=shape)


@public
def unsqueeze(input: Tensor, dim: int) -> Tensor:
    """Insert a dimension of size 1 at ``dim``."""
    n = input.ndim + 1
    if not -n <= dim < n:
        raise IndexError(
            f"unsqueeze: Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
            f"but got {dim})"
        )
    dim %= n
    return _reshape(input, shape=input.shape[:dim] + (1,) + input.shape[dim:])


@public
def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim..end_dim`` into one."""
    if input.ndim == 0:
        return _reshape(input, shape=(1,))
    s, e = (normalize_dims(d, input.ndim, "flatten")[0] for d in (start_dim, end_dim))
    if s > e:
        raise ValueError("flatten: start_dim must come before end_dim")
    merged = int(np.prod(input.shape[s : e + 1]))
    return _reshape(input, shape=input.shape[:s] + (merged,) + input.shape[e + 1 :])


@public
def t(input: Tensor) -> Tensor:
    """The transpose of a matrix (a view); a 0-D or 1-D tensor as it is, as PyTorch's ``t``.

    Example:
        >>> import memgrad as mg
        >>> mg.ones(2, 3).t().shape
        (3, 2)
    """
    if input.ndim > 2:
        raise RuntimeError(f"t: expects a tensor with at most 2 dimensions, got shape "
                           f"{input.shape}; use transpose(dim0, dim1) or .mT for a batch")
    return input if input.ndim < 2 else transpose(input, 0, 1)


@public
def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    """Elements ``start .. start + length - 1`` along ``dim`` (a view); a negative ``start``
    counts from the end.

    Example:
        >>> import memgrad as mg
        >>> mg.arange(6).narrow(0, 2, 3)
        tensor([2, 3, 4])
    """
    d = normalize_dims(dim, input.ndim, "narrow")[0]
    n = input.shape[d]
    begin = start + n if start < 0 else start
    if not 0 <= begin <= n or length < 0 or begin + length > n:
        raise IndexError(f"narrow: start {start} and length {length} do not fit dimension {dim} "
                         f"of size {n}")
    index = (slice(None),) * d + (slice(begin, begin + length),)
    return getitem(input, index=normalize_index(index))


@public
def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along ``dim``, that dimension removed, as a tuple of views.

    Example:
        >>> import memgrad as mg
        >>> [r.tolist() for r in mg.tensor([[1, 2], [3, 4]]).unbind(1)]
        [[1, 3], [2, 4]]
    """
    d = normalize_dims(dim, input.ndim, "unbind")[0]
    return tuple(getitem(input, index=normalize_index((slice(None),) * d + (i,)))
                 for i in range(input.shape[d]))


# ---------------------------------------------------------------------------- indexing


def normalize_index(index) -> tuple:
    """An index as a tuple NumPy understands (tensors and lists become arrays), ending in
    ``...`` so that an integer index gives a 0-d view rather than a copied scalar."""
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    for i in index:
        if isinstance(i, Tensor):
            i = i._data
        elif isinstance(i, list):
            i = np.asarray(i)
        if isinstance(i, np.ndarray) and i.dtype.kind not in "iub":
            raise IndexError(
                f"tensors used as indices must be long, int or bool tensors, got {i.dtype}"
            )
        out.append(i)
    if not any(i is Ellipsis for i in out):
        out.append(Ellipsis)
    return tuple(out)


def _is_basic(index: tuple) -> bool:
    return all(
        i is None
        or i is Ellipsis
        or isinstance(i, (int, np.integer, slice))
        and not isinstance(i, bool)
        for i in index
    )


@primitive("getitem", view=True, kind="movement", array_params=("index",))
def getitem(x, *, index):
    return x[index]


@getitem.vjp
def _(g, out, needs, x, index):
    return (index_scatter(g, shape=x.shape, index=index),)


@primitive("index_scatter", kind="movement", array_params=("index",))
def index_scatter(g, *, shape, index):
    """Zeros of ``shape`` with ``g`` added at ``index`` (repeated positions summed)."""
    out = np.zeros(shape, dtype=g.dtype)
    if _is_basic(index):
        out[index] = g
        return out
    from memgrad._kernels.scatter import index_add_rows

    rows = index[0]
    if (
        len(index) == 2
        and isinstance(rows, np.ndarray)
        and rows.dtype.kind in "iu"
        and index[1] is Ellipsis
        and len(shape) >= 1
    ):
        # x[idx] with one integer array on dim 0: add whole rows
        n = shape[0]
        rows = rows.ravel().astype(np.int64)
        check_indices(rows, n, "index_scatter", allow_negative=True)
        rows = np.where(rows < 0, rows + n, rows)
        flat = out.reshape(n, math.prod(shape[1:]))  # not -1: n may be 0
        index_add_rows(flat, rows, np.ascontiguousarray(g).reshape(rows.shape[0], flat.shape[1]))
        return out
    positions = np.arange(out.size, dtype=np.int64).reshape(shape)[index]
    index_add_rows(out.reshape(-1, 1), positions.ravel(), np.ascontiguousarray(g).reshape(-1, 1))
    return out


@index_scatter.vjp
def _(g, out, needs, x, shape, index):
    return (getitem(g, index=index),)


@primitive("index_put", kind="movement", array_params=("index",))
def index_put(x, v, *, index):
    """A copy of ``x`` with ``v`` written at ``index`` (the out-of-place ``x[index] = v``)."""
    out = np.array(x, copy=True)
    out[index] = v
    return out


@index_put.vjp
def _(g, out, needs, x, v, index):
    gx = index_put(g, 0.0, index=index) if needs[0] else None
    gv = None
    if needs[1]:
        gv = getitem(g, index=index)
        if gv.shape != v.shape:
            gv = sum_to(gv, shape=v.shape)
    return gx, gv


def memory_order(a: np.ndarray) -> tuple[int, ...]:
    """The axes of ``a`` from the one with the largest stride to the smallest."""
    return tuple(int(i) for i in np.argsort([-abs(s) for s in a.strides], kind="stable"))


def _replay(steps: tuple, a: Any) -> Any:
    for name, params in steps:
        a = REGISTRY[name].forward(a, **dict(params))
    return a


@primitive("view_write", kind="movement")
def view_write(base, src, *, steps, order):
    """A copy of ``base`` with ``src`` written into the view that the view ops ``steps``
    (``((primitive name, ((param, value), ...)), ...)``) take of it: the out-of-place form
    of an in-place change through a view. ``order`` is ``base``'s memory order
    (``memory_order``), which the copy keeps so that the view ops give a view of it again."""
    out = np.empty(tuple(base.shape[i] for i in order), dtype=base.dtype)
    out = out.transpose(tuple(int(i) for i in np.argsort(order)))
    out[...] = base
    dst = _replay(steps, out)
    if not np.shares_memory(dst, out) or not dst.flags.writeable:
        raise ValueError(f"the view {[n for n, _ in steps]} of the base cannot be written into")
    dst[...] = src
    return out


@view_write.vjp
def _(g, out, needs, base, src, steps, order):
    gb = view_write(g, 0.0, steps=steps, order=order) if needs[0] else None
    gs = None
    if needs[1]:
        gs = g
        for name, params in steps:
            gs = REGISTRY[name](gs, **dict(params))
        if gs.shape != src.shape:
            gs = sum_to(gs, shape=src.shape)
    return gb, gs


def check_indices(index: np.ndarray, size: int, api: str, allow_negative: bool = False,
                  dim: int = 0) -> None:
    """Raise IndexError naming ``api`` unless every index is valid for a dimension of
    ``size`` (in ``[-size, size)`` with ``allow_negative``, else in ``[0, size)``)."""
    if index.size == 0:
        return
    lo, hi = int(index.min()), int(index.max())
    low = -size if allow_negative else 0
    if lo < low or hi >= size:
        bad = lo if lo < low else hi
        raise IndexError(
            f"{api}: index {bad} is out of bounds for dimension {dim} with size {size} "
            f"(valid: {low} to {size - 1})"
        )


@primitive("cat", kind="movement")
def _cat(*xs, dim):
    return np.concatenate(xs, axis=dim)


@_cat.vjp
def _(g, out, needs, *xs, dim):
    grads = []
    start = 0
    lead = (slice(None),) * dim
    for x, n in zip(xs, needs):
        size = x.shape[dim]
        grads.append(getitem(g, index=lead + (slice(start, start + size), Ellipsis)) if n else None)
        start += size
    return tuple(grads)


@public(method=False)
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dimension.

    Example:
        >>> import memgrad as mg
        >>> mg.cat([mg.zeros(2, 3), mg.ones(1, 3)]).shape
        (3, 3)
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"cat: expected Tensors, got {type(t).__name__} at position {i}")
    first = tensors[0].shape
    (d,) = normalize_dims(dim, len(first), "cat")
    for i, t in enumerate(tensors):
        if (
            len(t.shape) != len(first)
            or t.shape[:d] + t.shape[d + 1 :] != first[:d] + first[d + 1 :]
        ):
            raise ShapeError(
                f"cat: tensor {i} has shape {t.shape} but tensor 0 has shape {first}; all "
                f"sizes except dimension {d} must match"
            )
    return _cat(*tensors, dim=d)


@public(method=False)
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join equally shaped tensors along a new dimension."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty list of Tensors")
    shape = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.shape != shape:
            raise ShapeError(
                f"stack: expects each tensor to be equal size, but got {shape} at entry 0 and "
                f"{t.shape} at entry {i}"
            )
    return cat([unsqueeze(t, dim) for t in tensors], dim)


@public
def split(input: Tensor, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into pieces of ``split_size`` (the last may be smaller) or of the given sizes."""
    (d,) = normalize_dims(dim, input.ndim, "split")
    n = input.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        step = int(split_size_or_sections)
        if step <= 0:
            raise ValueError(f"split: split_size must be positive, got {step}")
        sizes = [min(step, n - s) for s in range(0, n, step)] or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ValueError(
                f"split: sizes {sizes} add up to {sum(sizes)} but dimension {d} has size {n}"
            )
    lead = (slice(None),) * d
    pieces = []
    start = 0
    for s in sizes:
        pieces.append(getitem(input, index=lead + (slice(start, start + s), Ellipsis)))
        start += s
    return tuple(pieces)


@public
def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into ``chunks`` pieces of size ``ceil(n / chunks)`` (the last may be smaller), as
    in PyTorch."""
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    (d,) = normalize_dims(dim, input.ndim, "chunk")
    n = input.shape[d]
    return split(input, max(-(-n // chunks), 1), d)


@public(method=False)
def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``cat`` under its other name.

    Example:
        >>> import memgrad as mg
        >>> mg.concat([mg.zeros(1, 2), mg.ones(1, 2)], dim=1).shape
        (1, 4)
    """
    return cat(tensors, dim)


def _at_least(tensors: Sequence[Tensor], ndim: int, api: str) -> list[Tensor]:
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{api}: expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: expected Tensors, got {type(t).__name__} at position {i}")
    return [reshape(t, (1,) * (ndim - t.ndim) + t.shape) if t.ndim < ndim else t
            for t in tensors]


@public(method=False)
def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along the columns: along dimension 1, or 0 for 1-D tensors (as NumPy's
    ``hstack``).

    Example:
        >>> import memgrad as mg
        >>> mg.hstack([mg.tensor([1.0]), mg.tensor([2.0, 3.0])])
        tensor([1., 2., 3.])
    """
    tensors = _at_least(tensors, 1, "hstack")
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@public(method=False)
def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along the rows (dimension 0), 1-D tensors taken as rows.

    Example:
        >>> import memgrad as mg
        >>> mg.vstack([mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0])]).shape
        (2, 2)
    """
    return cat(_at_least(tensors, 2, "vstack"), 0)


@public
def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:
    """A view with dimension(s) ``source`` moved to position(s) ``destination``, the others
    in their order.

    Example:
        >>> import memgrad as mg
        >>> mg.zeros(2, 3, 4).movedim(0, -1).shape
        (3, 4, 2)
    """
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise ValueError(f"movedim: source and destination must name as many dimensions, got "
                         f"{len(src)} and {len(dst)}")
    src_d = tuple(normalize_dims(d, input.ndim, "movedim")[0] for d in src)
    dst_d = tuple(normalize_dims(d, input.ndim, "movedim")[0] for d in dst)
    if len(set(src_d)) != len(src_d) or len(set(dst_d)) != len(dst_d):
        raise ValueError(f"movedim: repeated dimension in source {src} or destination {dst}")
    rest = iter(d for d in range(input.ndim) if d not in src_d)
    placed = dict(zip(dst_d, src_d))
    return permute(input, *(placed[i] if i in placed else next(rest) for i in range(input.ndim)))


@public
def broadcast_to(input: Tensor, size: Any) -> Tensor:
    """``expand`` to ``size`` (a tuple; -1 keeps a size): a read-only view.

    Example:
        >>> import memgrad as mg
        >>> mg.broadcast_to(mg.tensor([1.0, 2.0]), (2, 2))
        tensor([[1., 2.],
                [1., 2.]])
    """
    return expand(input, *shape_args((size,), "broadcast_to"))


@public
def unflatten(input: Tensor, dim: int, sizes: Any) -> Tensor:
    """Split dimension ``dim`` into ``sizes`` (one may be -1): a view where the strides
    allow, as ``reshape``.

    Example:
        >>> import memgrad as mg
        >>> mg.zeros(2, 12).unflatten(1, (3, -1)).shape
        (2, 3, 4)
    """
    (d,) = normalize_dims(dim, input.ndim, "unflatten")
    sizes = tuple(int(s) for s in sizes)
    if not sizes:
        raise ValueError("unflatten: sizes must name at least one size, e.g. (2, -1)")
    known = int(np.prod([s for s in sizes if s != -1]))
    if sizes.count(-1) > 1 or (sizes.count(-1) == 0 and known != input.shape[d]) or (
        sizes.count(-1) == 1 and (known == 0 or input.shape[d] % known)
    ):
        raise ValueError(f"unflatten: sizes {sizes} do not multiply to dimension {d}'s size "
                         f"{input.shape[d]} (one of them may be -1)")
    if -1 in sizes:
        sizes = tuple(input.shape[d] // known if s == -1 else s for s in sizes)
    return reshape(input, input.shape[:d] + sizes + input.shape[d + 1:])
