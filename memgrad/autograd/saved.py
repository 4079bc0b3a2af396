"""Tensors saved for backward, guarded by version counters.

NOTE [ Saved tensors ]
A node saves either one of its forward inputs or its own output. An input is kept as the
Tensor object (its graph is needed for double backward). An output is kept as its array
and version counter only, and rebuilt with ``grad_fn`` set to the owning node when
unpacked: keeping the output Tensor would make a reference cycle node -> output -> node and
delay freeing until the garbage collector runs, which would break memory accounting.
Every saved tensor records the version it was saved at; unpacking one that was changed in
place since raises. With ``saved_tensors_hooks`` active the pack hook's result is stored
instead and version checks are the hooks' business, as in PyTorch.
"""

from __future__ import annotations

import weakref
from typing import Any

from memgrad import interpreters
from memgrad.autograd.grad_mode import state
from memgrad.autograd.graph import accumulator, raise_modified
from memgrad.tensor import Tensor, VersionCounter, wrap

__all__ = ["SavedTensor", "HookedSaved", "save", "saved_input", "saved_output", "unpack_input",
           "raise_modified"]

_new = object.__new__


class SavedTensor:
    """A tensor saved without hooks: an input as its Tensor, an output as its array."""

    __slots__ = ("_is_output", "_t", "_data", "_vc", "_version", "_output_nr")

    def __init__(self, t: Tensor, is_output: bool = False) -> None:
        self._is_output = is_output
        if is_output:
            vc = t._version_counter()
            self._output_nr = t.output_nr
            self._data = t._data
            self._vc = vc
            self._version = vc.v
        else:
            self._t = t
            vc = t._vc
            self._version = 0 if vc is None else vc.v

    def unpack(self, node: Any, op: str) -> Tensor:
        """The saved tensor; ``node`` is the owner (the grad_fn of a saved output)."""
        if self._is_output:
            vc = self._vc
            if vc.v != self._version:
                raise_modified(op, self._data.shape, self._data.dtype, vc.v, self._version,
                               f"output of {op}")
            t = _new(Tensor)  # wrap(self._data), inline: once per saved output in backward
            t._data = self._data
            t.grad = t._acc = t._hooks = t._base = t._meta = None
            t._vc = vc
            t.grad_fn = node
            t.output_nr = self._output_nr
            t._requires_grad = True
            return t
        t = self._t
        vc = t._vc
        if vc is not None and vc.v != self._version:
            _raise_input_modified(t, op, self._version)
        return t


def _raise_input_modified(t: Tensor, op: str, version: int) -> None:
    source = "a leaf" if t.grad_fn is None else f"output {t.output_nr} of {t.grad_fn.name()}"
    raise_modified(op, t._data.shape, t._data.dtype, t._vc.v, version, source)


def unpack_input(t: Tensor, op: str) -> Tensor:
    """An input that the dispatcher kept as it is because it had no version counter when
    saved (version 0): ``t``, unless it was changed in place since (NOTE [ Saved tensors ])."""
    vc = t._vc
    if vc is not None and vc.v:
        _raise_input_modified(t, op, 0)
    return t



def saved_input(t: Tensor) -> SavedTensor:
    """``SavedTensor(t)``, made without the call of ``__init__`` (the per-op path)."""
    s = _new(SavedTensor)
    s._is_output = False
    s._t = t
    vc = t._vc
    s._version = 0 if vc is None else vc.v
    return s


def saved_output(t: Tensor) -> SavedTensor:
    """``SavedTensor(t, True)``, made without the call of ``__init__`` (the per-op path)."""
    s = _new(SavedTensor)
    s._is_output = True
    vc = t._vc
    if vc is None:
        vc = t._vc = _new(VersionCounter)  # VersionCounter(), without the call of __init__
        vc.v = vc.gen = 0
    s._output_nr = t.output_nr
    s._data = t._data
    s._vc = vc
    s._version = vc.v
    return s


class HookedSaved(SavedTensor):
    """A tensor saved under ``saved_tensors_hooks``: what ``pack`` returned."""

    __slots__ = ("_packed", "_unpack", "_edge")

    def __init__(self, t: Tensor, is_output: bool, hooks: tuple, op: Any, index: int) -> None:
        pack, self._unpack, with_op = hooks
        self._is_output = is_output
        self._output_nr = t.output_nr
        self._packed = pack(t, op, index) if with_op else pack(t)
        # the restored data is reconnected to the original graph position (double
        # backward); only a leaf is kept, and a leaf that requires grad is kept alive by its
        # AccumulateGrad anyway
        if is_output or not t._requires_grad:
            self._edge = None
        else:
            self._edge = (t.grad_fn, t.output_nr, t if t.grad_fn is None else None)

    def unpack(self, node: Any, op: str) -> Tensor:
        t = self._unpack(self._packed)
        if not isinstance(t, Tensor):
            raise TypeError(
                f"saved_tensors_hooks: the unpack hook must return a Tensor; got {type(t).__name__}"
            )
        if self._is_output:
            out = wrap(t._data)
            out.grad_fn = node
            out.output_nr = self._output_nr
            out._requires_grad = True
            return out
        if self._edge is None:
            return t
        grad_fn, output_nr, leaf = self._edge
        if t is leaf or (t.grad_fn is grad_fn and grad_fn is not None and t.output_nr == output_nr):
            return t
        out = wrap(t._data)
        out._requires_grad = True
        if leaf is None:
            out.grad_fn = grad_fn
            out.output_nr = output_nr
        else:
            out._acc = weakref.ref(accumulator(leaf))
        return out


def save(t: Tensor, is_output: bool = False, op: Any = None, index: int = -1) -> SavedTensor:
    """Save ``t`` for backward, through the innermost saved-tensor hooks if any; ``op`` is
    the primitive that saves it (None for a custom Function) and ``index`` which of its
    inputs ``t`` is (-1 for its output). Interpreters hear of it (NOTE [ Interpreters ])."""
    hooks = state.saved_hooks
    saved = HookedSaved(t, is_output, hooks[-1], op, index) if hooks else SavedTensor(t, is_output)
    if interpreters.active:
        interpreters.saved(t, op, getattr(saved, "_packed", None))
    return saved
