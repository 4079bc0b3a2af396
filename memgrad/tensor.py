"""The one tensor type: a NumPy array plus the autograd fields.

This file holds data and autograd bookkeeping only. The math (operators, ``exp``, ``sum``,
indexing, in-place ops...) comes from the op table: ``memgrad.ops`` binds each function to
``Tensor`` once, at import, so there is one definition of every op.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from memgrad import interpreters

__all__ = [
    "Tensor",
    "VersionCounter",
    "RemovableHandle",
    "RetainGrad",
    "wrap",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
    "bool_",
    "default_dtype",
]

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)
default_dtype = float32


class RemovableHandle:
    """Returned by ``register_hook`` and friends; ``remove()`` unregisters the hook."""

    __slots__ = ("_hooks", "_fn")

    def __init__(self, hooks: list, fn: Any) -> None:
        self._hooks = hooks
        self._fn = fn

    def remove(self) -> None:
        try:
            self._hooks.remove(self._fn)
        except ValueError:
            pass

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class RetainGrad:
    """What ``retain_grad()`` asks of the engine: keep the final gradient of ``tensor`` (a
    weak reference) in its ``.grad`` while its ``grad_fn`` is still ``node``."""

    __slots__ = ("tensor", "node")

    def __init__(self, tensor: weakref.ref, node: Any) -> None:
        self.tensor = tensor
        self.node = node


class VersionCounter:
    """Shared by a tensor, its views and its detached aliases.

    ``v`` counts in-place changes to the data. ``gen`` counts in-place changes that gave
    the base tensor a new ``grad_fn``: a view made before such a change has a stale graph,
    which is regenerated from the base before the view is used again. See NOTE [ Views and
    in-place ops ] in ops/inplace.py.
    """

    __slots__ = ("v", "gen")

    def __init__(self) -> None:
        self.v = 0
        self.gen = 0


class Tensor:
    """A NumPy array that can record the ops applied to it for reverse-mode autograd.

    Create tensors with the factories (``mg.tensor``, ``mg.zeros``, ``mg.randn``...).

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad
        tensor([2., 4., 6.])
    """

    __slots__ = (
        "_data",
        "_requires_grad",
        "grad",
        "grad_fn",
        "output_nr",
        "_vc",  # VersionCounter, made on first need (view, in-place change, saved output)
        "_acc",  # weakref to this leaf's AccumulateGrad while a graph holds it
        "_hooks",  # leaf tensor hooks (non-leaf hooks live on grad_fn)
        "_base",  # the tensor this one is a view of
        "_meta",  # the Meta of _data, made when a recorded op first takes this tensor
        "_view_gen",  # _vc.gen when this view was made
        "_view_fn",  # the view ops from _base to this view: ((primitive, params), ...)
        "_retains_grad",
        "_post_acc_hooks",  # leaf hooks run after .grad is updated
        "__weakref__",
    )

    # ndarray + Tensor calls Tensor.__radd__ instead of treating the tensor as an object array
    __array_ufunc__ = None

    def __init__(self, data: Any, requires_grad: bool = False) -> None:
        self._data = data if isinstance(data, np.ndarray) else np.asarray(data)
        self._requires_grad = False
        self.grad = None
        self.grad_fn = None
        self.output_nr = 0
        self._vc = None
        self._acc = None
        self._hooks = None
        self._base = self._meta = None
        # _view_gen, _view_fn, _retains_grad and _post_acc_hooks are set only when used
        # (read with getattr)
        if requires_grad:
            self.requires_grad = True
        if interpreters.active:
            interpreters.tensor_made(self)

    # ----------------------------------------------------------------- data attributes
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self._data.shape if dim is None else self._data.shape[dim]

    def numel(self) -> int:
        return self._data.size

    def numpy(self) -> np.ndarray:
        """The underlying array, shared (no copy)."""
        return self._data

    def tolist(self) -> Any:
        return self._data.tolist()

    def item(self) -> float:
        if interpreters.active:
            interpreters.value_read(self, "item()")
        if self._data.size != 1:
            raise RuntimeError(
                f"Tensor.item(): a Tensor with {self._data.size} elements cannot be converted "
                f"to a Python scalar (shape {self._data.shape}); index one element first, "
                "e.g. t[0].item(), or use t.tolist()"
            )
        return self._data.item()

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._data if dtype is None else self._data.astype(dtype)

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError(
                f"Boolean value of Tensor with {self._data.size} elements is ambiguous; "
                "use .any() or .all()"
            )
        if interpreters.active:
            interpreters.value_read(self, "bool()")
        return bool(self._data)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype}")
        return int(self.item())

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        body = np.array2string(self._data, separator=", ", prefix="tensor(")
        extra = ""
        if self._data.dtype not in (float32, int64, bool_):
            extra += f", dtype={self._data.dtype}"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{self.grad_fn.name()}>"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # ----------------------------------------------------------------- autograd fields
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = bool(value)
        if self.grad_fn is not None:
            if not value:
                raise RuntimeError(
                    "requires_grad can only be changed on leaf tensors; this tensor has "
                    f"grad_fn={self.grad_fn.name()}. Use t.detach() for a copy that does "
                    "not require grad."
                )
            return
        if value and self._data.dtype.kind not in "f":
            raise RuntimeError(
                "Only tensors of floating point dtype can require gradients; got "
                f"{self._data.dtype}. Create it with dtype=mg.float32 or convert with .float()."
            )
        self._requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        vc = self._vc
        return 0 if vc is None else vc.v

    def _version_counter(self) -> VersionCounter:
        vc = self._vc
        if vc is None:
            vc = self._vc = VersionCounter()
        return vc

    def _bump_version(self) -> None:
        self._version_counter().v += 1

    @property
    def data(self) -> Tensor:
        """A detached alias of the same storage (changes to it are not tracked)."""
        return wrap(self._data)

    @data.setter
    def data(self, value: Tensor) -> None:
        self._data = value._data if isinstance(value, Tensor) else np.asarray(value)
        self._meta = None

    def detach(self) -> Tensor:
        """A new leaf that shares storage and version counter with this tensor."""
        out = wrap(self._data)
        out._vc = self._version_counter()
        return out

    def detach_(self) -> Tensor:
        if self._base is not None and self._base._requires_grad:
            raise RuntimeError(
                "detach_(): cannot detach a view of a tensor that requires grad in place; "
                "use t = t.detach() instead"
            )
        self.grad_fn = None
        self._requires_grad = False
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor after backward (a no-op on leaves)."""
        if self.grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("retain_grad() needs a tensor that requires grad")
            return
        if getattr(self, "_retains_grad", False):
            return
        self._retains_grad = True
        self.grad_fn._add_tensor_hook(
            self.output_nr, RetainGrad(weakref.ref(self), self.grad_fn), last=True
        )

    def register_hook(self, fn: Any) -> Any:
        """Call ``fn(grad)`` when the gradient of this tensor is computed; a non-None
        return value replaces the gradient. Returns a handle with ``.remove()``.

        Example:
            >>> import memgrad as mg
            >>> x = mg.ones(2, requires_grad=True)
            >>> h = x.register_hook(lambda g: g * 10)
            >>> (x * 1).sum().backward()
            >>> x.grad
            tensor([10., 10.])
        """
        if not self._requires_grad:
            raise RuntimeError(
                "register_hook(): cannot register a hook on a tensor that does not require "
                "grad; call t.requires_grad_() on the leaf first"
            )
        if self.grad_fn is None:
            hooks = getattr(self, "_hooks", None)
            if hooks is None:
                hooks = self._hooks = []
            hooks.append(fn)
            return RemovableHandle(hooks, fn)
        return self.grad_fn._add_tensor_hook(self.output_nr, fn)

    def register_post_accumulate_grad_hook(self, fn: Any) -> Any:
        """Call ``fn(tensor)`` after a backward has added into this leaf's ``.grad`` (once per
        backward that reaches it, after all of its uses are summed). Returns a handle with
        ``.remove()``.

        Example:
            >>> import memgrad as mg
            >>> w = mg.ones(2, requires_grad=True)
            >>> seen = []
            >>> h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.sum().item()))
            >>> (w * 2 + w).sum().backward()
            >>> seen
            [6.0]
        """
        if self.grad_fn is not None or not self._requires_grad:
            raise RuntimeError(
                "register_post_accumulate_grad_hook(): only a leaf that requires grad "
                "accumulates into .grad; register it on the leaf (a parameter), or use "
                "register_hook for the gradient of a non-leaf tensor"
            )
        hooks = getattr(self, "_post_acc_hooks", None)
        if hooks is None:
            hooks = self._post_acc_hooks = []
        hooks.append(fn)
        return RemovableHandle(hooks, fn)


def wrap(data: np.ndarray) -> Tensor:
    """A Tensor on ``data`` that is not reported to interpreters as made (NOTE
    [ Interpreters ]): an op's result, which interpreters see through ``process``, or an
    alias of storage that already has a tensor."""
    t = Tensor.__new__(Tensor)
    t._data = data
    t._requires_grad = False
    t.grad = None
    t.grad_fn = None
    t.output_nr = 0
    t._vc = None
    t._acc = None
    t._hooks = None
    t._base = t._meta = None
    return t
