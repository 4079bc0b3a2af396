"""Exact accounting of the tensor storage memgrad holds.

NOTE [ Memory accounting ]
The unit is the buffer: the NumPy array that owns the memory behind a tensor. A tensor and
all its views (reshape, transpose, expand, basic indexing, detach) share one buffer, which
counts once, from the moment a tensor on it is made until the buffer is freed (weakref
finalizer on the owning array) - which happens when the last tensor, view or saved-for-
backward reference to it goes. Accounting is on while a ``track()`` block (or
``enable()``) is active: turning it on registers every buffer alive at that moment (one scan
of the garbage collector's objects), then wraps ``Tensor.__init__``; turning it off restores
it, so the per-op path pays nothing while no one is tracking.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import state
from memgrad.autograd.saved import SavedTensor
from memgrad.ops.registry import op_hooks
from memgrad.tensor import Tensor

__all__ = [
    "allocated_bytes",
    "peak_bytes",
    "reset_peak",
    "track",
    "enable",
    "disable",
    "TimelineEntry",
    "Trace",
    "buffer_of",
]


def buffer_of(a: np.ndarray) -> np.ndarray:
    """The array that owns ``a``'s memory (``a`` itself unless it is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


@dataclass
class TimelineEntry:
    """Bytes alive right after one primitive ran."""

    op: str
    phase: str  # "forward", "recompute" or "backward"
    bytes: int


@dataclass
class Trace:
    """What ``track()`` measured: ``start_bytes`` when the block began, ``peak_bytes`` the
    most alive at any moment inside it, ``end_bytes`` when it ended, ``timeline`` (bytes
    alive after each op) and ``peak_index`` (the timeline entry of the op that was running
    when the peak was reached)."""

    start_bytes: int = 0
    peak_bytes: int = 0
    end_bytes: int = 0
    timeline: list[TimelineEntry] = field(default_factory=list)
    # index into timeline of the op that was running when the peak was reached
    peak_index: int = -1

    @property
    def peak_above_start(self) -> int:
        """``peak_bytes - start_bytes``: what the block itself added at its worst."""
        return self.peak_bytes - self.start_bytes


class _Accounting:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.live: dict[int, int] = {}  # id of a buffer -> its bytes
        self.refs: dict[int, tuple] = {}  # id of its weak reference -> (ref, id, bytes)
        self.allocated = 0
        self.peak = 0
        self.traces: list[Trace] = []
        self.original_init = Tensor.__init__

    def register(self, data: np.ndarray) -> None:
        base = data
        while isinstance(base.base, np.ndarray):
            base = base.base
        key = id(base)
        if key in self.live:
            return
        n = base.nbytes
        with self.lock:
            if key in self.live:
                return
            self.live[key] = n
            # the weak reference calls release when the buffer is freed
            ref = weakref.ref(base, self.release)
            self.refs[id(ref)] = (ref, key, n)
            self.allocated += n
            if self.allocated > self.peak:
                self.peak = self.allocated
            for t in self.traces:
                if self.allocated > t.peak_bytes:
                    t.peak_bytes = self.allocated
                    t.peak_index = len(t.timeline)

    def release(self, ref: weakref.ref) -> None:
        with self.lock:
            entry = self.refs.pop(id(ref), None)
            if entry is not None and self.live.pop(entry[1], None) is not None:
                self.allocated -= entry[2]

    def observe(self, prim: Any) -> None:
        if not self.traces:
            return
        if state.recomputing:
            phase = "recompute"
        elif state.engine_call is not None:
            phase = "backward"
        else:
            phase = "forward"
        entry = TimelineEntry(prim.name, phase, self.allocated)
        for t in self.traces:
            t.timeline.append(entry)

    def enable(self) -> None:
        with self.lock:
            self.users += 1
            first = self.users == 1
        if not first:
            return
        accounting = self
        original = self.original_init

        def tracking_init(t: Tensor, data: Any, requires_grad: bool = False) -> None:
            original(t, data, requires_grad)
            register(t._data)

        register = accounting.register

        Tensor.__init__ = tracking_init
        op_hooks.observer = self.observe
        op_hooks.installed += 1
        # collect unreachable cycles first, so that their freeing later does not show as
        # a drop inside the tracked block
        gc.collect()
        for obj in gc.get_objects():
            if isinstance(obj, Tensor):
                self.register(obj._data)
            elif isinstance(obj, SavedTensor) and getattr(obj, "_is_output", False):
                data = getattr(obj, "_data", None)
                if isinstance(data, np.ndarray):
                    self.register(data)
        self.peak = self.allocated

    def disable(self) -> None:
        with self.lock:
            if self.users == 0:
                raise RuntimeError("memgrad.memory.disable(): accounting is not enabled")
            self.users -= 1
            last = self.users == 0
        if last:
            Tensor.__init__ = self.original_init
            op_hooks.observer = None
            op_hooks.installed -= 1
            self.live.clear()
            self.refs.clear()
            self.allocated = self.peak = 0


_accounting = _Accounting()


def enable() -> None:
    """Turn accounting on (nested calls count; each needs a ``disable``)."""
    _accounting.enable()


def disable() -> None:
    """Turn accounting off again."""
    _accounting.disable()


def _scan_bytes() -> int:
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        data = None
        if isinstance(obj, Tensor):
            data = obj._data
        elif isinstance(obj, SavedTensor) and getattr(obj, "_is_output", False):
            data = getattr(obj, "_data", None)
        if isinstance(data, np.ndarray):
            base = buffer_of(data)
            seen[id(base)] = base.nbytes
    return sum(seen.values())


def allocated_bytes() -> int:
    """Bytes of live tensor storage memgrad holds now (each buffer once, however many
    tensors and views share it). Exact; without accounting on it scans all objects, which is
    slow for many tensors.

    Example:
        >>> import memgrad as mg
        >>> with mg.memory.track():
        ...     x = mg.zeros(1000)  # float32: 4000 bytes
        ...     mg.memory.allocated_bytes() >= 4000
        True
    """
    if _accounting.users:
        return _accounting.allocated
    return _scan_bytes()


def peak_bytes() -> int:
    """The most bytes alive since accounting was turned on or ``reset_peak()`` was called."""
    if not _accounting.users:
        raise RuntimeError(
            "memgrad.memory.peak_bytes(): accounting is off, so no peak was recorded; measure "
            "inside `with mg.memory.track():` (or after mg.memory.enable())"
        )
    return _accounting.peak


def reset_peak() -> None:
    """Start a new peak from the bytes alive now."""
    _accounting.peak = _accounting.allocated


@contextlib.contextmanager
def track() -> Iterator[Trace]:
    """Account every tensor buffer inside the block. The result has ``start_bytes``,
    ``peak_bytes``, ``end_bytes``, ``peak_above_start`` and ``timeline``.

    Example:
        >>> import memgrad as mg
        >>> x = mg.ones(256, 256, requires_grad=True)   # made before: counted from the start
        >>> with mg.memory.track() as t:
        ...     y = (x * 2).sum()                          # one 256 KiB temporary
        >>> t.peak_above_start >= 256 * 256 * 4
        True
    """
    _accounting.enable()
    trace = Trace(start_bytes=_accounting.allocated, peak_bytes=_accounting.allocated)
    _accounting.traces.append(trace)
    try:
        yield trace
    finally:
        trace.end_bytes = _accounting.allocated
        _accounting.traces.remove(trace)
        _accounting.disable()
