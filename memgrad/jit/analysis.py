"""Static memory analysis of a traced graph: what each op makes and saves, without running
backward.

NOTE [ Static saved bytes ]
Which inputs of a binding need gradients follows from the graph: parameters do, the inputs
do if they required grad when traced, and a binding's result does if any of its arguments
does (and it is a floating-point result of a differentiable primitive). From that mask the
op record's save rule (``Primitive.saves_for``) gives the values each binding keeps for
backward, exactly as the dispatcher decides at run time. Views (``Primitive.view``) share
their first argument's buffer, so a buffer saved through several views counts once. The
stage profile is the planner's record, made by the same rule for parameter gradients
(``memgrad.records.gradient_bytes``) as the measured profile: a parameter's gradient is new
bytes when its ``.grad`` is None, else a transient (in blocks where the op record says so).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memgrad.jit.ir import Value
from memgrad.ops.registry import REGISTRY
from memgrad.records import OpBytes, SavedEntry, StageProfile, gradient_bytes

__all__ = ["OpBytes", "op_bytes", "static_profile", "saved_entries"]


def _bytes(v: Value) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def _analyse(graph: Any) -> tuple[list[OpBytes], dict[str, str]]:
    grad = {v.name: True for v in graph.params}
    grad.update({v.name: v.name in graph.requires_grad for v in graph.inputs})
    buffer = {v.name: v.name for v in graph.inputs + graph.params}
    result = []
    for b in graph.bindings:
        prim = REGISTRY[b.op]
        needs = 0
        for i, a in enumerate(b.args):
            if isinstance(a, Value) and grad.get(a.name, False):
                needs |= 1 << i
        out_grad = prim.differentiable and needs != 0 and np.dtype(b.out.dtype).kind == "f"
        grad[b.out.name] = out_grad
        first = b.args[0] if b.args else None
        buffer[b.out.name] = (
            buffer[first.name] if prim.view and isinstance(first, Value) else b.out.name
        )
        saved: list[Value] = []
        if out_grad:
            inputs, out = prim.saves_for(needs)
            saved = [b.args[i] for i in inputs if isinstance(b.args[i], Value)]
            if out:
                saved.append(b.out)
        result.append(OpBytes(b, _bytes(b.out), saved, b.region))
    return result, buffer


def op_bytes(graph: Any) -> list[OpBytes]:
    """Per binding: its result's bytes and the values it saves for backward
    (NOTE [ Static saved bytes ]).

    Example:
        >>> import memgrad as mg
        >>> w = mg.ones(8, 8, requires_grad=True)
        >>> g = mg.jit.trace(lambda x: (x @ w).tanh(), mg.ones(4, 8))
        >>> [(o.binding.op, [str(v) for v in o.saved]) for o in mg.jit.op_bytes(g)]
        [('matmul', ['%x']), ('tanh', ['%1'])]
    """
    return _analyse(graph)[0]


def static_profile(graph: Any, seconds: float = 0.0) -> StageProfile:
    """A planner ``StageProfile`` of one stage from its graph alone: the bytes its graph keeps
    for backward (its output included, inputs and parameters not), its output's bytes, and
    its parameters' gradient bytes by the rule the measured profile uses (the parameters'
    ``.grad`` as they are now).

    Example:
        >>> import memgrad as mg
        >>> w = mg.ones(8, 8, requires_grad=True)
        >>> g = mg.jit.trace(lambda x: (x @ w).relu(), mg.ones(4, 8))
        >>> p = mg.jit.static_profile(g)
        >>> p.out, p.grads
        (128, 256)
    """
    ops, buffer = _analyse(graph)
    sizes = {o.binding.out.name: o.out_bytes for o in ops}
    formal = {v.name for v in graph.inputs + graph.params}
    kept: dict[str, int] = {}
    for o in ops:
        for v in o.saved:
            root = buffer[v.name]
            if root not in formal:
                kept[root] = sizes[root]
    out = graph.outputs[0]
    root = buffer[out.name]
    if root not in formal:
        kept[root] = sizes[root]
    grads, transient = gradient_bytes(_parameter_uses(graph))
    return StageProfile(sum(kept.values()), _bytes(out), grads, seconds, transient)


def _parameter_uses(graph: Any) -> list[tuple[Any, int | None]]:
    """Each use of a bound parameter as an argument, with the bytes at a time its op adds
    the gradient into an existing ``.grad`` (None: made whole)."""
    params = {v.name: graph.bound[v.name] if v.name in graph.bound else _Unbound(v)
              for v in graph.params}
    uses = []
    for b in graph.bindings:
        prim = REGISTRY[b.op]
        for i, a in enumerate(b.args):
            if isinstance(a, Value) and a.name in params:
                sunk = i in prim.accumulates
                uses.append((params[a.name], prim.sink_block_bytes if sunk else None))
    return uses


class _Unbound:
    """A parameter of a parsed graph, not bound to a tensor: taken as one without a
    ``.grad``."""

    def __init__(self, v: Value) -> None:
        self.dtype = np.dtype(v.dtype)
        self._numel = int(np.prod(v.shape, dtype=np.int64))
        self.grad = None

    def numel(self) -> int:
        return self._numel


def saved_entries(graph: Any) -> list[SavedEntry]:
    """Every value a backward of ``graph`` keeps, in save order, from static analysis (the
    source is the binding's text): what ``memory.saved_report`` gives for a traced graph."""
    ops, buffer = _analyse(graph)
    roots = {name: i for i, name in enumerate(dict.fromkeys(buffer.values()))}
    sizes = {v.name: v for v in graph.inputs + graph.params}
    sizes.update({o.binding.out.name: o.binding.out for o in ops})
    made_in = {o.binding.out.name: o.region for o in ops}
    entries = []
    for o in ops:
        for v in o.saved:
            root = sizes[buffer[v.name]]
            # a region keeps its arguments and the parameters; it recomputes what it makes
            kept = o.region is None or made_in.get(root.name) != o.region
            entries.append(
                SavedEntry(v.shape, v.dtype, _bytes(root), o.binding.op, str(o.binding),
                           o.region, kept, roots[buffer[v.name]])
            )
    return entries
