"""Grad mode: whether ops record a graph. Thread-local, as in PyTorch.

The state lives in one ``threading.local`` object that the rest of autograd reads on the
per-op path, so reading it costs one attribute lookup.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    """Per-thread autograd state; class attributes are each new thread's defaults."""

    grad_enabled = True
    anomaly = False
    # stack of (pack, unpack, with_op) from graph.saved_tensors_hooks; innermost last
    saved_hooks: tuple = ()
    # neither anomaly mode nor saved-tensor hooks: the dispatcher's one check for both
    plain = True
    # the message of an active graph.disable_saved_tensors_hooks, else None
    hooks_disabled: str | None = None
    refreshing = False  # graph.refresh_view is replaying a view's ops (no checkpoint op)


state = _State()


def is_grad_enabled() -> bool:
    """Return whether ops in this thread record a graph.

    Example:
        >>> import memgrad as mg
        >>> with mg.no_grad():
        ...     mg.is_grad_enabled()
        False
    """
    return state.grad_enabled


class _mode:
    """A grad-mode switch: a context manager that restores the previous mode on exit,
    and a decorator that runs the whole function in the mode."""

    _enabled: bool

    def __enter__(self) -> None:
        self._prev = state.grad_enabled
        state.grad_enabled = self._enabled

    def __exit__(self, *exc: object) -> None:
        state.grad_enabled = self._prev

    def __call__(self, fn: F) -> F:
        enabled = self._enabled

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prev = state.grad_enabled
            state.grad_enabled = enabled
            try:
                return fn(*args, **kwargs)
            finally:
                state.grad_enabled = prev

        return wrapper  # type: ignore[return-value]


class no_grad(_mode):
    """Disable graph recording: results have ``requires_grad=False``.

    Example:
        >>> import memgrad as mg
        >>> x = mg.ones(2, requires_grad=True)
        >>> with mg.no_grad():
        ...     y = x * 2
        >>> y.requires_grad
        False
    """

    _enabled = False


class enable_grad(_mode):
    """Enable graph recording, e.g. inside a ``no_grad`` block.

    Example:
        >>> import memgrad as mg
        >>> with mg.no_grad(), mg.enable_grad():
        ...     mg.is_grad_enabled()
        True
    """

    _enabled = True


class set_grad_enabled(_mode):
    """Set grad mode to ``mode``: at once when called, and restored on exit when used as a
    context manager.

    Example:
        >>> import memgrad as mg
        >>> _ = mg.set_grad_enabled(False)
        >>> mg.is_grad_enabled()
        False
        >>> _ = mg.set_grad_enabled(True)
    """

    def __init__(self, mode: bool) -> None:
        self._enabled = bool(mode)
        self._prev = state.grad_enabled
        state.grad_enabled = self._enabled

    def __enter__(self) -> None:
        pass

    def __call__(self, fn: F) -> F:
        state.grad_enabled = self._prev  # used as a decorator: the call above must not stick
        return super().__call__(fn)


class inference_mode(_mode):
    """PyTorch's inference mode, which in memgrad is ``no_grad`` (a tensor made in it is an
    ordinary tensor that does not require grad); ``inference_mode(False)`` leaves the mode
    as it is. A context manager and a decorator, with or without parentheses.

    Example:
        >>> import memgrad as mg
        >>> with mg.inference_mode():
        ...     mg.is_grad_enabled()
        False
    """

    def __new__(cls, mode: Any = True) -> Any:
        self = super().__new__(cls)
        if callable(mode):  # @inference_mode without parentheses
            self.__init__()
            return self(mode)
        return self

    def __init__(self, mode: Any = True) -> None:
        self._on = bool(mode)

    def __enter__(self) -> None:
        self._prev = state.grad_enabled
        if self._on:
            state.grad_enabled = False

    def __call__(self, fn: F) -> F:
        if not self._on:
            return fn
        self._enabled = False
        return super().__call__(fn)
