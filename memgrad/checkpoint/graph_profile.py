"""Profile one forward of any model or function, op by op, for the graph planner.

NOTE [ Graph profile ]
``profile_graph`` runs the forward (and one plain step, for its time) several times, warm,
under an interpreter that numbers the primitive calls. Per op it records the primitive, its
arguments (an earlier op's value, an outside tensor or a constant), its result's buffer (a
view shares its base's), the values its node saves for backward, its median time, the bytes
alive after it and the most alive while it ran, and the module path it ran in. Values are
numbered by the op that makes them. The op sequence is then cut into a chain of stages at
the articulation points: a cut before op ``c`` is allowed when every buffer that ops from
``c`` on read and that was made before ``c`` is one buffer (the stage input; a chain of
residual blocks cuts between blocks, a plain MLP between any two ops). A model with no such
point is one stage. Each stage's record (``StageInfo``) is what the solver reads; the op
records are what the runtime replays (NOTE [ Plan runtime ] in graph_runtime.py).

NOTE [ Step time ]
A planned step costs the plain step, plus what the plan runtime adds to every step (the
interpreter and the saved-tensor hooks on each op of the forward, the placeholders, the
schedule's bookkeeping in backward), plus the ops it replays. An op replayed in backward
does not take its forward time: it runs under no-grad (no node is made), through the
runtime, between other ops' VJPs, with other values in the caches. So the profile times
the replays where they happen: it runs steps under a calibration plan that replays every
op once (each stage but the last runs forward keeping nothing and is replayed keeping all
before its backward; the last keeps nothing and rebuilds what its backward reads), timing
each replayed op, in pairs with plain steps. Per op, ``recompute_seconds`` is the mean of
its replay times (a step takes the sum of its ops' times, slow runs included; an op the
calibration does not replay gets its forward time scaled by the ratio of replay to forward
time of those it does); ``overhead_seconds`` is the median over the pairs of what the
calibration step took beyond the plain step and its replays. The cost model's recompute
time is the sum of the ``recompute_seconds`` of what a schedule replays, and a plan's
predicted step time is the plain step's plus the overhead plus that.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import enable_grad
from memgrad.checkpoint.graph_runtime import Layout, planned
from memgrad.errors import PlanError
from memgrad.interpreters import Interpreter, push
from memgrad.memory import allocated_bytes, buffer_of, peak_bytes, reset_peak, track
from memgrad.records import gradient_bytes
from memgrad.tensor import Tensor

__all__ = ["OpRecord", "StageInfo", "GraphProfile", "profile_graph", "MAX_STAGES"]

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
MAX_STAGES = 64  # adjacent stages are merged down to this many (the chain solver is cubic)
# gradient buffers of a stage's largest inner value alive at once in its backward, besides
# the gradients of its input and output: the one coming in and the one being made
INNER_GRADIENTS = 2


@dataclass
class OpRecord:
    """One primitive call of the profiled forward. ``args`` holds per argument ``("v", j)``
    for the value of op ``j``, ``("x", None)`` for a tensor from outside (a parameter, an
    input, a tensor made without an op) or ``("c", value)`` for a constant."""

    index: int
    name: str
    prim: Any = field(repr=False)
    args: tuple
    params: dict = field(repr=False)
    nbytes: int  # bytes of the buffer the result owns (0 for a view)
    root: int  # the op whose buffer the result is on (itself, unless a view)
    saved: list[int]  # values (op numbers) its node saves for backward
    seconds: float = 0.0
    level: int = 0  # bytes alive after it, above the forward's start
    peak: int = 0  # most bytes alive while it ran, above the forward's start
    path: str = ""
    float_out: bool = True
    shape: tuple = ()
    bwd_before: int = -1  # bytes alive when its node's backward began (-1: not seen)
    bwd_peak: int = 0  # most alive from then until the next node that unpacked
    # parameters it reads, with the bytes at a time its VJP adds into an existing .grad
    leaves: list[tuple[Any, int | None]] = field(default_factory=list, repr=False)
    # its time when the plan runtime replays it in backward (NOTE [ Step time ])
    recompute_seconds: float = 0.0


@dataclass
class StageInfo:
    """One stage of the chain: ops ``[lo, hi)``; its input and output buffers (op numbers of
    their roots, None for none from inside); the buffers its nodes save (root -> bytes); its
    forward time, its transients, and the parameter gradient bytes its backward allocates."""

    lo: int
    hi: int
    input_root: int | None
    input_bytes: int
    output_root: int | None
    output_bytes: int
    saved: dict[int, int]
    seconds: float
    fwd_transient: int
    bwd_transient: int
    grads: int
    paths: list[str] = field(default_factory=list)
    recompute_seconds: float = 0.0  # its ops' replay time in backward (NOTE [ Step time ])
    bwd_peak_op: int = -1  # the op whose node ran at the peak of its plain backward

    @property
    def internal(self) -> dict[int, int]:
        """Saved buffers other than the stage's input and output."""
        return {r: b for r, b in self.saved.items()
                if r != self.input_root and r != self.output_root}


@dataclass
class GraphProfile:
    """The profile of one forward: its ops, its chain of stages, and the step's figures."""

    ops: list[OpRecord]
    stages: list[StageInfo]
    outputs: list[int]
    step_seconds: float
    forward_seconds: float
    tail_bytes: int  # held by the loss that follows the model while backward starts
    plain_peak: int  # measured peak of one plain step, above its start
    # the most bytes alive while the loss's own VJPs ran, above the level before the loss's
    # forward (the model's output counted there): what the loss saved, the gradient of the
    # output it makes and its VJPs' transients (the two products of a square's backward)
    tail_bwd_bytes: int = 0
    # what running a step under a plan adds besides the replays (NOTE [ Step time ])
    overhead_seconds: float = 0.0
    clock: str = "wall"  # what the times are: "wall" (perf_counter) or "cpu" (process_time)
    # bytes of the buffers of the outputs' gradients that the loss's backward made (None:
    # the outputs' own bytes); a sum's gradient is a broadcast view of one number
    out_grad_bytes: int | None = None

    def value_bytes(self, v: int) -> int:
        return self.ops[self.ops[v].root].nbytes


class _Recorder(Interpreter):
    def __init__(self, paths: list[str], clock: Callable[[], float]) -> None:
        self.ops: list[OpRecord] = []
        self.ids: dict[int, tuple[Tensor, int]] = {}  # id(result) -> (result, op number)
        self.current: OpRecord | None = None
        self.current_args: set[int] = set()
        self.paths = paths
        self.clock = clock
        self.times: list[float] = []
        self.start = allocated_bytes()

    def value(self, t: Any) -> int | None:
        known = self.ids.get(id(t))
        return known[1] if known is not None and known[0] is t else None

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        if prim.inplace:
            raise PlanError(
                f"plan: the forward changes a tensor in place ({prim.name} at "
                f"{self.paths[-1] or 'the top level'}); the planner recomputes values from "
                "the ops that made them, so it needs out-of-place ops: write "
                f"x = x.{prim.name[:-1]}(...) instead"
            )
        spec = []
        leaves = []
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                v = self.value(a)
                spec.append(("x", None) if v is None else ("v", v))
                if a.requires_grad and a.grad_fn is None:
                    sunk = i in prim.accumulates
                    leaves.append((a, prim.sink_block_bytes if sunk else None))
            else:
                spec.append(("c", a))
        k = len(self.ops)
        rec = OpRecord(k, prim.name, prim, tuple(spec), dict(params), 0, k, [],
                       path=self.paths[-1], leaves=leaves)
        self.current = rec
        self.current_args = {id(a) for a in args}
        reset_peak()
        t0 = self.clock()
        out = call_next(prim, args, params)
        self.times.append(self.clock() - t0)
        self.current = None
        rec.peak = peak_bytes() - self.start
        rec.level = allocated_bytes() - self.start
        rec.float_out = out.dtype.kind == "f"
        rec.shape = tuple(out.shape)
        base = buffer_of(out._data)
        first = args[0] if args and isinstance(args[0], Tensor) else None
        if first is not None and np.may_share_memory(out._data, first._data):
            v = self.value(first)
            rec.root = self.ops[v].root if v is not None else -1
        else:
            rec.nbytes = base.nbytes
        self.ids[id(out)] = (out, k)
        self.ops.append(rec)
        return out

    def saved(self, t: Any, op: Any, packed: Any) -> None:
        rec = self.current
        if rec is None:
            return
        v = self.value(t)
        if v is None and id(t) not in self.current_args:
            v = rec.index  # the op's own output, not yet numbered
        if v is not None and v not in rec.saved:
            rec.saved.append(v)


def _module_paths(model: Any, paths: list[str]) -> list[Any]:
    handles = []
    named = getattr(model, "named_modules", None)
    if not callable(named):
        return handles
    for name, m in named():
        if not name:
            continue

        def pre(mod: Any, args: Any, name: str = name) -> None:
            paths.append(name)

        def post(mod: Any, args: Any, out: Any) -> None:
            paths.pop()

        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    return handles


def _outputs(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _outputs(r)]
    if isinstance(result, dict):
        return [t for r in result.values() for t in _outputs(r)]
    return []


def _record(fn: Callable, inputs: tuple, clock: Callable[[], float]
            ) -> tuple[_Recorder, Any]:
    paths = [""]
    handles = _module_paths(fn, paths)
    try:
        rec = _Recorder(paths, clock)
        with enable_grad(), push(rec):
            result = fn(*inputs)
    finally:
        for h in handles:
            h.remove()
    return rec, result


class _Grads:
    """The parameters' gradients as ``profile_graph`` found them: each step starts a
    parameter's gradient cleared to None (``cleared``, or, when ``cleared`` is None, where it
    was None) or zeroed in place, and ``restore`` puts them back as they were."""

    def __init__(self, cleared: bool | None) -> None:
        self.cleared = cleared
        self.found: dict[int, tuple[Tensor, Tensor | None, np.ndarray | None]] = {}

    def note(self, leaves: list[Tensor]) -> None:
        for p in leaves:
            if id(p) not in self.found:
                g = p.grad
                self.found[id(p)] = (p, g, None if g is None else g.numpy().copy())

    def clears(self, p: Tensor) -> bool:
        if self.cleared is not None:
            return self.cleared
        entry = self.found.get(id(p))
        return entry is None or entry[1] is None

    def start(self, leaves: list[Tensor]) -> None:
        for p in leaves:
            if p.grad is None or self.clears(p):
                p.grad = None
            else:
                p.grad.numpy()[...] = 0

    def restore(self) -> None:
        for p, g, data in self.found.values():
            p.grad = g
            if g is not None:
                g.numpy()[...] = data


def _step(fn: Callable, inputs: tuple, loss_fn: Callable | None, grads: _Grads
          ) -> Callable[[], None]:
    leaves: list[Any] = []

    def step() -> None:
        grads.start(leaves)
        with enable_grad():
            out = fn(*inputs)
            loss = loss_fn(out) if loss_fn is not None else _default_loss(out)
            if not leaves:
                leaves.extend(_leaves(loss))
                grads.note(leaves)  # before any backward of the profile
                grads.start(leaves)
            loss.backward()

    return step


def _leaves(loss: Tensor) -> list[Tensor]:
    """The tensors requiring grad that ``loss`` was made from (the parameters)."""
    from memgrad.autograd.graph import AccumulateGrad

    found, seen = [], set()
    stack = [loss.grad_fn] if loss.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.__class__ is AccumulateGrad:
            found.append(node.variable)
            continue
        stack.extend(child for child in node._inputs[0::3] if child is not None)
    return found


def _default_loss(out: Any) -> Tensor:
    outs = [t for t in _outputs(out) if t.requires_grad]
    if not outs:
        raise PlanError(
            "plan: the model's output does not require grad, so there is no backward to plan; "
            "make the model use parameters (requires_grad=True) or pass loss_fn"
        )
    total = outs[0].sum()
    for t in outs[1:]:
        total = total + t.sum()
    return total


def profile_graph(
    fn: Callable, inputs: tuple, loss_fn: Callable | None = None, repeats: int = 3,
    cleared_grads: bool | None = None, clock: str = "wall",
) -> GraphProfile:
    """Profile ``fn(*inputs)`` (NOTE [ Graph profile ]): ``repeats`` warm forwards timed op by
    op (medians), one plain step measured once under the tracker for its peak, and
    ``repeats`` pairs of a plain step and a step under a plan that replays every op once,
    which time the step, the ops' replays and the plan runtime's overhead (NOTE [ Step time
    ]). The step's loss is ``loss_fn(output)``, or the sum of the outputs. Steps start from
    the parameters' gradients as they were found: one that was None is set to None
    (backward then allocates it, and the plan counts it), one that existed is zeroed in
    place; ``cleared_grads`` True or False sets every one so instead. The gradients, and a
    module's buffers (running statistics), are left as they were found. ``clock`` is what the times
    are: ``"wall"`` (``time.perf_counter``) or ``"cpu"`` (``time.process_time``, the CPU
    time of the process's threads, which leaves out other processes on a shared machine).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint.graph_profile import profile_graph
        >>> model = mg.nn.Sequential(mg.nn.Linear(8, 8), mg.nn.ReLU(), mg.nn.Linear(8, 2))
        >>> p = profile_graph(model, (mg.randn(4, 8),), repeats=1, clock="cpu")
        >>> [op.name for op in p.ops], len(p.stages), p.clock
        (['linear', 'relu', 'linear'], 3, 'cpu')
    """
    if clock not in CLOCKS:
        raise ValueError(f'profile_graph: clock must be "wall" or "cpu", got {clock!r}')
    tick = CLOCKS[clock]
    grads = _Grads(cleared_grads)
    # a module's buffers (BatchNorm's running statistics) as they were: the profile's
    # forwards run in the module's mode and would move them
    buffers = [(b, b.numpy().copy()) for b in getattr(fn, "buffers", tuple)()]
    try:
        return _profile(fn, inputs, loss_fn, repeats, clock, tick, grads)
    finally:
        grads.restore()
        for b, data in buffers:
            b.numpy()[...] = data


def _profile(fn: Callable, inputs: tuple, loss_fn: Callable | None, repeats: int, clock: str,
             tick: Callable[[], float], grads: _Grads) -> GraphProfile:
    step = _step(fn, inputs, loss_fn, grads)
    step()  # warm: compiled kernels, and .grad made as training makes them
    with track():
        rec, result = _record(fn, inputs, tick)
    times = [rec.times]
    for _ in range(max(0, repeats - 1)):
        with track():
            again, _ = _record(fn, inputs, tick)
        if [o.name for o in again.ops] != [o.name for o in rec.ops]:
            raise PlanError(
                "plan: two runs of the forward on the same inputs ran different ops; the "
                "planner needs a forward whose ops do not depend on the values (no "
                "data-dependent control flow)"
            )
        times.append(again.times)
    ops = rec.ops
    if not ops:
        raise PlanError("plan: the forward ran no memgrad ops; there is nothing to plan")
    for k, op in enumerate(ops):
        op.seconds = statistics.median(t[k] for t in times)
    outputs = [v for v in (rec.value(t) for t in _outputs(result)) if v is not None]
    if not outputs:
        raise PlanError(
            "plan: the model returned no tensor computed by memgrad ops from its inputs; "
            "return the tensors the forward computes"
        )
    tail, out_grad = _loss_bytes(result, loss_fn)
    del result, rec
    with track() as t:
        step()
    tail_bwd = _measure_backward(fn, inputs, loss_fn, ops)
    _clear_grads(ops, grads)  # before the stages: they count the gradients made
    stages = _stages(ops, outputs)
    _set_backward_transients(stages, ops)
    profile = GraphProfile(ops, stages, outputs, 0.0, sum(o.seconds for o in ops), tail,
                           t.peak_above_start, tail_bwd, clock=clock, out_grad_bytes=out_grad)
    replaying, timings = _replaying(profile, fn, tick)
    _time_steps(profile, step, _step(replaying, inputs, loss_fn, grads), timings, tick,
                repeats)
    return profile


def _clear_grads(ops: list[OpRecord], grads: _Grads) -> None:
    for op in ops:
        for p, _ in op.leaves:
            if grads.clears(p):
                p.grad = None


def _replaying(profile: GraphProfile, fn: Callable, clock: Callable[[], float]
               ) -> tuple[Callable, list[dict[int, float]]]:
    """``fn`` under the calibration plan (NOTE [ Step time ]), and the list that gets, per
    call, the replay seconds of each op."""
    n = len(profile.stages)
    variants = [[frozenset(st.saved), frozenset()] for st in profile.stages]
    actions: list[tuple] = [("fwd", j, None) for j in range(n - 1)]
    actions += [("fwd", n - 1, 1), ("bwd", n - 1)]
    for j in range(n - 2, -1, -1):
        actions += [("fwd", j, 0), ("bwd", j)]
    timings: list[dict[int, float]] = []
    return planned(Layout(profile, variants, actions), fn, timings, clock), timings


def _time_steps(profile: GraphProfile, plain: Callable[[], None], replaying: Callable[[], None],
                timings: list[dict[int, float]], clock: Callable[[], float], repeats: int
                ) -> None:
    """Time plain steps and calibration steps in pairs (NOTE [ Step time ]): the plain
    step's median, each op's replay seconds (mean), and the runtime's overhead (the
    median over pairs of what the calibration step took beyond the plain step and its
    replays, at least 0)."""
    replaying()  # warm
    plain_s, overhead = [], []
    for _ in range(max(1, repeats)):
        t0 = clock()
        plain()
        t1 = clock()
        replaying()
        t2 = clock()
        plain_s.append(t1 - t0)
        overhead.append(t2 - t1 - (t1 - t0) - sum(timings[-1].values()))
    profile.step_seconds = statistics.median(plain_s)
    profile.overhead_seconds = max(0.0, statistics.median(overhead))
    runs = timings[1:]  # the mean: a step takes the sum of its ops' times, tails included
    measured = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]} if runs else {}
    forward = sum(profile.ops[k].seconds for k in measured)
    ratio = sum(measured.values()) / forward if forward > 0 else 1.0
    for k, op in enumerate(profile.ops):
        op.recompute_seconds = measured.get(k, op.seconds * ratio)
    for st in profile.stages:
        st.recompute_seconds = sum(o.recompute_seconds for o in profile.ops[st.lo:st.hi])


class _Numbering(Interpreter):
    """Numbers the forward's ops, so that the saved-tensor hooks know whose save it is."""

    def __init__(self) -> None:
        self.k = 0
        self.current = -1

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        self.current = self.k
        self.k += 1
        try:
            return call_next(prim, args, params)
        finally:
            self.current = -1


class _BackwardMeter(Interpreter):
    """In backward: the most bytes alive while each stage's VJPs run, above the level when
    its first node unpacked what it saved."""

    def __init__(self, stage_of: list[int], n: int) -> None:
        self.stage_of = stage_of
        self.stage = -1
        self.before = [-1] * n
        self.peak = [0] * n
        self.in_loss = True  # no node of the model has unpacked yet: the loss's VJPs run
        self.loss_peak = 0

    def enter(self, k: int) -> None:
        j = self.stage_of[k] if 0 <= k < len(self.stage_of) else -1
        if j >= 0:
            self.in_loss = False
        if j >= 0 and self.before[j] < 0:
            self.before[j] = allocated_bytes()
        self.stage = j

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        reset_peak()
        out = call_next(prim, args, params)
        if self.in_loss:
            self.loss_peak = max(self.loss_peak, peak_bytes())
        elif self.stage >= 0:
            self.peak[self.stage] = max(self.peak[self.stage], peak_bytes())
        return out


def _measure_backward(fn: Callable, inputs: tuple, loss_fn: Callable | None,
                      ops: list[OpRecord]) -> int:
    """Per op, from one plain step: the level when its node first unpacked what it saved,
    and the most bytes alive while VJPs ran from then until the next such node. Returns
    the most bytes alive while the loss's VJPs ran (before any node of the model unpacked),
    above the level before the loss's forward."""
    from memgrad.autograd.graph import saved_tensors_hooks_with_op

    numbering = _Numbering()
    meter = _BackwardMeter(list(range(len(ops))), len(ops))

    def pack(t: Tensor, op: Any, index: int) -> Any:
        return (numbering.current, t._data if index < 0 else t, index < 0)

    def unpack(packed: Any) -> Tensor:
        k, t, is_out = packed
        meter.enter(k)
        return Tensor(t) if is_out else t

    with track(), enable_grad():
        with saved_tensors_hooks_with_op(pack, unpack):
            with push(numbering):
                out = fn(*inputs)
            before_loss = allocated_bytes()
            loss = loss_fn(out) if loss_fn is not None else _default_loss(out)
        del out
        with push(meter):
            loss.backward()
    for k, op in enumerate(ops):
        op.bwd_before, op.bwd_peak = meter.before[k], meter.peak[k]
    return max(0, meter.loss_peak - before_loss)


def _set_backward_transients(stages: list[StageInfo], ops: list[OpRecord]) -> None:
    """Each stage's backward transient: the most bytes alive in its backward less the level
    it started at and the gradient of its input (the formula where nothing was measured)."""
    for j, st in enumerate(stages):
        measured = [k for k in range(st.lo, st.hi) if ops[k].bwd_before >= 0]
        if not measured:
            continue
        before = ops[max(measured)].bwd_before  # the stage's first node in backward
        st.bwd_peak_op = max(measured, key=lambda k: ops[k].bwd_peak)
        peak = ops[st.bwd_peak_op].bwd_peak
        grad_in = st.input_bytes if j > 0 else 0
        st.bwd_transient = max(0, peak - before - grad_in)


def _loss_bytes(result: Any, loss_fn: Callable | None) -> tuple[int, int | None]:
    """From the loss run once on detached copies of the model's outputs: the bytes it holds
    while backward starts (its saved values and transients; 0 for the default sum), and the
    bytes of the buffers of the gradients its backward makes for the outputs (a sum's is a
    broadcast view of one number; None where no output requires grad)."""
    from memgrad.autograd.engine import grad

    def detached(r: Any) -> Any:
        if isinstance(r, Tensor):
            return r.detach().requires_grad_() if r.requires_grad else r
        if isinstance(r, (tuple, list)):
            return type(r)(detached(x) for x in r)
        if isinstance(r, dict):
            return {k: detached(x) for k, x in r.items()}
        return r

    copy = detached(result)
    leaves = [t for t in _outputs(copy) if t.requires_grad]
    with track() as t, enable_grad():
        loss = loss_fn(copy) if loss_fn is not None else (_default_loss(copy) if leaves
                                                          else None)
    tail = t.peak_bytes - t.start_bytes if loss_fn is not None else 0
    if not leaves:
        return tail, None
    grads = grad(loss, leaves, allow_unused=True)
    return tail, sum(buffer_of(g._data).nbytes for g in grads if g is not None)


def _last_uses(ops: list[OpRecord], outputs: list[int]) -> dict[int, int]:
    last: dict[int, int] = {}
    for op in ops:
        for kind, v in op.args:
            if kind == "v":
                r = ops[v].root
                last[r] = max(last.get(r, -1), op.index)
                last[v] = max(last.get(v, -1), op.index)
    for v in outputs:
        last[v] = last[ops[v].root] = len(ops)
    return last


def _cuts(ops: list[OpRecord], outputs: list[int]) -> list[int]:
    """The positions ``c`` (0 < c < len(ops)) before which the chain may be cut: one buffer,
    or none, made before ``c`` is read from ``c`` on."""
    last = _last_uses(ops, outputs)
    n = len(ops)
    # live[c]: roots made before c and read at or after c, by a sweep over the ops
    cuts = []
    live: set[int] = set()
    for c in range(1, n):
        r = ops[c - 1].root
        if r >= 0 and last.get(r, -1) >= c:
            live.add(r)
        live = {x for x in live if last.get(x, -1) >= c}
        if len(live) <= 1 and ops[c - 1].root >= 0:
            cuts.append(c)
    return cuts


def _stages(ops: list[OpRecord], outputs: list[int]) -> list[StageInfo]:
    cuts = _cuts(ops, outputs)
    bounds = [0] + cuts + [len(ops)]
    while len(bounds) - 1 > MAX_STAGES:  # merge the adjacent pair that is quickest together
        sec = [sum(o.seconds for o in ops[a:b]) for a, b in zip(bounds, bounds[1:])]
        i = min(range(len(sec) - 1), key=lambda i: sec[i] + sec[i + 1])
        del bounds[i + 1]
    last = _last_uses(ops, outputs)
    return [_stage(ops, lo, hi, last) for lo, hi in zip(bounds, bounds[1:])]


def _crossing(ops: list[OpRecord], c: int, last: dict[int, int]) -> int | None:
    if c == 0:
        return None
    roots = {ops[v].root for op in ops[c:] for kind, v in op.args
             if kind == "v" and ops[v].root >= 0 and ops[v].root < c}
    for v in range(c):
        if ops[v].root == v and last.get(v, -1) >= len(ops) and v < c:
            roots.add(v)
    roots = {r for r in roots if last.get(r, -1) >= c}
    return next(iter(roots)) if len(roots) == 1 else None


def _stage(ops: list[OpRecord], lo: int, hi: int, last: dict[int, int]) -> StageInfo:
    n = len(ops)
    inp = _crossing(ops, lo, last)
    out = _crossing(ops, hi, last) if hi < n else ops[hi - 1].root
    saved: dict[int, int] = {}
    for op in ops[lo:hi]:
        for v in op.saved:
            r = ops[v].root
            if r >= 0 and ops[r].nbytes and (lo <= r < hi or r == inp):
                saved[r] = ops[r].nbytes
    start_level = ops[lo - 1].level if lo else 0
    fwd_peak = max(o.peak for o in ops[lo:hi]) - start_level
    in_bytes = ops[inp].nbytes if inp is not None and inp >= 0 else 0
    out_bytes = ops[out].nbytes if out is not None and out >= 0 else 0
    # gradients inside the stage besides those of its input and output: the one coming in
    # and the one being made (NOTE [ Graph profile ])
    biggest = max((o.nbytes for o in ops[lo:hi - 1]), default=0)
    grads, grad_transient = gradient_bytes([u for o in ops[lo:hi] for u in o.leaves])
    paths = list(dict.fromkeys(o.path for o in ops[lo:hi]))
    return StageInfo(lo, hi, inp, in_bytes, out, out_bytes, saved,
                     sum(o.seconds for o in ops[lo:hi]), max(0, fwd_peak - out_bytes),
                     INNER_GRADIENTS * biggest + grad_transient, grads, paths)

