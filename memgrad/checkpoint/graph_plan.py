"""``plan``: choose, for any model or function, which values its backward reads are kept and
which are recomputed (and how often, from where), so that a training step fits a memory
budget with the least recomputation; ``Plan`` runs that choice in eager mode.

The pieces: ``graph_profile`` (one forward, op by op, cut into a chain of stages),
``solver`` (keep-or-recompute inside a stage, the multi-level schedule of the chain) and
``graph_runtime`` (the model's own forward under hooks that follow the schedule).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memgrad.checkpoint.graph_profile import GraphProfile, StageInfo, profile_graph
from memgrad.checkpoint.graph_runtime import Layout, PlanHandle, planned, rebuild_sources
from memgrad.checkpoint.selective import IndexChooser, contexts_of
from memgrad.checkpoint.solver import (
    SLOTS,
    ChainStage,
    KeepProblem,
    keep_closure,
    keep_frontier,
    plain_schedule,
    simulate,
    solve_chain,
)
from memgrad.errors import PlanError

__all__ = ["Plan", "PlanRow", "graph_plan", "plan_from_graph_profile"]


@dataclass
class PlanRow:
    """What a plan does with the values of one module path: bytes kept from the forward,
    bytes recomputed in backward, and the seconds of those recomputations per step."""

    path: str
    kept_bytes: int = 0
    recomputed_bytes: int = 0
    recompute_seconds: float = 0.0
    kept: int = 0
    recomputed: int = 0


@dataclass
class Plan:
    """A plan for one model: per stage of its chain, the values kept and the schedule of
    recomputation, with its predictions. ``apply(model)`` runs it (a handle and a context
    manager), ``wrap(fn)`` does the same for a function, ``keeps(i)`` is the per-op
    decision (is op i's output kept from the forward?)."""

    profile: GraphProfile = field(repr=False)
    chain: list[ChainStage] = field(repr=False)
    variants: list[list[frozenset[int]]] = field(repr=False)
    actions: list[tuple] = field(repr=False)
    predicted_peak: int
    predicted_extra_seconds: float
    predicted_step_seconds: float
    predicted_plain_peak: int
    budget_bytes: int | None = None
    predicted_overhead_seconds: float = 0.0
    frontier: list[tuple[int, float]] = field(default_factory=list, repr=False)
    _layout: Layout | None = field(default=None, repr=False)
    _kept_outputs: set[int] | None = field(default=None, repr=False)

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            self._layout = Layout(self.profile, self.variants, self.actions)
        return self._layout

    @property
    def stages(self) -> int:
        """The stages of the model's chain (the loss not counted)."""
        return len(self.profile.stages)

    @property
    def depth(self) -> int:
        """The most times any op's forward runs in one step (1: nothing recomputed): the
        runs of its stage, and one more where its stage's last run keeps a variant that
        rebuilds values."""
        runs = [0] * len(self.chain)
        for a in self.actions:
            if a[0] == "fwd":
                runs[a[1]] += 1
                if a[2] is not None and self.chain[a[1]].options[a[2]][1] > 0:
                    runs[a[1]] += 1
        return max(runs)

    def apply(self, model: Any) -> PlanHandle:
        """Run ``model``'s forward under this plan until the handle's ``remove()`` (or the
        end of its ``with`` block). The model's code is not changed: its forward is wrapped
        for this instance only.

        Example:
            >>> import memgrad as mg
            >>> from memgrad.checkpoint import plan
            >>> model = mg.nn.Sequential(mg.nn.Linear(4, 4), mg.nn.ReLU(), mg.nn.Linear(4, 1))
            >>> x = mg.randn(8, 4)
            >>> p = plan(model, x, repeats=1)
            >>> handle = p.apply(model)
            >>> model(x).sum().backward()
            >>> handle.remove()
        """
        if not callable(getattr(type(model), "forward", None)):
            raise TypeError(
                f"Plan.apply: model must be a Module (something with a forward method), got "
                f"{type(model).__name__}; for a function use Plan.wrap(fn)"
            )
        return PlanHandle(model, self.layout)

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (the planned function) running under this plan.

        Example:
            >>> import memgrad as mg
            >>> from memgrad.checkpoint import plan
            >>> w = mg.randn(4, 4, requires_grad=True)
            >>> f = lambda x: (x @ w).tanh() @ w
            >>> g = plan(f, mg.randn(2, 4), repeats=1).wrap(f)
            >>> g(mg.randn(2, 4)).sum().backward()
        """
        if not callable(fn):
            raise TypeError(f"Plan.wrap: fn must be callable, got {type(fn).__name__}")
        return planned(self.layout, fn)

    def keeps(self, index: int) -> bool:
        """Whether the output of op ``index`` of the planned forward is kept from the
        forward for its backward (False: rebuilt in backward, or not read by backward); the
        per-op decision a selective-checkpoint policy can be made of."""
        layout = self.layout
        if not 0 <= index < len(layout.ops):
            raise IndexError(f"Plan.keeps: op {index} out of range 0..{len(layout.ops) - 1}")
        if self._kept_outputs is None:
            self._kept_outputs = {v for k, op in enumerate(layout.ops) for v in op.saved
                                  if layout.keeps(k, v, layout.mode[layout.stage_of[k]])}
        return index in self._kept_outputs

    def __call__(self) -> tuple[Any, Any]:
        """The plan as a ``context_fn`` for ``checkpoint(model, x, context_fn=plan)``: a
        selective policy that keeps the outputs the plan keeps (``keeps``) and recomputes
        the rest, over the whole region at one level (``apply`` runs the full schedule,
        nested recomputation included).

        Example:
            >>> import memgrad as mg
            >>> from memgrad.checkpoint import checkpoint, plan
            >>> model = mg.nn.Sequential(mg.nn.Linear(8, 8), mg.nn.Tanh(), mg.nn.Linear(8, 8))
            >>> x = mg.randn(4, 8)
            >>> p = plan(model, x)
            >>> checkpoint(model, x, context_fn=p).sum().backward()
        """
        return contexts_of(IndexChooser(self.keeps, len(self.layout.ops)))

    def rows(self) -> list[PlanRow]:
        """Kept and recomputed bytes and recompute seconds per module path."""
        ops = self.profile.ops
        layout = self.layout
        replays = [0] * len(self.chain)
        for a in layout.backward:
            if a[0] == "fwd":
                replays[a[1]] += 1
        rows: dict[str, PlanRow] = {}
        for j, st in enumerate(self.profile.stages):
            problem, idx = stage_problem(self.profile, st)
            mode = layout.mode[j]
            last_mode = next((a[2] for a in reversed(self.actions)
                              if a[0] == "fwd" and a[1] == j), mode)
            kept_local = frozenset(i for i, v in enumerate(idx)
                                   if last_mode is not None and v in self.variants[j][last_mode])
            intra = keep_closure(problem, kept_local)
            read_roots = {ops[v].root for k in idx for v in ops[k].saved if ops[v].root >= 0}
            for k in idx:
                row = rows.setdefault(ops[k].path or "(top level)", PlanRow(ops[k].path))
                times = replays[j] + (1 if k - st.lo in intra else 0)
                row.recompute_seconds += times * ops[k].recompute_seconds
                if k in read_roots and ops[k].nbytes:
                    if layout.keeps(k, k, mode) if mode is not None else False:
                        row.kept_bytes += ops[k].nbytes
                        row.kept += 1
                    else:
                        row.recomputed_bytes += ops[k].nbytes
                        row.recomputed += 1
        return list(rows.values())

    def __str__(self) -> str:
        budget = "none" if self.budget_bytes is None else f"{self.budget_bytes:,} B"
        kept = sum(r.kept_bytes for r in self.rows())
        rec = sum(r.recomputed_bytes for r in self.rows())
        return (
            f"Plan: {len(self.profile.ops)} ops in {self.stages} stages, recomputation up to "
            f"{self.depth - 1} level(s) deep; {kept:,} B kept, {rec:,} B recomputed; "
            f"predicted peak {self.predicted_peak:,} B (budget {budget}; plain "
            f"{self.predicted_plain_peak:,} B); predicted recompute "
            f"{self.predicted_extra_seconds * 1e3:.1f} ms and runtime overhead "
            f"{self.predicted_overhead_seconds * 1e3:.1f} ms per step"
        )


def stage_problem(profile: GraphProfile, st: StageInfo) -> tuple[KeepProblem, list[int]]:
    """The keep-or-recompute problem of one stage, and the op numbers of its nodes."""
    ops = profile.ops
    idx = list(range(st.lo, st.hi))
    local = {v: i for i, v in enumerate(idx)}
    read = {v for k in idx for v in ops[k].saved}
    problem = KeepProblem(
        tuple(ops[v].recompute_seconds for v in idx),
        tuple(ops[v].nbytes if ops[v].root == v else 0 for v in idx),
        tuple(local.get(ops[v].root, -1) for v in idx),
        tuple(tuple(local[w] for kind, w in ops[v].args if kind == "v" and w in local)
              for v in idx),
        tuple(v in read for v in idx),
        frozenset(local[r] for r in (st.input_root, st.output_root) if r in local),
    )
    return problem, idx


def _pinned(ops: list, st: StageInfo, kept: frozenset[int]) -> int:
    """Bytes of the kept buffers that the runtime holds for the stage's rebuilds until its
    backward is over, and that the plain step freed before the peak of that backward
    (every node of the stage that saves them ran before the one at the peak)."""
    roots = {ops[v].root for v in rebuild_sources(ops, st, kept)}
    roots -= {-1, st.input_root, st.output_root}
    pinned = 0
    for r in roots:
        savers = [k for k in range(st.lo, st.hi) if any(ops[u].root == r for u in ops[k].saved)]
        if st.bwd_peak_op >= 0 and all(k > st.bwd_peak_op for k in savers):
            pinned += ops[r].nbytes
    return pinned


def _chain(profile: GraphProfile, method: str) -> tuple[list[ChainStage], list[list]]:
    ops = profile.ops
    chain, variants = [], []
    for j, st in enumerate(profile.stages):
        problem, idx = stage_problem(profile, st)
        frontier = keep_frontier(problem, method)
        full = frontier[0][1] if frontier else 0
        x_in = st.input_bytes if j > 0 else 0
        grad_in = x_in if j > 0 and st.input_root is not None and ops[st.input_root].float_out \
            else 0
        kept_sets = [frozenset(idx[i] for i in kept) for kept, _, _ in frontier]
        chain.append(ChainStage(
            x_in, st.output_bytes, grad_in, st.output_root in st.saved, full,
            tuple((nbytes, seconds) for _, nbytes, seconds in frontier) or ((0, 0.0),),
            st.recompute_seconds, st.fwd_transient, st.bwd_transient, st.grads,
            st.input_root is not None and st.input_root in st.saved,
            tuple(_pinned(ops, st, kept) for kept in kept_sets),
        ))
        variants.append(kept_sets or [frozenset()])
    # the loss, a last stage that is never recomputed: what it holds is there from the end
    # of the forward to the end of its backward, which makes the output's gradient (its
    # buffers as measured: a sum's is one number, broadcast); what its VJPs hold beyond both
    # (measured above the model's output) is its backward transient
    out = chain[-1].x_out
    tail = profile.tail_bytes
    grad = out if profile.out_grad_bytes is None else profile.out_grad_bytes
    chain.append(ChainStage(out, 0, grad, False, tail, ((tail, 0.0),), 0.0,
                            bwd_transient=max(0, profile.tail_bwd_bytes - tail - grad)))
    variants.append([frozenset()])
    return chain, variants


def plan_from_graph_profile(
    profile: GraphProfile, budget_bytes: int | None = None, method: str = "auto"
) -> Plan:
    """The plan for a measured ``profile`` (see ``plan``)."""
    chain, variants = _chain(profile, method)
    plain_peak = simulate(chain, plain_schedule(chain))[0]
    # room for the rounding up to slots, so that the plain schedule fits
    cap = int(max(plain_peak, budget_bytes or 0) * (1 + 16 / SLOTS)) + 64
    if budget_bytes is None:
        solution = solve_chain(chain, cap, least=True)
    else:
        solution = solve_chain(chain, budget_bytes)
        if solution is None:  # finer slots round less
            solution = solve_chain(chain, budget_bytes, slots=8 * SLOTS)
        if solution is None:
            least = solve_chain(chain, cap, least=True)
            assert least is not None  # the plain schedule fits its own peak
            if least.peak <= budget_bytes:  # a fit the rounding to slots hid
                solution = least
        if solution is None:
            raise PlanError(
                f"plan: no schedule fits a budget of {budget_bytes:,} bytes; the smallest "
                f"feasible budget for this model and input is "
                f"{least.peak:,} bytes (predicted peak above the step's "
                "starting level). Raise the budget, or shrink the batch."
            )
    assert solution is not None
    frontier = [] if solution.frontier is None else [
        (i * solution.slot, float(t) - sum(s.seconds for s in chain))
        for i, t in enumerate(solution.frontier) if t < float("inf")]
    return Plan(profile, chain, variants, solution.actions, solution.peak, solution.extra,
                profile.step_seconds + profile.overhead_seconds + solution.extra, plain_peak,
                budget_bytes, profile.overhead_seconds, frontier)


def graph_plan(
    model_or_fn: Callable[..., Any],
    *example_inputs: Any,
    budget_bytes: int | None = None,
    loss_fn: Callable[[Any], Any] | None = None,
    repeats: int = 3,
    method: str = "auto",
) -> Plan:
    """``plan`` for a model or function (see ``memgrad.checkpoint.plan``)."""
    profile = profile_graph(model_or_fn, example_inputs, loss_fn, repeats)
    return plan_from_graph_profile(profile, budget_bytes, method)
