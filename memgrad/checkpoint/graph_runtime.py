"""Run a graph plan in eager mode: the model's own forward, with what its backward reads kept
or rebuilt as the plan says.

NOTE [ Plan runtime ]
A planned forward runs the model's code as it is, under an interpreter that numbers the ops
(checking them against the profiled ones) and records each op's arguments, and under
saved-tensor hooks that decide for every value a node saves: kept (the stage runs with a
kept variant that holds its buffer, or it is the stage's input or output), or a placeholder
naming the value. The interpreter also holds, as the schedule's forward part says, the
stage inputs kept as sources and, of the kept values, those that the ops a stage rebuilds
read (references: no copies). The other kept values are held by the nodes that saved them
alone, so they are freed as backward goes, as in a plain step (the cost model's backward
transient is measured on the plain step).

In backward, the first placeholder of stage j that is unpacked carries the schedule on to
``("bwd", j)`` (NOTE [ Chain schedule ] in solver.py): each ``("fwd", i, v)`` it passes
replays stage i's ops from its input under no-grad and caches the placeholders of stage i
that variant v keeps; ``("drop", i)`` frees a_i; passing ``("bwd", i)`` frees what stage i
held. A placeholder not cached then is rebuilt from what is held, by replaying the ops that
make it (and whatever else of its stage is still to be read is cached on the way). A cached
value is freed when its last placeholder is unpacked, or when the stage that reads it is done
and the stage that made it is replayed next (which makes it again). Replays run the same
primitives on the same inputs, so every gradient is bit-identical to the plain run; a value
that is not where the schedule expects it is rebuilt from further back (down to the inputs
and the outside tensors the forward recorded), which costs time but never changes a result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from memgrad import interpreters
from memgrad.autograd.grad_mode import no_grad, state
from memgrad.autograd.graph import saved_tensors_hooks_with_op
from memgrad.errors import PlanError
from memgrad.interpreters import Interpreter
from memgrad.ops.registry import apply as apply_op
from memgrad.tensor import Tensor, wrap

__all__ = ["PlanHandle", "planned", "Layout", "rebuild_sources"]


class Layout:
    """What the runtime needs of a plan, computed once: per op its stage; per stage the
    buffers kept in the forward, the values it exports (read by later stages) and imports;
    the forward modes and the backward part of the schedule."""

    def __init__(self, profile: Any, variants: list[list[frozenset[int]]],
                 actions: list[tuple]) -> None:
        self.ops = profile.ops
        self.stages = profile.stages
        self.stage_of = [0] * len(self.ops)
        for j, st in enumerate(self.stages):
            for k in range(st.lo, st.hi):
                self.stage_of[k] = j
        n = len(self.stages)
        # the forward ends where backward begins, at the loss's backward: the replays
        # between it and the model's first stage backward belong to backward (the loss's
        # actions are not the model's)
        first_bwd = next(i for i, a in enumerate(actions) if a[0] == "bwd")
        forward = [a for a in actions[:first_bwd] if a[1] < n]
        self.mode: list[int | None] = [None] * n
        for a in forward:
            if a[0] == "fwd":
                self.mode[a[1]] = a[2]
        self.backward = [a for a in actions[first_bwd:] if a[1] < n]
        self.kept = [  # roots each stage keeps when it runs with variant v
            [frozenset(kept) for kept in stage_variants] for stage_variants in variants
        ]
        self.exports: list[list[int]] = []
        self.imports: list[list[int]] = []
        for st in self.stages:
            reads = {v for op in self.ops[st.hi:] for kind, v in op.args if kind == "v"}
            self.exports.append(sorted(
                v for v in range(st.lo, st.hi) if v in reads or v in profile.outputs))
            self.imports.append(sorted(
                {v for op in self.ops[st.lo:st.hi] for kind, v in op.args
                 if kind == "v" and v < st.lo}))
        self.remade_after = self._remade_after()
        self.last_use: list[dict[int, int]] = []  # per stage: value -> its last reader there
        for st in self.stages:
            last: dict[int, int] = {}
            for k in range(st.lo, st.hi):
                for kind, v in self.ops[k].args:
                    if kind == "v":
                        last[v] = k
            self.last_use.append(last)
        held: set[int] = set()
        for a in forward:
            if a[0] == "fwd":
                held.update(self.exports[a[1]])
                if a[2] is not None:
                    held.update(self.kept[a[1]][a[2]])
            elif a[0] == "drop":
                held.difference_update(self.imports[a[1]])
        # only what a replay starts from, or a stage that rebuilds values reads: anything
        # else held would outlive the node that saved it
        replayed = {a[1] for a in self.backward if a[0] == "fwd"}
        rebuilds = {j for j, m in enumerate(self.mode) if m}  # variant 0 keeps all
        needed = {v for j in replayed | rebuilds for v in self.imports[j]}
        self._sources: dict[tuple[int, int], frozenset[int]] = {}
        self.hold_forward = frozenset(held & needed).union(
            *(self.sources(j, m) for j, m in enumerate(self.mode) if m))

    def _remade_after(self) -> dict[int, list[int]]:
        """At each ``("bwd", j)`` of the backward part: j's inputs that the node of the stage
        that made them still reads (it saves its output), where that stage's next action is
        a replay, which makes them again. Cached until then, they would outlive the
        schedule's a_j, on top of the replays in between."""
        remade: dict[int, list[int]] = {}
        upcoming: dict[int, str] = {}
        for i in range(len(self.backward) - 1, -1, -1):
            kind, j = self.backward[i][:2]
            if kind == "bwd":
                remade[i] = [v for v in self.imports[j]
                             if upcoming.get(self.stage_of[v]) == "fwd"]
            if kind != "drop":
                upcoming[j] = kind
        return remade

    def sources(self, j: int, mode: int) -> frozenset[int]:
        """The values of stage j, kept when it runs in ``mode``, that the ops it rebuilds
        read: what the runtime holds for the rebuilds (the nodes hold the other kept values,
        and free them as backward goes, as in a plain step)."""
        key = (j, mode)
        found = self._sources.get(key)
        if found is None:
            found = self._sources[key] = rebuild_sources(self.ops, self.stages[j],
                                                         self.kept[j][mode])
        return found

    def keeps(self, saver: int, v: int, mode: int | None) -> bool:
        """Whether op ``saver``'s node keeps value ``v`` when its stage runs in ``mode``."""
        st = self.stages[self.stage_of[saver]]
        r = self.ops[v].root
        if r < 0 or mode is None:
            return r < 0
        return r in self.kept[self.stage_of[saver]][mode] or r in (st.input_root, st.output_root)


def rebuild_sources(ops: list[Any], st: Any, kept: frozenset[int]) -> frozenset[int]:
    """The values of stage ``st`` that its ops rebuilt in backward read, and that are there
    when it keeps the roots ``kept``: what the runtime holds until the stage's backward is
    over (its input and output among them, and views of tensors from outside)."""
    def there(v: int) -> bool:
        r = ops[v].root
        return r < 0 or r in kept or r in (st.input_root, st.output_root)

    rebuilt = {v for k in range(st.lo, st.hi) for v in ops[k].saved if not there(v)}
    stack, found = list(rebuilt), set()
    while stack:
        for kind, w in ops[stack.pop()].args:
            if kind != "v" or not st.lo <= w < st.hi or w in rebuilt:
                continue
            if there(w):
                found.add(w)
            else:
                rebuilt.add(w)
                stack.append(w)
    return frozenset(found)


class _Out:
    """A kept output, as its array (keeping the tensor would make a cycle through its node)."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data


class _Placeholder:
    __slots__ = ("run", "value", "stage")
    recomputed = True  # what the saved-tensor report reads (NOTE [ Interpreters ])

    def __init__(self, run: _Run, value: int, stage: int) -> None:
        self.run = run
        self.value = value
        self.stage = stage


class _Run(Interpreter):
    """One planned forward and the backward that reads it (NOTE [ Plan runtime ])."""

    def __init__(self, layout: Layout, clock: Callable[[], float] | None = None) -> None:
        self.layout = layout
        self.clock = clock  # set: each replayed op's seconds go to replay_seconds
        self.replay_seconds: dict[int, float] = {}
        self.k = 0
        self.current: int | None = None
        self.specs: list[tuple] = []
        self.params: list[dict] = []
        self.env: dict[int, Tensor] = {}
        self.cache: dict[int, Tensor] = {}
        self.uses: dict[int, int] = {}
        self.pos = 0

    # -- forward
    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        ops = self.layout.ops
        k = self.k
        if k >= len(ops) or ops[k].name != prim.name:
            planned = f"{ops[k].name}" if k < len(ops) else "no more ops"
            raise PlanError(
                f"plan: op {k} of this forward is {prim.name}, where the planned forward ran "
                f"{planned}; the model must run the same ops as when it was planned (same "
                "input shapes, no data-dependent control flow): plan it again for these inputs"
            )
        spec = []
        for a, (kind, v) in zip(args, ops[k].args):
            spec.append(("v", v) if kind == "v" else ("x", a))
        self.specs.append(tuple(spec))
        self.params.append(prim.own_params(params) if prim.array_params else params)
        self.current = k
        try:
            out = call_next(prim, args, params)
        finally:
            self.current = None
        self.k += 1
        if tuple(out.shape) != ops[k].shape:
            raise PlanError(
                f"plan: op {k} ({prim.name}) made shape {tuple(out.shape)}, planned "
                f"{ops[k].shape}; plan the model again for inputs of these shapes"
            )
        if k in self.layout.hold_forward:
            self.env[k] = out
        return out

    def pack(self, t: Tensor, op: Any, index: int) -> Any:
        k = self.current
        if k is None or op is None:
            return t
        if index >= 0:
            kind, v = self.layout.ops[k].args[index]
            if kind != "v":
                return t
        else:
            v = k
        layout = self.layout
        stage = layout.stage_of[k]
        if layout.keeps(k, v, layout.mode[stage]):
            return _Out(t._data) if index < 0 else t
        self.uses[v] = self.uses.get(v, 0) + 1
        return _Placeholder(self, v, stage)

    def finish(self) -> None:
        if self.k != len(self.layout.ops):
            raise PlanError(
                f"plan: this forward ran {self.k} ops, the planned one {len(self.layout.ops)}; "
                "plan the model again for these inputs"
            )

    # -- backward
    def get(self, p: _Placeholder) -> Tensor:
        v = p.value
        self._advance(p.stage)  # also frees what the stages after p.stage held
        if v not in self.cache:
            t = self._rebuild(v, p.stage)
            if self.uses.get(v, 0) <= 0:  # a second backward (retain_graph): made again
                return t
        t = self.cache[v]
        left = self.uses[v] = self.uses[v] - 1
        if left <= 0:
            del self.cache[v]
        return t

    def _advance(self, stage: int) -> None:
        actions = self.layout.backward
        while self.pos < len(actions):
            a = actions[self.pos]
            if a[0] == "bwd" and a[1] == stage:
                for v in self.layout.exports[stage]:  # the stages after it are done
                    self.env.pop(v, None)
                return
            self.pos += 1
            if a[0] == "fwd":
                self._replay_stage(a[1], a[2])
            elif a[0] == "drop":
                for v in self.layout.imports[a[1]]:
                    self.env.pop(v, None)
            else:
                self._release(a[1], self.pos - 1)

    def _release(self, j: int, at: int) -> None:
        """Stage j's backward (action ``at`` of the backward part) is over: free its input,
        its output and what it kept (and the cached inputs ``Layout.remade_after`` names)."""
        layout = self.layout
        for v in layout.imports[j]:
            self.env.pop(v, None)
        for v in layout.remade_after.get(at, ()):
            self.cache.pop(v, None)
        st = layout.stages[j]
        for v in range(st.lo, st.hi):
            self.env.pop(v, None)

    def _replay_stage(self, j: int, mode: int | None) -> None:
        layout = self.layout
        st = layout.stages[j]
        local: dict[int, Tensor] = {}
        last = layout.last_use[j]
        for k in range(st.lo, st.hi):
            t = self._value(k, local)
            if k in layout.exports[j]:
                self.env[k] = t
            if mode is not None:
                if self.uses.get(k, 0) > 0 and layout.keeps(k, k, mode):
                    self.cache[k] = t
                if k in layout.sources(j, mode):
                    self.env[k] = t
            for kind, v in layout.ops[k].args:  # what eager code would have dropped by now
                if kind == "v" and last.get(v, -1) <= k:
                    local.pop(v, None)
        if mode is None:
            return
        for v in layout.imports[j]:
            if self.uses.get(v, 0) > 0 and v not in self.cache:
                self.cache[v] = self._value(v, local)

    def _rebuild(self, v: int, stage: int) -> Tensor:
        local: dict[int, Tensor] = {}
        made = self._value(v, local)
        for w, t in local.items():  # what else of the stage backward will read
            if self.uses.get(w, 0) > 0 and w not in self.cache:
                self.cache[w] = t
        return made

    def _lookup(self, v: int, local: dict[int, Tensor]) -> Tensor | None:
        for store in (local, self.cache, self.env):
            t = store.get(v)
            if t is not None:
                return t
        return None

    def _value(self, v: int, local: dict[int, Tensor]) -> Tensor:
        """Value ``v``, replaying the ops that make it from what is held (into ``local``)."""
        found = self._lookup(v, local)
        if found is not None:
            return found
        stack = [(v, False)]
        while stack:  # iterative: a rebuild may reach far back
            u, ready = stack.pop()
            if self._lookup(u, local) is not None:
                continue
            if not ready:
                stack.append((u, True))
                stack.extend((w, False) for kind, w in self.specs[u]
                             if kind == "v" and self._lookup(w, local) is None)
                continue
            start = self.clock() if self.clock is not None else 0.0
            args = [self._lookup(x, local) if kind == "v" else x for kind, x in self.specs[u]]
            with no_grad():
                local[u] = apply_op(self.layout.ops[u].prim, tuple(args), self.params[u])
            if self.clock is not None:
                self.replay_seconds[u] = self.replay_seconds.get(u, 0.0) + self.clock() - start
        return local[v]


def _unpack(packed: Any) -> Tensor:
    if isinstance(packed, _Placeholder):
        return packed.run.get(packed)
    if isinstance(packed, _Out):
        return wrap(packed.data)
    return packed


def planned(layout: Layout, function: Callable[..., Any],
            timings: list[dict[int, float]] | None = None,
            clock: Callable[[], float] | None = None) -> Callable[..., Any]:
    """``function`` run as a planned forward (NOTE [ Plan runtime ]); in no-grad mode it runs
    as it is. With ``timings`` (and ``clock``), each call appends the dict into which its
    backward puts the ``clock`` seconds of every op it replays (what the profile calibrates
    the cost model's recompute times with)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not state.grad_enabled:
            return function(*args, **kwargs)
        r = _Run(layout, clock if timings is not None else None)
        if timings is not None:
            timings.append(r.replay_seconds)
        with saved_tensors_hooks_with_op(r.pack, _unpack), interpreters.push(r):
            out = function(*args, **kwargs)
        r.finish()
        return out

    return run


class PlanHandle:
    """What ``Plan.apply(model)`` returns: ``remove()`` (or leaving its ``with`` block) gives
    the model back its own forward.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import plan
        >>> model = mg.nn.Sequential(mg.nn.Linear(4, 4), mg.nn.Tanh(), mg.nn.Linear(4, 1))
        >>> x = mg.randn(8, 4)
        >>> with plan(model, x, repeats=1).apply(model):
        ...     model(x).sum().backward()
        >>> "forward" in vars(model)
        False
    """

    def __init__(self, model: Any, layout: Layout) -> None:
        if "forward" in vars(model):
            raise PlanError(
                f"Plan.apply: this {type(model).__name__} already has a forward of its own "
                "(a plan applied and not removed?); call remove() on that handle first"
            )
        self.model = model
        object.__setattr__(model, "forward", planned(layout, type(model).forward.__get__(model)))

    def remove(self) -> None:
        """Give the model back its own forward (a second call does nothing)."""
        vars(self.model).pop("forward", None)

    def __enter__(self) -> PlanHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()
