"""The interpreter stack: the one place where the upper layers see and change op calls.

NOTE [ Interpreters ]
Whatever wants to see or change primitive calls (checkpointing, the planner's profile, the
jit tracer, memory accounting, the saved-tensor report) is an :class:`Interpreter` pushed on
this thread's stack by a context manager. The dispatcher (``ops/registry.py``) hands each
call to the innermost interpreter as ``process(prim, args, params, call_next)``;
``call_next`` the next one out, past the outermost one the primitive. With no interpreter
pushed in any thread the dispatcher pays one check (``active``).

Besides op calls, an interpreter hears of five things, through the functions below that
the lower layers call (each a no-op for an interpreter that does not override it):

- ``tensor_made(t)``: a Tensor on new storage: an op's result (as soon as it exists, before
  its node is recorded), a factory's, a gradient the engine seeds. Views and aliases of
  existing storage (``detach``, a view op's result) are not reported.
- ``saved(t, op, packed)``: a value saved for backward, with what the innermost saved-tensor
  hooks made of it (``packed.recomputed`` is True for a value a checkpoint will rebuild).
- ``value_read(t, what)``: Python read a tensor's value (``item()``, ``bool()``); ``written``:
  an in-place op wrote its target with no gradient involved, so ``process`` did not see it.
- ``region(function)``: a checkpoint region runs ``function`` (a context manager).

``phase`` names what an interpreter's ops are part of ("recompute" for a checkpoint's
recomputation); :func:`phase` gives the innermost one. Nothing else is shared: interpreters
keep their state on themselves.

This module imports nothing from memgrad, so that every layer may use it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "Interpreter",
    "push",
    "current",
    "phase",
    "region",
    "tensor_made",
    "watching_made",
    "saved",
    "value_read",
    "active",
]


class Interpreter:
    """Base class of the interpreters; each method's default passes the call on or ignores
    the event.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.interpreters import Interpreter, push
        >>> class Count(Interpreter):
        ...     n = 0
        ...     def process(self, prim, args, params, call_next):
        ...         self.n += 1
        ...         return call_next(prim, args, params)
        >>> c = Count()
        >>> with push(c):
        ...     y = (mg.ones(3) * 2).exp()
        >>> c.n
        2
    """

    phase: str | None = None

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        return call_next(prim, args, params)

    def tensor_made(self, t: Any) -> None:
        pass

    def saved(self, t: Any, op: Any, packed: Any) -> None:
        pass

    def value_read(self, t: Any, what: str) -> None:
        pass

    def written(self, prim: Any, args: tuple, params: dict) -> None:
        """An in-place op ``prim`` (its in-place variant) on ``args`` wrote its target
        directly, with no gradient involved, so ``process`` did not see it."""

    def region(self, function: Callable) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class _Local(threading.local):
    stack: tuple[Interpreter, ...] = ()
    made: tuple[Interpreter, ...] = ()  # those of the stack that override tensor_made


_local = _Local()
_lock = threading.Lock()
# interpreters pushed in all threads: the dispatcher's one check
active = 0


@contextlib.contextmanager
def push(interpreter: Interpreter) -> Iterator[Interpreter]:
    """Push ``interpreter`` on this thread's stack for the block (innermost while it is on
    top)."""
    global active
    _set(_local.stack + (interpreter,))
    with _lock:
        active += 1
    try:
        yield interpreter
    finally:
        # usually the top; an interpreter pushed by enable() may leave out of order
        _set(tuple(i for i in _local.stack if i is not interpreter))
        with _lock:
            active -= 1


def _set(stack: tuple[Interpreter, ...]) -> None:
    _local.stack = stack
    _local.made = tuple(i for i in stack if type(i).tensor_made is not Interpreter.tensor_made)


def watching_made() -> bool:
    """Whether an interpreter of this thread wants ``tensor_made`` (else the dispatcher
    skips finding out whether an op's result is on new storage)."""
    return bool(_local.made)


def current() -> tuple[Interpreter, ...]:
    """This thread's interpreters, outermost first."""
    return _local.stack


def phase() -> str | None:
    """The ``phase`` of the innermost interpreter that names one."""
    for interpreter in reversed(_local.stack):
        if interpreter.phase is not None:
            return interpreter.phase
    return None


@contextlib.contextmanager
def region(function: Callable) -> Iterator[None]:
    """Tell this thread's interpreters that a checkpoint region runs ``function``."""
    with contextlib.ExitStack() as stack:
        for interpreter in _local.stack:
            stack.enter_context(interpreter.region(function))
        yield


def tensor_made(t: Any) -> None:
    for interpreter in _local.made:
        interpreter.tensor_made(t)


def saved(t: Any, op: Any, packed: Any) -> None:
    for interpreter in _local.stack:
        interpreter.saved(t, op, packed)


def value_read(t: Any, what: str) -> None:
    for interpreter in _local.stack:
        interpreter.value_read(t, what)


def written(prim: Any, args: tuple, params: dict) -> None:
    for interpreter in _local.stack:
        interpreter.written(prim, args, params)
