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
of the base then follow the base. Only a view of a leaf that requires grad refuses.
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
) -> Tensor:
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
    other = _alpha(other, alpha)
    return _inplace("add_", self, ew.add, (other,), {},
                    lambda a: np.add(a, _data(other), out=a, casting="same_kind"))


def sub_(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
    """In-place ``self -= alpha * other``."""
    other = _alpha(other, alpha)
    return _inplace("sub_", self, ew.sub, (other,), {},
                    lambda a: np.subtract(a, _data(other), out=a, casting="same_kind"))


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
                    lambda a: np.clip(a, min, max, out=a))


def relu_(self: Tensor) -> Tensor:
    """In-place ``relu``."""
    return _inplace("relu_", self, ew.relu, (), {}, lambda a: np.maximum(a, 0, out=a))


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
    return _through_copy(self, arrange.scatter(self, dim, index, src, value=value,
                                               reduce=reduce))


def scatter_add_(self: Tensor, dim: int, index: Any, src: Tensor) -> Tensor:
    """In-place ``scatter_add``."""
    return _through_copy(self, indexing.scatter_add(self, dim, index, src))


def setitem(self: Tensor, index: Any, value: Any) -> None:
    """``t[index] = value``, recorded for autograd when a gradient is involved."""
    index = normalize_index(index)
    if isinstance(value, Tensor) and value.dtype != self.dtype:
        value = value.to(self.dtype)

    def direct(a: np.ndarray) -> None:
        a[index] = _data(value)

    _inplace("__setitem__", self, index_put, (value,), {"index": index}, direct)
