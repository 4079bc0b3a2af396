"""Memory accounting: live bytes of tensor storage, peaks, per-op timelines, and reports of
what backward will need."""

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
