"""Measuring one training step (forward, loss, backward) of a chain of stages, plainly or
checkpointed: its peak bytes (``mg.memory.track``), its time, and its gradients.

Example:
    >>> from memgrad.models import mlp
    >>> model, x, loss_fn = mlp(depth=4, width=32, batch=8)
    >>> plain = measure_step(model, x, loss_fn, None)
    >>> halves = measure_step(model, x, loss_fn, 2)
    >>> compare_grads(plain.grads, halves.grads)
    0.0
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import memgrad as mg
from memgrad import nn
from memgrad.checkpoint import Plan, SegmentPlan, checkpoint_sequential
from memgrad.memory import TimelineEntry

__all__ = [
    "StepResult", "accounting", "run_step",
    "clear_grads", "measure_step", "time_step", "compare_grads",
]

Segments = int | SegmentPlan | Plan | None


@dataclass
class StepResult:
    """One measured step: ``peak`` bytes above the step's starting level, ``seconds``, the
    loss, the parameter gradients by name, and the tracker's ``timeline`` (absolute bytes,
    from ``start_bytes``)."""

    peak: int
    seconds: float
    loss: float
    grads: dict[str, np.ndarray]
    timeline: list[TimelineEntry]
    start_bytes: int


@contextlib.contextmanager
def accounting() -> Iterator[None]:
    """Keep memory accounting on for the block, so that each ``mg.memory.track()`` inside it
    starts at once: turning accounting on scans every live Python object for tensors, which
    costs about as much as a small model's training step.

    Example:
        >>> with accounting():
        ...     with mg.memory.track() as t:
        ...         x = mg.zeros(10)
        >>> t.peak_above_start
        40
    """
    mg.memory.enable()
    try:
        yield
    finally:
        mg.memory.disable()


def run_step(
    model: nn.Sequential, x: mg.Tensor, loss_fn: Callable[[mg.Tensor], mg.Tensor],
    segments: Segments,
) -> float:
    """Forward, loss and backward once, leaving the gradients in ``.grad``; ``segments`` is
    ``None`` for the plain model, a segment count or a ``SegmentPlan`` for
    ``checkpoint_sequential``, or a graph ``Plan`` (applied to the model). Returns the
    loss.

    Example:
        >>> from memgrad.models import mlp
        >>> model, x, loss_fn = mlp(depth=2, width=16, batch=4)
        >>> run_step(model, x, loss_fn, 2) > 0
        True
    """
    if isinstance(segments, Plan):
        with segments.apply(model):
            out = model(x)
    else:
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
    loss = loss_fn(out)
    del out  # the graph keeps what backward needs; nothing else should outlive the forward
    loss.backward()
    return loss.item()


def clear_grads(model: nn.Sequential, in_place: bool) -> None:
    """Before a step: gradients set to None (backward allocates them), or, ``in_place``,
    zeroed where they exist (they are allocated by a first step and then reused)."""
    model.zero_grad(set_to_none=not in_place)


def measure_step(
    model: nn.Sequential, x: mg.Tensor, loss_fn: Callable[[mg.Tensor], mg.Tensor],
    segments: Segments, in_place: bool = False,
) -> StepResult:
    """Run one step from cleared gradients under ``mg.memory.track()``, and keep a copy of
    the gradients it made. The time includes the tracker's cost; use ``time_step`` for a
    clean time.

    Example:
        >>> from memgrad.models import mlp
        >>> model, x, loss_fn = mlp(depth=2, width=16, batch=4)
        >>> measure_step(model, x, loss_fn, None).peak > 0
        True
    """
    clear_grads(model, in_place)
    with mg.memory.track() as trace:
        start = time.perf_counter()
        loss = run_step(model, x, loss_fn, segments)
        seconds = time.perf_counter() - start
    grads = {
        name: p.grad.numpy().copy()
        for name, p in model.named_parameters()
        if p.grad is not None
    }
    clear_grads(model, in_place)
    return StepResult(
        trace.peak_above_start, seconds, loss, grads, trace.timeline, trace.start_bytes
    )


def time_step(
    model: nn.Sequential, x: mg.Tensor, loss_fn: Callable[[mg.Tensor], mg.Tensor],
    segments: Segments, in_place: bool = False,
) -> float:
    """The time of one untracked step from cleared gradients, in seconds (take the best of
    several, interleaved with the configurations it is compared with).

    Example:
        >>> from memgrad.models import mlp
        >>> model, x, loss_fn = mlp(depth=2, width=16, batch=4)
        >>> time_step(model, x, loss_fn, 1) > 0
        True
    """
    clear_grads(model, in_place)
    start = time.perf_counter()
    run_step(model, x, loss_fn, segments)
    seconds = time.perf_counter() - start
    clear_grads(model, in_place)
    return seconds


def compare_grads(reference: Mapping[str, Any], other: Mapping[str, Any]) -> float:
    """The largest absolute difference between two runs' gradients: 0.0 when every
    parameter's gradient is bitwise equal, ``inf`` when a parameter has a gradient in one
    run only or shapes differ.

    Example:
        >>> compare_grads({"w": np.ones(2)}, {"w": np.array([1.0, 1.5])})
        0.5
    """
    if reference.keys() != other.keys():
        return float("inf")
    worst = 0.0
    for name, a in reference.items():
        b = other[name]
        if a.shape != b.shape:
            return float("inf")
        if not np.array_equal(a, b, equal_nan=True):
            worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))))
    return worst
