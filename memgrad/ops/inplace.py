"""In-place ops: ``add_``, ``mul_``, ..., ``t[index] = v``.

NOTE [ Views and in-place ops ]
An in-place op writes into the tensor's own array and bumps its version counter, which the
tensor shares with its views and detached aliases; a saved tensor changed this way makes
backward raise. When no gradient is involved (grad mode off, or nothing requires grad) that
is all. Otherwise the op is recorded like its out-of-place form, applied to an alias that
holds the tensor's old graph position, and the tensor is rebased onto the new node: it
keeps its array and gets the new ``grad_fn``, and the shared counter's ``gen`` is bumped.
A view made before that (``gen`` differs from the view's ``_view_gen``) has a stale graph:
before it is used in grad mode (by an op, a custom Function, as a backward root or a
``grad`` input) its view ops, recorded from its base when it was made, are replayed on the
base, which gives it the base's current graph, as PyTorch's views have (a buffer filled row
by row after a view of it was taken). An in-place op on a view itself, when a gradient is
involved, computes the view's new values out of place and gives the base the graph of
writing them into it (``view_write``, PyTorch's CopySlices); the view and every other view
of the base then follow the base. Only a view of a leaf that requires grad refuses, and, as
in PyTorch, a view that a custom Function returned (a reentrant checkpoint's output
included): its new graph would come from its base, and the Function's backward would never
run for it.

NOTE [ Overlapping writes ]
A write whose value shares memory with the tensor written has no single meaning: read
everything first, or read and write element by element? PyTorch refuses the ambiguous cases
and memgrad refuses the same ones (``_check_overlap``). Two arrays that are each dense (their
elements fill one block of memory, in some order of dims) overlap fully when they have the same
block, shape and strides, and partly when their blocks intersect otherwise. An elementwise
in-place op or ``copy_`` refuses a value that overlaps the tensor partly (``x.add_(x.t())``,
``x[1:] = x[:-1]``) and allows a full overlap (``x.mul_(x)``); an advanced-index write
(``x[i] = v``), ``scatter_`` and ``scatter_add_`` refuse any overlap of the value or the index
with the tensor. When either array is not dense the overlap is too hard to tell cheaply;
PyTorch then writes element by element, and memgrad reads the whole value first (the
out-of-place result in grad mode, NumPy's overlap-safe assignment or a private copy of the
value otherwise), so grad mode and no-grad mode agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from memgrad import interpreters
from memgrad.autograd.grad_mode import state
from memgrad.autograd.graph import refresh_view
from memgrad.ops import arrange, indexing
from memgrad.ops import elementwise as ew
from memgrad.ops.movement import index_put, memory_order, normalize_index, view_write
from memgrad.ops.registry import Primitive, apply, primitive
from memgrad.tensor import Tensor, wrap

__all__ = ["add_", "sub_", "mul_", "div_", "zero_", "fill_", "copy_", "clamp_", "relu_",
           "masked_fill_", "scatter_", "scatter_add_", "setitem"]


def _inplace(
    api: str,
    t: Tensor,
    prim: Primitive,
    args: tuple,
    params: dict,
    direct: Callable[[np.ndarray], Any],
    reads: tuple | None = None,
) -> Tensor:
    """Change ``t`` in place by ``prim`` applied to ``(t,) + args``: ``direct`` writes the
    new values into ``t``'s array when no gradient is involved. ``reads`` are the values the
    caller was given when ``args`` hold something computed from them (``add_``'s ``alpha``);
    a value that partly overlaps ``t`` is refused (NOTE [ Overlapping writes ])."""
    for a in args if reads is None else reads:
        if isinstance(a, Tensor) and _overlap(t._data, a._data) == "partial":
            raise _overlap_error(api, t, a)
    tensors = (t,) + tuple(a for a in args if isinstance(a, Tensor))
    if state.grad_enabled:
        for a in tensors:  # a view whose base was rebased may require grad by now
            if a._base is not None and a._vc.gen != a._view_gen:
                refresh_view(a)
    if not state.grad_enabled or not any(a._requires_grad for a in tensors):
        if interpreters.active:  # a checkpoint's op log checks what the write reads
            interpreters.written(prim.inplace_variant, (t,) + args, params)
        _write(api, t, direct)
        t._bump_version()
        return t
    if t.grad_fn is None and t._requires_grad:
        raise RuntimeError(
            f"{api}: a leaf Variable that requires grad is being used in an in-place "
            "operation. Do the change under mg.no_grad() (as optimizers do), or work on a "
            "clone: t = t.clone()."
        )
    if t._base is not None:
        return _inplace_view(api, t, prim, args, params)
    result = apply(prim.inplace_variant, (_old(t, prim, args),) + args, params)
    _write(api, t, lambda a: np.copyto(a, result._data, casting="same_kind"))
    vc = t._version_counter()
    vc.v += 1
    vc.gen += 1
    t.grad_fn = result.grad_fn
    t.output_nr = 0
    t._requires_grad = True
    return t


def _old(t: Tensor, prim: Primitive, args: tuple) -> Tensor:
    """``t`` before the write, at its graph position: a copy if the op's backward needs the
    values the write overwrites, else an alias."""
    needs = [t._requires_grad] + [isinstance(a, Tensor) and a._requires_grad for a in args]
    if any(i == 0 and any(needs[j] for j in by) for i, by in prim.save_inputs):
        old = Tensor(t._data.copy())
    else:
        old = wrap(t._data)
        old._vc = t._version_counter()
    old.grad_fn = t.grad_fn
    old.output_nr = t.output_nr
    old._requires_grad = t._requires_grad
    return old


def _inplace_view(api: str, t: Tensor, prim: Primitive, args: tuple, params: dict) -> Tensor:
    """An in-place op on view ``t`` with a gradient involved: the view's new values are the
    op's out-of-place result, and its base gets the graph of writing them into it
    (``view_write``), as PyTorch's CopySlices does; the view then follows its base."""
    function = getattr(t.grad_fn, "_forward_cls", None)
    if function is not None:  # the view is an output of a custom Function
        raise _function_view_error(api, t, function)
    base = t._base
    if base.grad_fn is None and base._requires_grad:
        raise RuntimeError(
            f"{api}: a view of a leaf Variable that requires grad is being used in an in-place "
            "operation. Do the change under mg.no_grad() (as optimizers do), or work on a "
            "clone of the leaf."
        )
    if not t._data.flags.writeable:
        _write(api, t, lambda a: np.copyto(a, 0))  # raises the read-only error
    result = apply(prim.inplace_variant, (_old(t, prim, args),) + args, params)
    whole = wrap(base._data)
    whole._vc = base._version_counter()
    whole.grad_fn = base.grad_fn
    whole.output_nr = base.output_nr
    whole._requires_grad = base._requires_grad
    steps = tuple((p.name, tuple(sorted(kw.items()))) for p, kw in t._view_fn)
    written = view_write(whole, result, steps=steps, order=memory_order(base._data))
    _write(api, t, lambda a: np.copyto(a, result._data, casting="same_kind"))
    vc = base._version_counter()
    vc.v += 1
    vc.gen += 1
    base.grad_fn = written.grad_fn
    base.output_nr = 0
    base._requires_grad = True
    refresh_view(t)
    return t


def _function_view_error(api: str, t: Tensor, function: type) -> RuntimeError:
    """PyTorch's refusal of an in-place change of a view that a custom Function returned:
    the view's new graph would come from its base, and the Function's backward would never
    run for it. A Function may name its own error (``_view_inplace_error``)."""
    own = getattr(function, "_view_inplace_error", None)
    if own is not None:
        return own(api, t.output_nr)
    return RuntimeError(
        f"{api}: output {t.output_nr} of {function.__name__}Backward is a view and is being "
        f"modified in place. The view was made inside {function.__name__}.forward (or it "
        "returned an input as it is), and the write would replace the Function's backward "
        "with its base's graph, giving wrong gradients. Clone the output of the Function "
        "first: out = out.clone()."
    )


def _span(a: np.ndarray) -> tuple[int, int] | None:
    """The bytes ``[begin, end)`` that ``a`` covers when its elements fill them exactly (in
    some order of its dims, none reversed), else None."""
    expected = a.itemsize
    for stride, n in sorted((s, n) for s, n in zip(a.strides, a.shape) if n != 1):
        if stride != expected:
            return None
        expected *= n
    begin = a.__array_interface__["data"][0]
    return begin, begin + a.nbytes


def _overlap(dst: np.ndarray, src: np.ndarray) -> str:
    """How ``src`` overlaps ``dst``: ``"no"``, ``"full"`` (the same elements in the same
    layout), ``"partial"``, or ``"hard"`` when either is not dense."""
    if src is dst:
        return "full"
    if src.size == 0 or dst.size == 0 or not np.may_share_memory(dst, src):
        return "no"
    a, b = _span(dst), _span(src)
    if a is None or b is None:
        return "hard"
    if a == b:
        same = dst.shape == src.shape and dst.strides == src.strides
        return "full" if same else "partial"
    return "partial" if a[0] < b[1] and b[0] < a[1] else "no"


def _overlap_error(api: str, t: Tensor, value: Any, what: str = "value") -> RuntimeError:
    return RuntimeError(
        f"{api}: some elements of the {what} (shape {tuple(value.shape)}) and of the tensor "
        f"written to (shape {t.shape}) are the same memory, so the result would depend on the "
        f"order of the writes; clone() the {what} first (for example x[i] = v.clone())"
    )


def _write(api: str, t: Tensor, direct: Callable[[np.ndarray], Any]) -> None:
    try:
        direct(t._data)
    except (ValueError, TypeError) as e:
        if not t._data.flags.writeable:
            raise RuntimeError(
                f"{api}: this tensor of shape {t.shape} is read-only (an expand()ed view "
                "shares one element between many positions); clone() it before changing it "
                "in place"
            ) from None
        kind = TypeError if isinstance(e, TypeError) else ValueError
        raise kind(f"{api}: {e} (tensor dtype {t.dtype}, shape {t.shape})") from None


def _data(x: Any) -> Any:
    return x._data if isinstance(x, Tensor) else x


def _alpha(other: Any, alpha: Any) -> Any:
    return other if alpha == 1 else other * alpha


def add_(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
    """In-place ``self += alpha * other``."""
    value = _alpha(other, alpha)
    return _inplace("add_", self, ew.add, (value,), {},
                    lambda a: np.add(a, _data(value), out=a, casting="same_kind"), (other,))


def sub_(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
    """In-place ``self -= alpha * other``."""
    value = _alpha(other, alpha)
    return _inplace("sub_", self, ew.sub, (value,), {},
                    lambda a: np.subtract(a, _data(value), out=a, casting="same_kind"),
                    (other,))


def mul_(self: Tensor, other: Any) -> Tensor:
    """In-place ``self *= other``."""
    return _inplace("mul_", self, ew.mul, (other,), {},
                    lambda a: np.multiply(a, _data(other), out=a, casting="same_kind"))


def div_(self: Tensor, other: Any) -> Tensor:
    """In-place ``self /= other``."""
    return _inplace("div_", self, ew.div, (other,), {},
                    lambda a: np.true_divide(a, _data(other), out=a, casting="same_kind"))


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """In-place ``clamp``."""
    return _inplace("clamp_", self, ew.clamp, (), {"min": min, "max": max},
                    lambda a: np.clip(a, min, max, out=a), (min, max))


def relu_(self: Tensor) -> Tensor:
    """In-place ``relu``."""
    return _inplace("relu_", self, ew.relu, (), {}, ew.relu_in_place)


@primitive("fill")
def _fill(x, *, value):
    return np.full_like(x, value)


@_fill.vjp
def _(g, out, needs, x, value):
    return (None,)


def fill_(self: Tensor, value: Any) -> Tensor:
    """Fill with ``value`` in place (no gradient flows to the old values)."""
    value = _data(value)
    return _inplace("fill_", self, _fill, (), {"value": value}, lambda a: a.fill(value))


def zero_(self: Tensor) -> Tensor:
    """Fill with zeros in place."""
    return fill_(self, 0)


@primitive("copy", broadcasting=True)
def _copy(x, src):
    return np.broadcast_to(src, x.shape).astype(x.dtype)


@_copy.vjp
def _(g, out, needs, x, src):
    return None, g if needs[1] else None


def copy_(self: Tensor, src: Any) -> Tensor:
    """Copy ``src`` (broadcast to this shape, cast to this dtype) into this tensor."""
    return _inplace("copy_", self, _copy, (src,), {},
                    lambda a: np.copyto(a, _data(src), casting="unsafe"))


def _through_copy(self: Tensor, result: Tensor) -> Tensor:
    """Write the out-of-place ``result`` of an op on ``self`` back into ``self``: the
    gradient to ``self``'s old values flows through ``result``'s graph (``copy_`` sends none
    to what it overwrites), so an in-place op needs no backward of its own."""
    return copy_(self, result)


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    """In-place ``masked_fill``: ``value`` where ``mask`` is True."""
    return _through_copy(self, arrange.masked_fill(self, mask, value))


def scatter_(self: Tensor, dim: int, index: Any, src: Any = None, *, value: Any = None,
             reduce: str | None = None) -> Tensor:
    """In-place ``scatter``."""
    _refuse_any_overlap("scatter_", self, src, (index,))
    return _through_copy(self, arrange.scatter(self, dim, index, src, value=value,
                                               reduce=reduce))


def scatter_add_(self: Tensor, dim: int, index: Any, src: Tensor) -> Tensor:
    """In-place ``scatter_add``."""
    _refuse_any_overlap("scatter_add_", self, src, (index,))
    return _through_copy(self, indexing.scatter_add(self, dim, index, src))


def setitem(self: Tensor, index: Any, value: Any) -> None:
    """``t[index] = value``, recorded for autograd when a gradient is involved."""
    index = normalize_index(index)
    value = _setitem_value(self, index, value)

    def direct(a: np.ndarray) -> None:
        a[index] = _data(value)

    _inplace("__setitem__", self, index_put, (value,), {"index": index}, direct, ())


def _refuse_any_overlap(api: str, t: Tensor, value: Any, indices: tuple) -> None:
    """Refuse a ``value`` or an index that overlaps ``t`` at all, as PyTorch's advanced-index
    writes and scatters do."""
    for what, v in (("value", value),) + tuple(("index", i) for i in indices):
        if isinstance(v, np.ndarray):
            v = wrap(v)
        if isinstance(v, Tensor) and _overlap(t._data, v._data) in ("full", "partial"):
            raise _overlap_error(api, t, v, what)


def _setitem_value(t: Tensor, index: tuple, value: Any) -> Any:
    """``value`` for ``t[index] = value``, checked for overlap with ``t`` as PyTorch does
    (NOTE [ Overlapping writes ]), in ``t``'s dtype, and a private copy where an overlap too
    hard to tell would make the write read what it has written."""
    arrays = [i for i in index if isinstance(i, np.ndarray)]
    if not isinstance(value, Tensor):
        _refuse_any_overlap("__setitem__", t, None, tuple(arrays))
        return value
    if not arrays and not any(isinstance(i, bool) for i in index):
        if value.ndim:  # a 0-d value fills
            dst = t._data[index]
            src = value._data
            while src.ndim > dst.ndim and src.shape[0] == 1:
                src = src[0]
            if src.shape == dst.shape and _overlap(dst, src) == "partial":
                raise _overlap_error("__setitem__", t, value)
    elif not (value.ndim == 0 and len(arrays) == 1 and arrays[0].dtype == np.bool_):
        _refuse_any_overlap("__setitem__", t, value, tuple(arrays))
        if _overlap(t._data, value._data) == "hard":
            value = value.clone()
    return value.to(t.dtype) if value.dtype != t.dtype else value
