"""Exact accounting of the tensor storage memgrad holds.

NOTE [ Memory accounting ]
The unit is the buffer: the NumPy array that owns the memory behind a tensor. A tensor and
all its views (reshape, transpose, expand, basic indexing, detach) share one buffer, which
counts once, from the moment a tensor on it is made until the buffer is freed (weakref
finalizer on the owning array) - which happens when the last tensor, view or saved-for-
backward reference to it goes. Accounting counts the buffers made while it is on: it is an
interpreter (NOTE [ Interpreters ]) pushed in the threads that track, which registers every
tensor made on new storage: an op's result that is not a view of its inputs (reported by the
dispatcher as soon as it exists), a factory's, a gradient the engine seeds. A buffer made
before accounting was turned on is not counted, nor is its freeing: the block's figures are
what it made and still holds, so ``start_bytes`` of an outermost block is 0 and nested blocks
start from the count then; ``allocated_bytes()`` with accounting off scans for every tensor
memgrad holds.
With accounting off, the per-op path pays the dispatcher's one check.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from memgrad import interpreters
from memgrad.autograd.engine import current_backward
from memgrad.autograd.saved import SavedTensor
from memgrad.interpreters import Interpreter
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


class TimelineEntry(NamedTuple):
    """Bytes alive right after one primitive ran (a tuple: ``op``, ``phase``, ``bytes``)."""

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


class _BufferRef(weakref.ref):
    """A weak reference to a counted buffer, with the buffer's id and bytes."""

    __slots__ = ("key", "nbytes")
    key: int
    nbytes: int


class _Accounting:
    """The buffers counted, for every thread; one per process."""

    def __init__(self) -> None:
        # reentrant: an allocation inside ``register`` can run the cyclic collector, whose
        # frees call ``release`` on this thread while the lock is held
        self.lock = threading.RLock()
        self.users = 0
        # id of a buffer -> the weak reference that releases it (with its id and bytes)
        self.live: dict[int, _BufferRef] = {}
        self.allocated = 0
        self.peak = 0
        self.traces: list[Trace] = []
        # a Ctrl-C that landed in ``release``, to raise in the main thread's next op
        self.interrupted = False

    def register(self, data: np.ndarray) -> None:
        base = buffer_of(data)
        key = id(base)
        if key in self.live:
            return
        n = base.nbytes
        with self.lock:
            if key in self.live:
                return
            # the weak reference calls release when the buffer is freed
            ref = _BufferRef(base, self.release)
            ref.key, ref.nbytes = key, n
            self.live[key] = ref
            self.allocated += n
            if self.allocated > self.peak:
                self.peak = self.allocated
            for t in self.traces:
                if self.allocated > t.peak_bytes:
                    t.peak_bytes = self.allocated
                    t.peak_index = len(t.timeline)

    def release(self, ref: _BufferRef) -> None:
        try:
            with self.lock:
                if self.live.get(ref.key) is ref:
                    del self.live[ref.key]
                    self.allocated -= ref.nbytes
        except KeyboardInterrupt:
            # a weak reference's callback cannot raise (Python prints and drops the error),
            # nor send the signal again (the main thread would take it inside this handler,
            # and drop it the same way): the main thread's next op raises it
            self.interrupted = True

    def raise_interrupt(self) -> None:
        """Raise the Ctrl-C that landed in ``release``, in the main thread (once)."""
        if self.interrupted and threading.current_thread() is threading.main_thread():
            self.interrupted = False
            raise KeyboardInterrupt

    def timeline(self, op: str) -> None:
        if not self.traces:
            return
        if interpreters.phase() == "recompute":
            phase = "recompute"
        elif current_backward() is not None:
            phase = "backward"
        else:
            phase = "forward"
        entry = TimelineEntry(op, phase, self.allocated)
        for t in self.traces:
            t.timeline.append(entry)


class _Accountant(Interpreter):
    """Accounting in one thread: registers what ops and factories make there."""

    def __init__(self, accounting: _Accounting) -> None:
        self.accounting = accounting

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        if self.accounting.interrupted:
            self.accounting.raise_interrupt()
        try:
            return call_next(prim, args, params)
        finally:  # also when the op was interrupted (a recompute's early stop)
            self.accounting.timeline(prim.name)

    def tensor_made(self, t: Tensor) -> None:
        self.accounting.register(t._data)


class _Threads(threading.local):
    """This thread's accountant and how many enable() calls it has open."""

    def __init__(self) -> None:
        self.depth = 0
        self.pushed: contextlib.AbstractContextManager | None = None


_accounting = _Accounting()
_threads = _Threads()


def enable() -> None:
    """Turn accounting on in this thread (nested calls count; each needs a ``disable``).

    Example:
        >>> import memgrad as mg
        >>> mg.memory.enable()
        >>> x = mg.zeros(100)
        >>> mg.memory.allocated_bytes()
        400
        >>> mg.memory.disable()
    """
    with _accounting.lock:
        _accounting.users += 1
        if _accounting.users == 1:
            _accounting.peak = _accounting.allocated
    _threads.depth += 1
    if _threads.depth == 1:
        _threads.pushed = interpreters.push(_Accountant(_accounting))
        _threads.pushed.__enter__()


def disable() -> None:
    """Turn accounting off again (in this thread)."""
    if _threads.depth == 0:
        raise RuntimeError("memgrad.memory.disable(): accounting is not enabled in this thread")
    _threads.depth -= 1
    if _threads.depth == 0 and _threads.pushed is not None:
        _threads.pushed.__exit__(None, None, None)
        _threads.pushed = None
    with _accounting.lock:
        _accounting.users -= 1
        last = _accounting.users == 0
    if last:
        _accounting.live.clear()
        _accounting.allocated = _accounting.peak = 0
    _accounting.raise_interrupt()


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
        >>> x = mg.ones(256, 256, requires_grad=True)   # made before the block: not counted
        >>> with mg.memory.track() as t:
        ...     y = (x * 2).sum()                          # one 256 KiB temporary
        >>> t.peak_above_start >= 256 * 256 * 4
        True
    """
    enable()
    trace = Trace(start_bytes=_accounting.allocated, peak_bytes=_accounting.allocated)
    _accounting.traces.append(trace)
    try:
        yield trace
    finally:
        trace.end_bytes = _accounting.allocated
        _accounting.traces.remove(trace)
        disable()
