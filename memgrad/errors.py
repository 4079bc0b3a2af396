"""The exceptions memgrad raises.

Every error names the API that raised it, what it expected, what it got, and the fix.
Where PyTorch raises a built-in type, the memgrad error also derives from it, so
``except RuntimeError`` keeps working for code ported from PyTorch.
"""

__all__ = [
    "MemgradError",
    "ShapeError",
    "CheckpointError",
    "GradcheckError",
    "PlanError",
    "TraceError",
]


class MemgradError(Exception):
    """Base class of every error memgrad defines."""


class ShapeError(MemgradError, RuntimeError):
    """An op got tensors whose shapes do not fit together."""


class CheckpointError(MemgradError, RuntimeError):
    """A checkpointed region recomputed something other than what it first computed."""


class GradcheckError(MemgradError, RuntimeError):
    """Analytic and numerical gradients disagree."""


class PlanError(MemgradError, ValueError):
    """No segmentation fits the requested memory budget."""


class TraceError(MemgradError, RuntimeError):
    """A function could not be traced, or a trace was run on inputs it does not fit."""
