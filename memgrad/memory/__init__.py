"""Memory accounting: live bytes of tensor storage, peaks, and per-op timelines."""

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
