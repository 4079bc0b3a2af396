"""Anomaly mode: find the forward op behind an error or a NaN in backward.

With it on, every node records where its forward op was called; when a node's backward
raises, the error gets that place as a note, and a NaN in a node's output gradients raises
an error naming the node and that place. It costs a stack walk per op: use it to debug.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import _mode, state

__all__ = ["set_detect_anomaly", "detect_anomaly", "is_anomaly_enabled"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def is_anomaly_enabled() -> bool:
    return state.anomaly


class set_detect_anomaly(_mode):
    """Turn anomaly mode on or off: at once, and restored on exit when used as a context
    manager.

    Example:
        >>> import memgrad as mg
        >>> with mg.autograd.set_detect_anomaly(True):
        ...     mg.autograd.anomaly.is_anomaly_enabled()
        True
    """

    def __init__(self, mode: bool) -> None:
        self._enabled = bool(mode)
        self._prev = state.anomaly
        _set(self._enabled)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        _set(self._prev)

    def __call__(self, fn: Any) -> Any:
        _set(self._prev)
        enabled = self._enabled

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_detect_anomaly(enabled):
                return fn(*args, **kwargs)

        return wrapper


class detect_anomaly(set_detect_anomaly):
    """Context manager and decorator that turns anomaly mode on.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([0.0], requires_grad=True)
        >>> with mg.autograd.detect_anomaly():
        ...     y = x.sqrt() * 0
        ...     try:
        ...         y.sum().backward()
        ...     except RuntimeError as e:
        ...         print(str(e).splitlines()[0])
        Function 'SqrtBackward' returned nan values in its 0th output.
    """

    def __init__(self) -> None:
        super().__init__(True)


def _set(enabled: bool) -> None:
    state.anomaly = enabled
    state.plain = not enabled and not state.saved_hooks


def forward_trace() -> str:
    """The user's call stack, without memgrad's own frames."""
    frames = [f for f in traceback.extract_stack()[:-1] if not f.filename.startswith(_HERE)]
    return "".join(traceback.format_list(frames[-8:]))


def run_checked(node: Any, grads: tuple) -> tuple:
    """Run ``node.apply`` and blame its forward op for an error or a NaN."""
    where = node._trace or "  (created before anomaly mode was on: no trace)\n"
    try:
        out = node.apply(grads)
    except Exception as e:
        e.add_note(
            f"The error was raised in {node.name()}, whose forward op was called at:\n{where}"
        )
        raise
    for i, g in enumerate(out):
        if g is not None and np.isnan(g._data).any():
            raise RuntimeError(
                f"Function '{node.name()}' returned nan values in its {i}th output.\n"
                f"The forward op was called at:\n{where}"
            )
    return out
