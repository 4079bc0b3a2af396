"""The planner: choose where to cut a chain of layers so that a training step fits a memory
budget with the least recomputation.

NOTE [ Peak model ]
Profiling runs each stage once in grad mode and records, per stage i: ``kept[i]``, the bytes
its graph keeps alive for backward (its output included); ``out[i]``, its output's bytes;
``grads[i]``, the bytes of the gradients backward will allocate for its parameters (none for
a parameter whose ``.grad`` exists: it is accumulated into in place); and ``seconds[i]``,
its forward time. For segments ``[s, e)`` of which all but the last are checkpointed, the
bytes alive above the step's starting level are predicted at these moments:
- the backward of each segment, from its start (everything it keeps is alive: stored by
  the forward for the last segment, recomputed for the others) to its end (its
  activations freed, its parameters' gradients made): the boundaries before it (its own
  input included; for the last segment, all of them), the most its stages keep plus the
  parameter gradients made by then, and a transient of TRANSIENT_OUTPUTS times its
  largest output (the gradient coming in, the one being made, and one more where two
  gradients meet and are summed) plus its largest parameter gradient that is made and then
  added into an existing ``.grad``.
The predicted peak is the largest of these. The extra time is the forward time of the
checkpointed segments (each recomputed once). ``plan`` minimises the extra time subject to
the predicted peak fitting the budget, or, without a budget, minimises the peak (then the
time), by dynamic programming over (cut position, bytes of boundaries so far): the cost of
what follows a cut depends only on those two, so the search is exact.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memgrad.autograd.grad_mode import enable_grad
from memgrad.autograd.graph import AccumulateGrad, sequence_mark
from memgrad.errors import PlanError
from memgrad.memory import buffer_of, track
from memgrad.records import StageProfile, gradient_bytes
from memgrad.sizes import SizeError, parse_size
from memgrad.tensor import Tensor

__all__ = [
    "StageProfile",
    "SegmentPlan",
    "profile",
    "plan",
    "plan_segments",
    "plan_from_profile",
    "predict",
]


# gradient buffers of a stage's output size alive at once in backward (NOTE [ Peak model ])
TRANSIENT_OUTPUTS = 3


@dataclass
class SegmentPlan:
    """A segmentation of a chain of layers: ``bounds`` are ``[start, end)`` per segment (all
    but the last are checkpointed), with the predicted peak bytes (above the step's starting
    level) and the predicted extra seconds of recomputation per step.
    ``checkpoint_sequential`` takes one in place of a segment count."""

    bounds: list[tuple[int, int]]
    predicted_peak: int
    predicted_extra_seconds: float
    budget_bytes: int | None = None
    profiles: list[StageProfile] = field(default_factory=list, repr=False)

    @property
    def segments(self) -> int:
        return len(self.bounds)

    @property
    def sizes(self) -> list[int]:
        return [e - s for s, e in self.bounds]

    def __str__(self) -> str:
        budget = "none" if self.budget_bytes is None else f"{self.budget_bytes:,} B"
        return (
            f"SegmentPlan: {self.segments} segments of sizes {self.sizes} (cuts at "
            f"{[s for s, _ in self.bounds[1:]]}); predicted peak {self.predicted_peak:,} B "
            f"(budget {budget}); predicted recompute {self.predicted_extra_seconds * 1e3:.1f} "
            "ms per step"
        )


def profile(functions: Sequence[Callable[[Any], Any]], input: Any) -> list[StageProfile]:
    """Run each stage once, in grad mode, measuring what it keeps for backward and its time.
    The times are of this one run: run a training step first, so that they are of compiled
    kernels, not of their first call.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint.planner import profile
        >>> w = mg.randn(64, 64, requires_grad=True)
        >>> p = profile([lambda h: (h @ w).relu()] * 3, mg.randn(32, 64))
        >>> [s.out for s in p]
        [8192, 8192, 8192]
    """
    stages = list(functions)
    if not stages:
        raise ValueError("plan: functions is empty")
    result = []
    h = input
    keep = []  # hold every stage's output (and so its graph) until all are measured
    with enable_grad():
        for f in stages:
            first = sequence_mark()  # the nodes this stage makes are numbered from here
            with track() as t:
                start = time.perf_counter()
                out = f(h)
                seconds = time.perf_counter() - start
            if not isinstance(out, Tensor):
                raise TypeError(
                    f"plan: stage {len(result)} returned {type(out).__name__}; every stage must "
                    "return one Tensor (the next stage's input)"
                )
            grads, transient = gradient_bytes(_parameter_uses(out, first))
            out_bytes = buffer_of(out.numpy()).nbytes
            result.append(
                StageProfile(t.end_bytes - t.start_bytes, out_bytes, grads, seconds, transient)
            )
            keep.append(out)
            h = out
    return result


def _parameter_uses(out: Tensor, first: int) -> list[tuple[Tensor, int | None]]:
    """Each use of a parameter by a node of the stage (its nodes are numbered from
    ``first``), with the bytes at a time that node's op adds the gradient into an existing
    ``.grad`` (None: made whole), for ``records.gradient_bytes``."""
    uses = []
    seen: set[int] = set()
    stack = [out.grad_fn] if out.grad_fn is not None else []
    while stack:
        node = stack.pop()
        sinks = node.sink_inputs
        block = getattr(getattr(node, "prim", None), "sink_block_bytes", None)
        for i, (child, _) in enumerate(node.next_functions):
            if child is None:
                continue
            if child.__class__ is AccumulateGrad:
                uses.append((child.variable, block if i in sinks else None))
            elif child._sequence_nr >= first and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return uses


def predict(
    profiles: Sequence[StageProfile], bounds: Sequence[tuple[int, int]]
) -> tuple[int, float]:
    """Predicted peak bytes and extra seconds of a segmentation (NOTE [ Peak model ])."""
    n = len(profiles)
    if (
        not bounds
        or bounds[0][0] != 0
        or bounds[-1][1] != n
        or any(s >= e for s, e in bounds)
        or any(a[1] != b[0] for a, b in zip(bounds, bounds[1:]))
    ):
        raise ValueError(f"predict: {list(bounds)} is not a segmentation of {n} stages")
    _, checkpointed, last = _segment_terms(list(profiles))
    peak = 0
    boundaries = 0
    extra = 0.0
    for s, e in bounds[:-1]:
        peak = max(peak, checkpointed(s, e, boundaries))
        boundaries += profiles[e - 1].out
        extra += sum(p.seconds for p in profiles[s:e])
    return max(peak, last(bounds[-1][0], boundaries)), extra


def _budget(budget_bytes: Any) -> int | None:
    """``budget_bytes`` as a whole number of bytes: an int, a finite float (rounded down) or
    a size such as ``"64MB"`` (``memgrad.sizes.parse_size``)."""
    fix = "pass a number of bytes such as 64_000_000, or a size such as '64MB' or '1.5GiB'"
    if budget_bytes is None:
        return None
    if isinstance(budget_bytes, str):
        if budget_bytes.strip().endswith("%"):
            raise PlanError(
                f"plan: budget_bytes {budget_bytes!r} is a percentage, but plan has nothing to "
                f"take it of; {fix}"
            )
        try:
            return parse_size(budget_bytes).resolve()
        except SizeError as e:
            raise PlanError(f"plan: budget_bytes: {e}") from None
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, numbers.Real):
        raise TypeError(
            f"plan: budget_bytes must be a number of bytes or a size, got "
            f"{type(budget_bytes).__name__} {budget_bytes!r}; {fix}"
        )
    if not math.isfinite(budget_bytes) or budget_bytes < 1:
        raise PlanError(
            f"plan: budget_bytes must be a finite number of at least 1 byte, got "
            f"{budget_bytes!r}; {fix}, or None for the least peak"
        )
    return math.floor(budget_bytes)


def plan_from_profile(
    profiles: Sequence[StageProfile], budget_bytes: int | float | str | None = None
) -> SegmentPlan:
    """The exact best segmentation for measured ``profiles`` (see ``plan``)."""
    profiles = list(profiles)
    budget_bytes = _budget(budget_bytes)
    if budget_bytes is None:
        least = _least_peak(profiles)
        bounds = _least_time(profiles, least)
    else:
        bounds = _least_time(profiles, budget_bytes)
        if bounds is None:
            least = _least_peak(profiles)
            raise PlanError(
                f"plan: no segmentation fits a budget of {budget_bytes:,} bytes; the smallest "
                f"feasible budget for this model and input is {least:,} bytes (predicted "
                "peak above the step's starting level). Raise the budget, or shrink the batch."
            )
    assert bounds is not None
    peak, extra = predict(profiles, bounds)
    return SegmentPlan(bounds, peak, extra, budget_bytes, profiles)


def plan(
    model_or_fn: Any,
    *example_inputs: Any,
    budget_bytes: int | float | str | None = None,
    loss_fn: Callable[[Any], Any] | None = None,
    repeats: int = 3,
    method: str = "auto",
) -> Any:
    """Plan a training step of ``model_or_fn(*example_inputs)`` under ``budget_bytes`` (a
    number of bytes or a size such as ``"64MB"``): trace one forward, measure each op's
    time and each value's bytes (warm, ``repeats`` times, medians), and decide for every
    value its backward reads whether it is kept or recomputed in backward, and from where,
    with recomputation nested to any depth along the chain of the model's stages; the plan
    has the least predicted recompute time whose predicted peak of forward plus backward
    fits the budget (the least peak with no budget). ``loss_fn(output)`` is the step's loss
    (default: the sum of the outputs). ``method`` chooses the keep solver inside a stage
    (``"auto"``, ``"brute"``, ``"ilp"``, ``"greedy"``; NOTE [ Keep or recompute ]). Raises
    ``PlanError`` naming the smallest feasible budget when none fits. Plan in the state you
    train in (gradients zeroed in place or cleared to None); every ``.grad`` is left as it
    was found.

    Returns a ``Plan``: ``plan.apply(model)`` runs it (``with`` block or handle),
    ``plan.wrap(fn)`` for a function; gradients are bit-identical to the plain run's.
    A list of stage functions (``plan([f, g], x, "64MB")``) is planned as a segmentation
    instead (``plan_segments``), for ``checkpoint_sequential``.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import plan
        >>> model = mg.nn.Sequential(*[mg.nn.Linear(64, 64) for _ in range(6)])
        >>> x = mg.randn(128, 64)
        >>> p = plan(model, x, repeats=1)
        >>> with p.apply(model):
        ...     model(x).sum().backward()
        >>> p.predicted_peak <= p.predicted_plain_peak
        True
    """
    from memgrad.checkpoint.graph_plan import graph_plan

    if isinstance(model_or_fn, (list, tuple)):
        if len(example_inputs) == 2 and budget_bytes is None:
            example_inputs, budget_bytes = example_inputs[:1], example_inputs[1]
        if len(example_inputs) != 1:
            raise TypeError(
                f"plan: a list of stages takes one input (the first stage's), got "
                f"{len(example_inputs)}; call plan(stages, x, budget_bytes=...)"
            )
        return plan_segments(model_or_fn, example_inputs[0], budget_bytes)
    if not callable(model_or_fn):
        raise TypeError(
            f"plan: model_or_fn must be a Module, a function or a list of stages, got "
            f"{type(model_or_fn).__name__}; pass the model, then its example inputs"
        )
    if not example_inputs:
        raise TypeError("plan: pass the model's example inputs after it: plan(model, x)")
    return graph_plan(model_or_fn, *example_inputs, budget_bytes=_budget(budget_bytes),
                      loss_fn=loss_fn, repeats=repeats, method=method)


def plan_segments(
    functions: Sequence[Callable[[Any], Any]],
    input: Any,
    budget_bytes: int | float | str | None = None,
) -> SegmentPlan:
    """Profile each stage once, then choose the segment boundaries (not only equal counts)
    that minimise recomputed forward time subject to the predicted peak fitting
    ``budget_bytes``; with no budget, the least peak. ``budget_bytes`` is a number of bytes
    or a size as the command line writes it (``"64MB"``, ``"1.5GiB"``; no percentages).
    Raises ``PlanError`` naming the smallest feasible budget when none fits, and for a budget
    that is not a positive, finite size (``TypeError`` for one that is not a number). The
    profile follows the gradients' state: a parameter whose ``.grad`` exists is accumulated
    into in place (``zero_grad(set_to_none=False)``), one whose ``.grad`` is None gets it
    allocated in backward; plan in the state you train in. ``functions`` may also be traced
    stages (``memgrad.jit.trace_stages``, or anything with a ``static_profile()`` method):
    their bytes then come from static analysis of the graphs, without running anything
    (``input`` is not used).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import plan_segments, checkpoint_sequential
        >>> ws = [mg.randn(64, 64, requires_grad=True) for _ in range(8)]
        >>> layers = [lambda h, w=w: (h @ w).relu() for w in ws]
        >>> x = mg.randn(128, 64)
        >>> p = plan_segments(layers, x)
        >>> out = checkpoint_sequential(layers, p, x)
        >>> p.segments > 1
        True
        >>> plan_segments(layers, x, budget_bytes="1MB").budget_bytes
        1000000
    """
    budget_bytes = _budget(budget_bytes)  # before profiling, which takes a while
    stages = list(functions)
    if stages and all(callable(getattr(f, "static_profile", None)) for f in stages):
        return plan_from_profile([f.static_profile() for f in stages], budget_bytes)
    return plan_from_profile(profile(stages, input), budget_bytes)


# ---------------------------------------------------------------------------- search


def _segment_terms(profiles: list[StageProfile]) -> tuple[list[float], Callable, Callable]:
    n = len(profiles)
    prefix_kept = [0] * (n + 1)
    prefix_sec = [0.0] * (n + 1)
    for i, p in enumerate(profiles):
        prefix_kept[i + 1] = prefix_kept[i] + p.kept
        prefix_sec[i + 1] = prefix_sec[i] + p.seconds
    suffix_grads = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix_grads[i] = suffix_grads[i + 1] + profiles[i].grads
    # worst[s, e]: the most that segment [s, e) holds during its backward, with the
    # gradients made by then: while stage k-1 runs backward, stages s .. k-1 still keep their
    # activations and stages k-1 .. n-1 have their parameter gradients
    worst = {}
    transient = {}
    for s in range(n):
        w = suffix_grads[s]
        m = g = 0
        for e in range(s + 1, n + 1):
            p = profiles[e - 1]
            w = max(w, prefix_kept[e] - prefix_kept[s] + suffix_grads[e - 1])
            m = max(m, p.out)
            g = max(g, p.grad_transient)
            worst[s, e] = w
            transient[s, e] = TRANSIENT_OUTPUTS * m + g

    def checkpointed(s: int, e: int, before: int) -> int:
        return before + worst[s, e] + transient[s, e]

    def last(s: int, boundaries: int) -> int:
        return boundaries + worst[s, n] + transient[s, n]

    return prefix_sec, checkpointed, last


def _least_peak(profiles: list[StageProfile]) -> int:
    """The smallest predicted peak over all segmentations."""
    n = len(profiles)
    _, checkpointed, last = _segment_terms(profiles)
    # states[c]: boundary bytes so far -> least peak so far, for cuts ending at c
    states: list[dict[int, int]] = [dict() for _ in range(n + 1)]
    states[0][0] = 0
    best = None
    for s in range(n):
        for boundaries, peak in states[s].items():
            final = max(peak, last(s, boundaries))
            best = final if best is None else min(best, final)
            for e in range(s + 1, n):
                p = max(peak, checkpointed(s, e, boundaries))
                nb = boundaries + profiles[e - 1].out
                if p < states[e].get(nb, p + 1):
                    states[e][nb] = p
    assert best is not None
    return best


def _least_time(profiles: list[StageProfile], budget: int) -> list[tuple[int, int]] | None:
    """The segmentation with the least extra time whose predicted peak fits ``budget``."""
    n = len(profiles)
    prefix_sec, checkpointed, last = _segment_terms(profiles)
    # states[c]: boundary bytes so far -> (least extra seconds, previous cut, its boundaries)
    states: list[dict[int, tuple[float, int, int]]] = [dict() for _ in range(n + 1)]
    states[0][0] = (0.0, -1, -1)
    best = None
    for s in range(n):
        for boundaries, (sec, _, _) in sorted(states[s].items()):
            if last(s, boundaries) <= budget and (best is None or sec < best[0]):
                best = (sec, s, boundaries)
            for e in range(s + 1, n):
                if checkpointed(s, e, boundaries) > budget:
                    continue
                nb = boundaries + profiles[e - 1].out
                t = sec + prefix_sec[e] - prefix_sec[s]
                if t < states[e].get(nb, (float("inf"),))[0]:
                    states[e][nb] = (t, s, boundaries)
    if best is None:
        return None
    _, s, boundaries = best
    bounds = [(s, n)]
    while s > 0:
        _, prev, prev_boundaries = states[s][boundaries]
        bounds.append((prev, s))
        s, boundaries = prev, prev_boundaries
    return bounds[::-1]
