"""``checkpoint_sequential``: cut a chain of layers into segments and checkpoint all but the
last one; ``CheckpointedSequential`` is the same as a Module."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from memgrad.checkpoint.checkpoint import checkpoint
from memgrad.nn.module import Module

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
    if isinstance(segments, bool) or not isinstance(segments, int):
        raise TypeError(f"checkpoint_sequential: segments must be an int, got {segments!r}")
    if not 1 <= segments <= n:
        raise ValueError(
            f"checkpoint_sequential: segments must be between 1 and the number of layers "
            f"({n}), got {segments}"
        )
    base, extra = divmod(n, segments)
    first_extra = segments - 1 - extra  # segments first_extra .. segments - 2 get one more
    bounds, start = [], 0
    for i in range(segments):
        end = start + base + (1 if first_extra <= i < segments - 1 else 0)
        bounds.append((start, end))
        start = end
    return bounds


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]],
    segments: Any,
    input: Any,
    use_reentrant: bool = False,
    preserve_rng_state: bool = True,
) -> Any:
    """Run ``functions`` (an ``nn.Sequential`` or a list of callables) one after another on
    ``input``, cut into ``segments`` chunks (see ``segment_bounds``) of which all but the
    last are checkpointed. ``segments`` may also be a ``Plan`` from
    ``memgrad.checkpoint.plan``, whose boundaries are used as they are.

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
    layers = list(functions)
    if not layers:
        raise ValueError("checkpoint_sequential: functions is empty")
    bounds = segments.bounds if hasattr(segments, "bounds") else None
    if bounds is None:
        bounds = segment_bounds(len(layers), segments)
    elif bounds[-1][1] != len(layers):
        raise ValueError(
            f"checkpoint_sequential: the plan covers {bounds[-1][1]} layers but functions has "
            f"{len(layers)}; make the plan for this model"
        )

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


class CheckpointedSequential(Module):
    """``layers`` run through ``checkpoint_sequential`` with ``segments`` (a count or a
    ``Plan``), as a Module: its parameters are the layers', and it can be wrapped or nested
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
        self.layers = layers
        self.segments = segments
        self.use_reentrant = use_reentrant

    def forward(self, x: Any) -> Any:
        return checkpoint_sequential(self.layers, self.segments, x,
                                     use_reentrant=self.use_reentrant)

