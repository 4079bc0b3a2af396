"""``saved_report``: every tensor a backward will need, and where it came from."""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from memgrad import interpreters
from memgrad.autograd.grad_mode import enable_grad
from memgrad.interpreters import Interpreter
from memgrad.memory.tracker import buffer_of
from memgrad.records import SavedEntry
from memgrad.tensor import Tensor

__all__ = ["SavedEntry", "SavedReport", "saved_report"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class SavedReport:
    """What a backward will need: ``entries`` in save order, with totals."""

    entries: list[SavedEntry]

    @property
    def kept_bytes(self) -> int:
        """Bytes held between forward and backward (each buffer once)."""
        return sum({e.buffer: e.bytes for e in self.entries if e.kept}.values())

    @property
    def recomputed_bytes(self) -> int:
        """Bytes that checkpoint regions rebuild in backward instead of keeping."""
        return sum({e.buffer: e.bytes for e in self.entries if not e.kept}.values())

    def by_region(self) -> dict[str | None, dict[str, int]]:
        """Per region (None: outside any checkpoint): kept and recomputed bytes."""
        totals: dict[str | None, dict[str, int]] = {}
        seen: set[tuple[str | None, int, bool]] = set()
        for e in self.entries:
            row = totals.setdefault(e.region, {"kept": 0, "recomputed": 0})
            key = (e.region, e.buffer, e.kept)
            if key not in seen:
                seen.add(key)
                row["kept" if e.kept else "recomputed"] += e.bytes
        return totals

    def __str__(self) -> str:
        lines = [f"{'op':<16} {'shape':<20} {'dtype':<8} {'bytes':>12}  {'held':<10} source"]
        for e in self.entries:
            held = "kept" if e.kept else "recomputed"
            lines.append(
                f"{e.op:<16} {str(e.shape):<20} {e.dtype:<8} {e.bytes:>12,}  {held:<10} "
                f"{e.source}" + (f"  [{e.region}]" if e.region else "")
            )
        for region, row in self.by_region().items():
            name = region or "outside checkpoints"
            lines.append(
                f"total {name}: kept {row['kept']:,} B, recomputed {row['recomputed']:,} B"
            )
        lines.append(f"total kept from forward to backward: {self.kept_bytes:,} B")
        return "\n".join(lines)


class _Recorder(Interpreter):
    """Hears of every value saved for backward in the run (NOTE [ Interpreters ])."""

    def __init__(self) -> None:
        self.entries: list[SavedEntry] = []
        self.regions: list[str] = []
        self.count = 0

    @contextlib.contextmanager
    def region(self, function: Callable) -> Iterator[None]:
        self.count += 1
        name = getattr(function, "__qualname__", None) or type(function).__name__
        self.regions.append(f"checkpoint {self.count}: {name}")
        try:
            yield
        finally:
            self.regions.pop()

    def saved(self, t: Tensor, op: Any, packed: Any) -> None:
        kept = not getattr(packed, "recomputed", False)
        data = t.numpy()
        self.entries.append(
            SavedEntry(
                tuple(data.shape),
                str(data.dtype),
                buffer_of(data).nbytes,
                getattr(op, "name", None) or "Function",
                _user_line(),
                self.regions[-1] if self.regions else None,
                kept,
                id(buffer_of(data)),
            )
        )



def _user_line() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(_PACKAGE):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def saved_report(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SavedReport:
    """Run ``fn(*args, **kwargs)`` in grad mode and report every tensor its backward will
    need: shape, dtype, bytes, the op that saved it, the line of user code that called the
    op, and whether it is kept until backward or recomputed by a checkpoint region. ``fn``
    may also be a traced ``memgrad.jit.Graph`` (anything with a ``saved_entries()`` method):
    the report then comes from static analysis of the graph, without running it (the source
    is the binding's text).

    Example:
        >>> import memgrad as mg
        >>> w = mg.randn(8, 8, requires_grad=True)
        >>> report = mg.memory.saved_report(lambda x: (x @ w).tanh().sum(), mg.randn(4, 8))
        >>> [e.op for e in report.entries]
        ['matmul', 'tanh']
    """
    static = getattr(fn, "saved_entries", None)
    if callable(static):
        return SavedReport(static())
    recorder = _Recorder()
    with enable_grad(), interpreters.push(recorder):
        fn(*args, **kwargs)
    return SavedReport(recorder.entries)
