"""Static memory analysis of a Graph: what each op makes and saves, without running backward.

NOTE [ Static saved bytes ]
Which inputs of a binding need gradients follows from the graph: parameters do, the inputs
do if they required grad when traced, and a binding's result does if any of its arguments
does (and it is a floating-point result of a differentiable primitive). From that mask the
op table's ``saves`` rules give the values each binding keeps for backward, exactly as the
dispatcher decides at run time. Views (``Primitive.view``) share their first argument's
buffer, so a buffer saved through several views counts once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memgrad.jit.ir import Binding, Graph, Value
from memgrad.ops.registry import REGISTRY

__all__ = ["OpBytes", "op_bytes", "static_profile", "trace_stages"]


@dataclass
class OpBytes:
    """One binding: the bytes of its result and the values it saves for backward."""

    binding: Binding
    out_bytes: int
    saved: list[Value]
    region: str | None


def _bytes(v: Value) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize


def _analyse(graph: Graph) -> tuple[list[OpBytes], dict[str, str]]:
    grad = {v.name: True for v in graph.params}
    grad.update({v.name: v.name in graph.requires_grad for v in graph.inputs})
    buffer = {v.name: v.name for v in graph.inputs + graph.params}
    result = []
    for b in graph.bindings:
        prim = REGISTRY[b.op]
        needs = [isinstance(a, Value) and grad.get(a.name, False) for a in b.args]
        out_grad = (
            prim.differentiable and any(needs) and np.dtype(b.out.dtype).kind == "f"
        )
        grad[b.out.name] = out_grad
        first = b.args[0] if b.args else None
        buffer[b.out.name] = (
            buffer[first.name] if prim.view and isinstance(first, Value) else b.out.name
        )
        saved: list[Value] = []
        if out_grad:
            for i, needed_by in prim.save_inputs:
                a = b.args[i]
                if isinstance(a, Value) and any(needs[j] for j in needed_by):
                    saved.append(a)
            if prim.save_out is not None and any(needs[j] for j in prim.save_out):
                saved.append(b.out)
        result.append(OpBytes(b, _bytes(b.out), saved, b.region))
    return result, buffer


def op_bytes(graph: Graph) -> list[OpBytes]:
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


def static_profile(graph: Graph, seconds: float = 0.0) -> Any:
    """A planner ``StageProfile`` of one stage from its graph alone: the bytes its graph keeps
    for backward (its output included, inputs and parameters not), its output's bytes and
    its parameters' gradient bytes."""
    from memgrad.checkpoint.planner import StageProfile

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
    grads = sum(_bytes(v) for v in graph.params)
    return StageProfile(sum(kept.values()), _bytes(out), grads, seconds)


def trace_stages(functions: Sequence[Callable[[Any], Any]], input: Any) -> list[Graph]:
    """Trace each stage of a chain on the output of the one before (grad mode, forward
    only); each Graph's ``seconds`` holds its traced forward time."""
    from memgrad.autograd.grad_mode import enable_grad
    from memgrad.jit.trace import record

    graphs = []
    h = input
    with enable_grad():
        for f in functions:
            start = time.perf_counter()
            g, h = record(f, (h,))
            g.seconds = time.perf_counter() - start
            graphs.append(g)
    return graphs
