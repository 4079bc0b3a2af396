"""Memory accounting: live bytes of tensor storage, peaks, per-op timelines, and reports of
what backward will need."""

import os

from memgrad.memory.heap import keep_freed_memory
from memgrad.memory.report import SavedEntry, SavedReport, saved_report
from memgrad.memory.tracker import (
    TimelineEntry,
    Trace,
    allocated_bytes,
    buffer_of,
    disable,
    enable,
    peak_bytes,
    reset_peak,
    track,
)

__all__ = [
    "keep_freed_memory",
    "saved_report",
    "SavedReport",
    "SavedEntry",
    "allocated_bytes",
    "peak_bytes",
    "reset_peak",
    "track",
    "enable",
    "disable",
    "Trace",
    "TimelineEntry",
    "buffer_of",
]

_keep = os.environ.get("MEMGRAD_KEEP_FREED_MEMORY", "1")
if _keep not in ("0", "1"):
    raise ValueError(f"MEMGRAD_KEEP_FREED_MEMORY: expected 0 (glibc's defaults) or 1 (keep "
                     f"freed memory for reuse, the default), got {_keep!r}; set it to 0 or 1, "
                     f"or unset it")
if _keep == "1":
    keep_freed_memory()  # NOTE [ Freed pages ] in memgrad/memory/heap.py
