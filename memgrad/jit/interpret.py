"""The interpreter: run a Graph on new inputs, freeing each value right after its last use.

NOTE [ Last use ]
Before the first run the interpreter computes, once per graph, after which binding each
value is used for the last time (outputs never are). Running binding i then drops the
interpreter's reference to every value whose last use was i, so a value lives only as long
as the program needs it, plus whatever autograd saved for backward. Bindings of a checkpoint
region run inside ``checkpoint`` again, so a re-run graph saves what the traced run saved.
"""

from __future__ import annotations

from typing import Any

from memgrad.errors import TraceError
from memgrad.jit.ir import Binding, Const, Value
from memgrad.ops.registry import REGISTRY, apply
from memgrad.tensor import Tensor, wrap

__all__ = ["run"]


class _Block:
    """A run of bindings outside any region, or one checkpoint region."""

    def __init__(self, region: str | None, bindings: list[tuple[int, Binding]]) -> None:
        self.region = region
        self.bindings = bindings
        self.inputs: list[str] = []  # for a region: values it reads that were made before
        self.outputs: list[str] = []  # for a region: values it makes that are read after


class _Plan:
    def __init__(self, graph: Any) -> None:
        last: dict[str, int] = {}
        for i, b in enumerate(graph.bindings):
            for a in b.args:
                if isinstance(a, Value):
                    last[a.name] = i
        keep = {v.name for v in graph.outputs}
        self.free_after: list[list[str]] = [[] for _ in graph.bindings]
        for name, i in last.items():
            if name not in keep:
                self.free_after[i].append(name)
        self.blocks: list[_Block] = []
        for i, b in enumerate(graph.bindings):
            if not self.blocks or self.blocks[-1].region != b.region:
                self.blocks.append(_Block(b.region, []))
            self.blocks[-1].bindings.append((i, b))
        for block in self.blocks:
            if block.region is None:
                continue
            made = {b.out.name for _, b in block.bindings}
            end = block.bindings[-1][0]
            seen: set[str] = set()
            for _, b in block.bindings:
                for a in b.args:
                    if isinstance(a, Value) and a.name not in made and a.name not in seen:
                        seen.add(a.name)
                        block.inputs.append(a.name)
            block.outputs = [
                b.out.name
                for _, b in block.bindings
                if b.out.name in keep or last.get(b.out.name, -1) > end
            ]


def _check(graph: Any, inputs: tuple) -> Any:
    """None if ``inputs`` fit the graph; else a retraced graph (dynamic) or an error."""
    problems = []
    if len(inputs) != len(graph.inputs):
        problems.append(f"it takes {len(graph.inputs)} inputs, got {len(inputs)}")
    for i, (x, v) in enumerate(zip(inputs, graph.inputs)):
        if not isinstance(x, Tensor):
            raise TypeError(
                f"memgrad.jit: input {i} ({v}) must be a Tensor, got {type(x).__name__}"
            )
        if tuple(x.shape) != v.shape or x.dtype.name != v.dtype:
            problems.append(
                f"input {i} ({v}) was traced as {v.type_str}, got "
                f"{x.dtype.name}[{', '.join(map(str, x.shape))}]"
            )
    if not problems:
        return None
    if graph.dynamic and graph.retrace is not None:
        return graph.retrace(*inputs)
    raise TraceError(
        "memgrad.jit: the graph does not fit these inputs: " + "; ".join(problems) + ". "
        "A trace is specialised to the shapes and dtypes it saw: trace again for these "
        "inputs, or create it with trace(..., dynamic=True) to retrace on a mismatch."
    )


def run(graph: Any, inputs: tuple) -> Any:
    """Run ``graph`` on ``inputs`` (see NOTE [ Last use ])."""
    retraced = _check(graph, inputs)
    if retraced is not None:
        return run(retraced, inputs)
    missing = [v.name for v in graph.params if v.name not in graph.bound]
    if missing:
        raise TraceError(
            f"memgrad.jit: parameters {missing} are not bound; a parsed graph needs its "
            "parameter tensors: graph.bound.update(name=tensor, ...) before calling it"
        )
    for v in graph.params:  # the kernels trust the types the graph declares
        t = graph.bound[v.name]
        if not isinstance(t, Tensor) or tuple(t.shape) != v.shape or t.dtype.name != v.dtype:
            got = f"{t.dtype.name}{list(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
            raise TraceError(
                f"memgrad.jit: parameter {v} is declared {v.type_str} but bound to {got}; bind "
                "a tensor of the declared shape and dtype"
            )
    if graph._plan is None:
        graph._plan = _Plan(graph)
    plan: _Plan = graph._plan
    env: dict[str, Tensor] = {v.name: x for v, x in zip(graph.inputs, inputs)}
    for v in graph.params:
        env[v.name] = graph.bound[v.name]
    for block in plan.blocks:
        if block.region is None:
            for i, b in block.bindings:
                env[b.out.name] = _call(b, env)
                for name in plan.free_after[i]:
                    env.pop(name, None)
        else:
            _run_region(block, plan, env)
    outs = tuple(env[v.name] for v in graph.outputs)
    return outs if graph.tuple_output else outs[0]


def _call(b: Binding, env: dict[str, Tensor]) -> Tensor:
    args = tuple(
        env[a.name] if isinstance(a, Value) else wrap(a.data) if isinstance(a, Const) else a
        for a in b.args
    )
    return apply(REGISTRY[b.op], args, b.params)


def _run_region(block: _Block, plan: _Plan, env: dict[str, Tensor]) -> None:
    from memgrad.checkpoint import checkpoint

    def region(*values: Tensor) -> tuple[Tensor, ...]:
        # everything the region reads is an argument (parameters too), so the checkpoint
        # keeps nothing else alive
        local = dict(zip(block.inputs, values))
        for i, b in block.bindings:
            local[b.out.name] = _call(b, local)
            for name in plan.free_after[i]:
                local.pop(name, None)
        return tuple(local[name] for name in block.outputs)

    results = checkpoint(region, *(env[name] for name in block.inputs))
    env.update(zip(block.outputs, results))
    for i, _ in block.bindings:
        for name in plan.free_after[i]:
            env.pop(name, None)
