"""Plain records several layers share, kept below all of them: what one stage of a model
costs (:class:`StageProfile`, made by the planner from a run and by the jit from a trace),
one value saved for backward (:class:`SavedEntry`, the saved-tensor report's row), one traced
op's bytes (:class:`OpBytes`); and :func:`gradient_bytes`, the one rule both profiles use for
the bytes of parameter gradients.

Example:
    >>> from memgrad.records import StageProfile
    >>> StageProfile(kept=4096, out=1024, grads=0, seconds=0.001).out
    1024
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StageProfile", "SavedEntry", "OpBytes", "gradient_bytes"]


@dataclass(frozen=True)
class StageProfile:
    """What one stage costs: bytes kept for backward (output included), output bytes,
    bytes of parameter gradients backward allocates, forward seconds, and the largest
    parameter gradient that is made and then added into an existing ``.grad`` (or the block
    of it, where the op adds in blocks)."""

    kept: int
    out: int
    grads: int
    seconds: float
    grad_transient: int = 0


@dataclass
class SavedEntry:
    """One tensor saved for backward."""

    shape: tuple[int, ...]
    dtype: str
    bytes: int
    op: str  # the op that saved it
    source: str  # "file:line" of the user code that called that op (a trace: the binding)
    region: str | None  # the checkpoint region it was saved in, if any
    kept: bool  # held from forward to backward (False: recomputed in backward)
    buffer: int = field(repr=False)  # identity of the storage, to count shared storage once


@dataclass
class OpBytes:
    """One binding of a traced graph: the bytes of its result and the values it saves for
    backward (``memgrad.jit`` Values)."""

    binding: Any
    out_bytes: int
    saved: list[Any]
    region: str | None


def gradient_bytes(uses: Iterable[tuple[Any, int | None]]) -> tuple[int, int]:
    """``(grads, grad_transient)`` of a stage from the uses of its parameters: each use is
    ``(parameter, block)``, ``block`` being the bytes at a time its op adds the gradient
    into an existing ``.grad`` (the op record's ``sink_block_bytes``), or None where the
    gradient is made whole. A parameter whose ``.grad`` is None gets it allocated in
    backward (``grads``); one whose ``.grad`` exists is accumulated into: its gradient is a
    transient, in blocks only if every use adds in blocks (NOTE [ Accumulate in place ]).

    Example:
        >>> import memgrad as mg
        >>> w = mg.zeros(256, 256, requires_grad=True)
        >>> gradient_bytes([(w, 1 << 20)])
        (262144, 0)
        >>> w.grad = mg.zeros(256, 256)
        >>> gradient_bytes([(w, 1 << 20)]), gradient_bytes([(w, None)])
        ((0, 262144), (0, 262144))
    """
    blocks: dict[int, int | None] = {}
    params: dict[int, Any] = {}
    for p, block in uses:
        key = id(p)
        params[key] = p
        if key not in blocks:
            blocks[key] = block
        elif blocks[key] is not None:
            blocks[key] = None if block is None else max(blocks[key], block)  # type: ignore[type-var]
    grads = transient = 0
    for key, p in params.items():
        nbytes = p.numel() * p.dtype.itemsize
        if p.grad is None:
            grads += nbytes
        else:
            block = blocks[key]
            transient = max(transient, nbytes if block is None else min(nbytes, block))
    return grads, transient
