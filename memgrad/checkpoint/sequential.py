"""``checkpoint_sequential``: cut a chain of layers into segments and checkpoint all but the
last one; ``CheckpointedSequential`` is the same as a Module."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from memgrad.checkpoint.checkpoint import checkpoint
from memgrad.nn.module import Module, ModuleList, Sequential

__all__ = ["checkpoint_sequential", "segment_bounds", "CheckpointedSequential"]


def segment_bounds(n: int, segments: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each of ``segments`` chunks of ``n`` layers, sizes differing by
    at most one. The remainder goes one extra layer each to the segments just before the
    last (10 layers in 4 segments: 2, 3, 3, 2): the first segments are recomputed last in
    backward, when the parameter gradients have built up, so they are the ones kept small;
    the last segment is not checkpointed, so a larger one would add to the forward peak.

    Example:
        >>> from memgrad.checkpoint import segment_bounds
        >>> segment_bounds(10, 4)
        [(0, 2), (2, 5), (5, 8), (8, 10)]
    """
    segments = _segment_count(segments, n, "segment_bounds")
    base, extra = divmod(n, segments)
    first_extra = segments - 1 - extra  # segments first_extra .. segments - 2 get one more
    bounds, start = [], 0
    for i in range(segments):
        end = start + base + (1 if first_extra <= i < segments - 1 else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _segment_count(segments: Any, n: int, api: str) -> int:
    """``segments`` as an int between 1 and ``n``, or a TypeError / ValueError that says
    what to pass."""
    fix = ("pass a whole number of segments such as 2, or a SegmentPlan from "
           "memgrad.checkpoint.plan_segments")
    if isinstance(segments, bool) or not isinstance(segments, numbers.Integral):
        from memgrad.checkpoint.graph_plan import Plan

        if isinstance(segments, Plan):  # the graph planner's: it places no segments
            fix += ("; a Plan from memgrad.checkpoint.plan applies to the model itself: "
                    "with plan.apply(model): loss = loss_fn(model(x))")
        raise TypeError(
            f"{api}: segments must be an int or a SegmentPlan, got {type(segments).__name__} "
            f"{segments!r}; {fix}"
        )
    if not 1 <= segments <= n:
        raise ValueError(
            f"{api}: segments must be between 1 and the number of layers ({n}), got "
            f"{segments}; pass a count in that range, e.g. {min(2, n)}"
        )
    return int(segments)


def _layers(functions: Any, api: str) -> list[Callable[[Any], Any]]:
    """``functions`` as a list of callables, or a TypeError that names the entry (or the
    whole) that is not one and how to pass it."""
    if isinstance(functions, Module) and not isinstance(functions, (Sequential, ModuleList)):
        name = type(functions).__name__
        raise TypeError(
            f"{api}: functions must be an nn.Sequential or a list of callables, got a single "
            f"{name}; wrap it: nn.Sequential(module), or pass [module]"
        )
    if isinstance(functions, (str, bytes)) or not hasattr(functions, "__iter__"):
        got = ("a single function" if callable(functions)
               else f"{type(functions).__name__} {_short(functions)}")
        raise TypeError(
            f"{api}: functions must be an nn.Sequential or a list of callables, got {got}; "
            "pass a list of callables, e.g. [layer1, layer2]"
        )
    layers = list(functions)
    if not layers:
        raise ValueError(f"{api}: functions is empty; pass at least one layer")
    for i, layer in enumerate(layers):
        if not callable(layer):
            raise TypeError(
                f"{api}: functions[{i}] is {type(layer).__name__} {_short(layer)}, which is "
                "not callable; every entry must be a layer or a function of one input"
            )
    return layers


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]] | Module,
    segments: Any,
    input: Any,
    use_reentrant: bool = False,
    preserve_rng_state: bool = True,
) -> Any:
    """Run ``functions`` (an ``nn.Sequential`` or a list of callables) one after another on
    ``input``, cut into ``segments`` chunks (see ``segment_bounds``) of which all but the
    last are checkpointed. ``segments`` may also be a ``SegmentPlan`` from
    ``memgrad.checkpoint.plan_segments``, whose boundaries are used as they are (a ``Plan``
    from ``memgrad.checkpoint.plan`` is applied to the model instead: ``plan.apply``).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import checkpoint_sequential
        >>> ws = [mg.randn(8, 8, requires_grad=True) for _ in range(4)]
        >>> layers = [lambda h, w=w: (h @ w).tanh() for w in ws]
        >>> out = checkpoint_sequential(layers, 2, mg.randn(3, 8))
        >>> out.sum().backward()
        >>> all(w.grad is not None for w in ws)
        True
    """
    layers = _layers(functions, "checkpoint_sequential")
    bounds = _bounds(segments, len(layers), "checkpoint_sequential")

    def run(start: int, end: int) -> Callable[[Any], Any]:
        def forward(x: Any) -> Any:
            for layer in layers[start:end]:
                x = layer(x)
            return x

        return forward

    x = input
    for start, end in bounds[:-1]:
        x = checkpoint(
            run(start, end), x, use_reentrant=use_reentrant, preserve_rng_state=preserve_rng_state
        )
    start, end = bounds[-1]
    return run(start, end)(x)


def _bounds(segments: Any, n: int, api: str) -> list[tuple[int, int]]:
    """The segments of ``n`` layers that ``segments`` (a count or a SegmentPlan) asks for."""
    bounds = segments.bounds if hasattr(segments, "bounds") else None
    if bounds is None:
        return segment_bounds(n, _segment_count(segments, n, api))
    bounds = [tuple(b) for b in bounds]
    if not bounds or bounds[-1][1] != n:
        raise ValueError(
            f"{api}: the plan covers {bounds[-1][1] if bounds else 0} layers but functions has "
            f"{n}; make the plan for this model"
        )
    start = 0
    for lo, hi in bounds:  # each segment starts where the one before ends, and is not empty
        if lo != start or hi <= lo:
            raise ValueError(
                f"{api}: the plan's segments must cover the layers in order, each from where "
                f"the one before ends: got {bounds}; make the plan with plan_segments"
            )
        start = hi
    return bounds


class CheckpointedSequential(Module):
    """``layers`` run through ``checkpoint_sequential`` with ``segments`` (a count or a
    ``SegmentPlan``), as a Module: its parameters are the layers', and it can be wrapped or nested
    like any model (``DistributedDataParallel`` averages the gradients of a backward only
    after a forward through the wrapper).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import CheckpointedSequential
        >>> layers = mg.nn.Sequential(mg.nn.Linear(4, 4), mg.nn.Tanh(), mg.nn.Linear(4, 1))
        >>> model = CheckpointedSequential(layers, 2)
        >>> model(mg.ones(3, 4)).sum().backward()
        >>> layers[0].weight.grad.shape
        (4, 4)
    """

    def __init__(self, layers: Module, segments: Any, use_reentrant: bool = False) -> None:
        super().__init__()
        api = "CheckpointedSequential"
        if not isinstance(layers, (Sequential, ModuleList)):
            got = (f"a {type(layers).__name__}" if not isinstance(layers, (list, tuple))
                   else f"a {type(layers).__name__} of layers")
            fix = ("wrap it: nn.Sequential(module)" if isinstance(layers, Module)
                   else "wrap modules in nn.Sequential(*layers), so that their parameters are "
                   "this module's, or call checkpoint_sequential for plain functions")
            raise TypeError(f"{api}: layers must be an nn.Sequential, got {got}; {fix}")
        _bounds(segments, len(_layers(layers, api)), api)
        self.layers = layers
        self.segments = segments
        self.use_reentrant = use_reentrant

    def forward(self, x: Any) -> Any:
        return checkpoint_sequential(self.layers, self.segments, x,
                                     use_reentrant=self.use_reentrant)

