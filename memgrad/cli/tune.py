"""``memgrad tune`` and ``memgrad plan``: measure a model's training step plainly, with equal
segment counts and with the planner's choice under memory budgets, and show the trade-off.

Example:
    >>> from memgrad.cli.workloads import load_workload
    >>> from memgrad.cli.sizes import parse_sizes
    >>> result = sweep(load_workload("mlp"), parse_sizes("50%", "the plain peak"), repeats=1)
    >>> all(c.grads_match for c in result.measured)
    True
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from memgrad.checkpoint import (
    Plan,
    SegmentPlan,
    StageProfile,
    plan_from_profile,
    predict,
    profile,
)
from memgrad.checkpoint.graph_plan import plan_from_graph_profile
from memgrad.checkpoint.graph_profile import GraphProfile, profile_graph
from memgrad.checkpoint.sequential import segment_bounds
from memgrad.cli.measure import (
    StepResult,
    accounting,
    compare_grads,
    measure_step,
    run_step,
    time_step,
)
from memgrad.cli.output import (
    CliError,
    Curve,
    Point,
    check_writable,
    console,
    first_line,
    plot_timelines,
    plot_tradeoff,
    require_matplotlib,
)
from memgrad.cli.sizes import (
    Size,
    SizeError,
    format_bytes,
    parse_size,
    parse_sizes,
    size_at_least,
)
from memgrad.cli.workloads import Workload, load_workload
from memgrad.errors import PlanError
from memgrad.memory import TimelineEntry

__all__ = [
    "Config",
    "TuneResult",
    "equal_counts",
    "sweep",
    "plain_step",
    "choose_plan",
    "choose_graph_plan",
    "graph_profile",
    "run_tune",
    "run_plan",
]

PERCENT_OF = "the plain step's peak"


@dataclass
class Config:
    """One configuration of a sweep and what was measured for it: the plain step, an equal
    segment count (``bounds``), or a graph plan under a budget (``plan``; None with
    ``smallest_feasible`` set when no schedule fits)."""

    name: str
    kind: str  # "plain", "equal" or "plan"
    bounds: list[tuple[int, int]] | None
    budget: str | None = None
    budget_bytes: int | None = None
    predicted_peak: int | None = None
    predicted_extra_seconds: float | None = None
    peak: int | None = None
    seconds: float | None = None
    grad_diff: float | None = None
    smallest_feasible: int | None = None
    timeline: list[TimelineEntry] = field(default_factory=list, repr=False)
    start_bytes: int = 0
    plan: Plan | None = field(default=None, repr=False)  # a graph plan's

    @property
    def key(self) -> tuple:
        """What two configurations that run alike share."""
        if self.plan is not None:
            return ("plan", tuple(self.plan.actions))
        return tuple(self.bounds or ())

    @property
    def measured(self) -> bool:
        """Whether the configuration ran (an infeasible plan does not)."""
        return self.peak is not None

    @property
    def feasible(self) -> bool:
        return self.bounds is not None or self.plan is not None

    @property
    def grads_match(self) -> bool:
        """Every parameter's gradient equals the plain run's, bit for bit."""
        return self.grad_diff == 0.0

    def to_json(self, plain_seconds: float) -> dict[str, Any]:
        """The configuration as plain JSON values (no timeline)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "segments": None if self.bounds is None else len(self.bounds),
            "bounds": self.bounds,
            "levels": None if self.plan is None else self.plan.depth - 1,
            "budget": self.budget,
            "budget_bytes": self.budget_bytes,
            "feasible": self.feasible,
            "smallest_feasible_bytes": self.smallest_feasible,
            "predicted_peak_bytes": self.predicted_peak,
            "predicted_extra_seconds": self.predicted_extra_seconds,
            "peak_bytes": self.peak,
            "seconds": self.seconds,
            "overhead": None if self.seconds is None else self.seconds / plain_seconds - 1,
            "grads_match": self.grads_match if self.measured else None,
            "max_grad_diff": self.grad_diff,
        }


@dataclass
class TuneResult:
    """A sweep of one model: its configurations (the plain run first), the budgets as
    ``(text, bytes)``, and the recommended configuration with the rule that chose it."""

    model: str
    title: str
    stages: int
    configs: list[Config]
    budgets: list[tuple[str, int]]
    recommended: Config
    rule: str
    frontier: list[tuple[int, float]] = field(default_factory=list)  # measured (peak, s)
    # the chain program's least predicted step time at each budget: (budget, s)
    predicted_frontier: list[tuple[int, float]] = field(default_factory=list)

    @property
    def plain(self) -> Config:
        """The plain (uncheckpointed) run, the reference of every comparison."""
        return self.configs[0]

    @property
    def measured(self) -> list[Config]:
        """The configurations that ran."""
        return [c for c in self.configs if c.measured]

    def to_json(self) -> dict[str, Any]:
        """The sweep as plain JSON values."""
        return {
            "model": self.model,
            "title": self.title,
            "stages": self.stages,
            "plain_peak_bytes": self.plain.peak,
            "plain_seconds": self.plain.seconds,
            "budgets": [{"budget": text, "bytes": n} for text, n in self.budgets],
            "configurations": [c.to_json(self.plain.seconds) for c in self.configs],
            "recommended": self.recommended.name,
            "rule": self.rule,
            "frontier": [{"peak_bytes": b, "seconds": t} for b, t in self.frontier],
        }


def equal_counts(n: int) -> list[int]:
    """The equal segment counts a sweep tries for ``n`` stages: 1, 2, 4, round(sqrt(n)) and
    ``n``, those that are valid, in increasing order.

    Example:
        >>> equal_counts(32), equal_counts(3)
        ([1, 2, 4, 6, 32], [1, 2, 3])
    """
    return sorted({k for k in (1, 2, 4, round(math.sqrt(n)), n) if 1 <= k <= n})


def plain_step(workload: Workload, in_place: bool = False) -> StepResult:
    """Measure the plain step, turning any failure of the user's model or loss into a
    ``CliError``; it also warms up compiled kernels before anything is timed.

    Example:
        >>> plain_step(load_workload("mlp")).peak > 0
        True
    """
    try:
        if in_place:  # a first step allocates the gradients that later steps zero in place
            run_step(workload.model, workload.input, workload.loss_fn, None)
        return measure_step(workload.model, workload.input, workload.loss_fn, None, in_place)
    except Exception as e:
        raise CliError(
            f"one training step of {workload.name} failed: {type(e).__name__}: {first_line(e)}; "
            "loss_fn(model(example_input)) must run and return a scalar Tensor"
        ) from None


def choose_plan(
    profiles: Sequence[StageProfile], budget: int, model: str, plain_peak: int
) -> SegmentPlan:
    """``plan_from_profile`` under ``budget``, with a ``CliError`` naming the smallest
    feasible budget when none fits.

    Example:
        >>> from memgrad.checkpoint import StageProfile
        >>> p = [StageProfile(100, 100, 0, 1.0)] * 4
        >>> choose_plan(p, 10**6, "toy", 1000).segments
        1
    """
    try:
        return plan_from_profile(profiles, budget)
    except PlanError:
        least = plan_from_profile(profiles).predicted_peak
        raise CliError(
            f"no segmentation of {model} fits a budget of {format_bytes(budget)} "
            f"({budget:,} bytes); the smallest feasible budget is {format_bytes(least)} "
            f"({least:,} bytes, {100 * least / plain_peak:.0f}% of the plain peak): pass "
            f"--budget {size_at_least(least)} or more"
        ) from None


def graph_profile(workload: Workload, in_place: bool, repeats: int = 3) -> GraphProfile:
    """The graph planner's profile of ``workload`` in the gradients' regime, with any failure
    of the user's model turned into a ``CliError``."""
    try:
        return profile_graph(workload.model, (workload.input,), workload.loss_fn, repeats,
                             cleared_grads=not in_place)
    except PlanError as e:
        raise CliError(f"cannot plan {workload.name}: {first_line(e)}") from None


def choose_graph_plan(
    profile: GraphProfile, budget: int | None, model: str, plain_peak: int
) -> Plan:
    """``plan_from_graph_profile`` under ``budget`` (None: the least peak), with a
    ``CliError`` naming the smallest feasible budget when none fits."""
    try:
        return plan_from_graph_profile(profile, budget)
    except PlanError:
        least = plan_from_graph_profile(profile).predicted_peak
        raise CliError(
            f"no schedule of {model} fits a budget of {format_bytes(budget or 0)} "
            f"({budget:,} bytes); the smallest feasible budget is {format_bytes(least)} "
            f"({least:,} bytes, {100 * least / plain_peak:.0f}% of the plain peak): pass "
            f"--budget {size_at_least(least)} or more"
        ) from None


def sweep(
    workload: Workload, budgets: Sequence[Size], repeats: int = 3, in_place: bool = False,
    frontier: bool = False,
) -> TuneResult:
    """Measure one step of ``workload`` plainly, with each of ``equal_counts`` (an
    ``nn.Sequential``'s) and with the graph planner's plan under each budget (a percentage
    is of the plain peak); with ``frontier``, also plans at ten budgets from the least
    feasible to the plain peak. Each measured configuration runs once under the tracker
    (peak, timeline, gradients) and ``repeats`` times untracked (best time).

    Example:
        >>> r = sweep(load_workload("mlp"), [parse_size("64MB")], repeats=1)
        >>> [c.name for c in r.configs][:3]
        ['plain', '2 segments', '4 segments']
    """
    model, x, loss_fn = workload.model, workload.input, workload.loss_fn
    n = len(workload.stages)
    with accounting():  # one scan of live objects for all the tracked runs
        plain_result = plain_step(workload, in_place)
        # the segment profile follows the gradients' state (in_place)
        profiles = profile(workload.stages, x) if workload.sequential else None
        graph = graph_profile(workload, in_place, repeats)
        resolved = [(str(b), b.resolve(plain_result.peak)) for b in budgets]
        runs = _configurations(profiles, graph, resolved, n)
        frontier_plans = _frontier_plans(graph, plain_result.peak) if frontier else []
        # tracked runs first (peak, timeline, gradients), then the timed runs round-robin,
        # so that a change in the machine's load falls on every configuration alike
        first: dict[tuple, Config] = {}
        timed: list[tuple[Config, Any]] = []
        for c, segments in runs:
            if not c.feasible or c.key in first:
                continue
            first[c.key] = c
            result = (plain_result if segments is None
                      else measure_step(model, x, loss_fn, segments, in_place))
            c.peak, c.timeline, c.start_bytes = result.peak, result.timeline, result.start_bytes
            c.grad_diff = compare_grads(plain_result.grads, result.grads)
            c.seconds = float("inf")
            timed.append((c, segments))
        points = []
        for p in frontier_plans:
            points.append([measure_step(model, x, loss_fn, p, in_place).peak, float("inf"), p])
    for _ in range(repeats):
        for c, segments in timed:
            c.seconds = min(c.seconds, time_step(model, x, loss_fn, segments, in_place))
        for point in points:
            point[1] = min(point[1], time_step(model, x, loss_fn, point[2], in_place))
    for c, _ in runs:
        done = first.get(c.key)
        if c.feasible and done is not None and done is not c:  # the same run, another name
            c.peak, c.seconds, c.grad_diff = done.peak, done.seconds, done.grad_diff
            c.timeline, c.start_bytes = done.timeline, done.start_bytes

    configs = [c for c, _ in runs]
    recommended, rule = _recommend([c for c in configs if c.measured], resolved)
    predicted = []
    if frontier:
        top = plan_from_graph_profile(graph, plain_result.peak)
        predicted = [(b, plain_result_seconds(timed) + extra) for b, extra in top.frontier]
    return TuneResult(workload.name, workload.title, n, configs, resolved, recommended, rule,
                      [(peak, seconds) for peak, seconds, _ in points], predicted)


def plain_result_seconds(timed: list[tuple[Config, Any]]) -> float:
    """The plain configuration's best time among the timed ones."""
    return next(c.seconds for c, segments in timed if c.kind == "plain")


def _frontier_plans(graph: GraphProfile, plain_peak: int, count: int = 10) -> list[Plan]:
    """Graph plans at ``count`` budgets from the least feasible to the plain peak."""
    least = plan_from_graph_profile(graph).predicted_peak
    plans: dict[tuple, Plan] = {}
    for i in range(count):
        budget = int(least + (plain_peak - least) * i / (count - 1))
        try:
            p = plan_from_graph_profile(graph, budget)
        except PlanError:
            continue
        plans.setdefault(tuple(p.actions), p)
    return list(plans.values())


def _configurations(
    profiles: list[StageProfile] | None, graph: GraphProfile, budgets: list[tuple[str, int]],
    n: int,
) -> list[tuple[Config, Any]]:
    """Each configuration of a sweep, with its predictions and what ``run_step`` takes for
    it (``None``: the plain model, or an infeasible plan)."""
    runs: list[tuple[Config, Any]] = [(Config("plain", "plain", [(0, n)]), None)]
    if profiles is not None:
        for k in equal_counts(n)[1:]:
            runs.append((Config(f"{k} segments", "equal", segment_bounds(n, k)), k))
        for c, _ in runs:
            c.predicted_peak, c.predicted_extra_seconds = predict(profiles, c.bounds)
    else:
        runs[0][0].predicted_peak = plan_from_graph_profile(graph, 1 << 62).predicted_plain_peak
        runs[0][0].predicted_extra_seconds = 0.0
    for text, nbytes in budgets:
        name = f"plan <= {text}"
        try:
            p = plan_from_graph_profile(graph, nbytes)
        except PlanError:
            least = plan_from_graph_profile(graph).predicted_peak
            runs.append((Config(name, "plan", None, text, nbytes, smallest_feasible=least), None))
            continue
        c = Config(name, "plan", None, text, nbytes, p.predicted_peak,
                   p.predicted_extra_seconds, plan=p)
        runs.append((c, p))
    return runs


def _recommend(measured: list[Config], budgets: list[tuple[str, int]]) -> tuple[Config, str]:
    exact = [c for c in measured if c.grads_match] or measured
    missed = []
    for text, limit in sorted(budgets, key=lambda b: b[1]):
        fits = [c for c in exact if c.peak <= limit]
        if fits:
            best = min(fits, key=lambda c: (c.seconds, c.peak))
            rule = (
                "the fastest configuration with exact gradients whose measured peak fits the "
                f"smallest budget that any fits ({text} = {format_bytes(limit)})"
            )
            if missed:
                rule += f"; none fits {', '.join(missed)}"
            return best, rule
        missed.append(text)
    best = min(exact, key=lambda c: (c.peak, c.seconds))
    rule = "the configuration with exact gradients and the least measured peak"
    return best, rule + (f"; none fits {', '.join(missed)}" if missed else "")


# ---------------------------------------------------------------------------- printing


def _cuts(bounds: list[tuple[int, int]]) -> str:
    cuts = [s for s, _ in bounds[1:]]
    if not cuts:
        return "-"
    if len(cuts) > 6:
        return ", ".join(map(str, cuts[:3])) + ", ..., " + str(cuts[-1])
    return ", ".join(map(str, cuts))


def _table(result: TuneResult) -> Table:
    plain = result.plain
    budgets = ", ".join(f"{text} = {format_bytes(n)}" for text, n in result.budgets)
    table = Table(
        title=f"memgrad tune {result.title}: {result.stages} stages"
        + (f"; budgets {budgets}" if budgets else ""),
        caption=f"recommended: {result.recommended.name}, {result.rule}",
        caption_justify="left",
    )
    for name, justify in (
        ("configuration", "left"), ("segments", "right"), ("cuts at / levels", "left"),
        ("peak (of plain)", "right"), ("predicted", "right"), ("step time (overhead)", "right"),
        ("grads", "left"),
    ):
        table.add_column(name, justify=justify, min_width=5, no_wrap=name == "configuration")
    for c in result.configs:
        if not c.feasible:
            table.add_row(c.name, "-", "none fits", "-",
                          f"least {format_bytes(c.smallest_feasible)}", "-", "-", style="dim")
            continue
        overhead = "" if c is plain else f" ({100 * (c.seconds / plain.seconds - 1):+.0f}%)"
        if c.plan is not None:
            levels = c.plan.depth - 1
            shape = (f"{c.plan.stages} stages", f"{levels} level{'s' if levels != 1 else ''} of "
                     "recompute")
        else:
            assert c.bounds is not None
            shape = (str(len(c.bounds)), _cuts(c.bounds))
        table.add_row(
            c.name,
            *shape,
            f"{format_bytes(c.peak)} ({100 * c.peak / plain.peak:.0f}%)",
            format_bytes(c.predicted_peak),
            f"{c.seconds * 1e3:.1f} ms{overhead}",
            "exact" if c.grads_match else f"differ by {c.grad_diff:.2g}",
            style="bold green" if c is result.recommended else None,
        )
    return table


def _points(result: TuneResult) -> list[Point]:
    """One point per distinct configuration, named after every configuration that has it."""
    names: dict[tuple, list[Config]] = {}
    for c in result.measured:
        names.setdefault(c.key, []).append(c)
    return [
        Point(" = ".join(c.name for c in same), same[0].seconds, same[0].peak,
              any(c is result.recommended for c in same))
        for same in names.values()
    ]


def run_tune(args: argparse.Namespace) -> int:
    """The ``memgrad tune`` command. Returns the exit status."""
    try:
        budgets = parse_sizes(args.budgets, PERCENT_OF)
    except SizeError as e:
        raise CliError(f"--budgets: {e}") from None
    plot = check_writable(args.plot, "--plot") if args.plot else None
    timeline = check_writable(args.timeline, "--timeline") if args.timeline else None
    if plot or timeline:
        require_matplotlib("--plot" if plot else "--timeline")
    workloads = [load_workload(spec, args.size) for spec in args.model]
    in_place = args.grads == "in-place"
    out = console()
    results = []
    for w in workloads:
        if not args.json:
            grads = "gradients zeroed in place" if in_place else "from cleared gradients"
            out.print(f"measuring {w.title}: one training step (forward + loss + backward, "
                      f"{grads}) per configuration, best of {args.repeats} timed...",
                      style="dim")
        result = sweep(w, budgets, args.repeats, in_place, frontier=bool(plot))
        results.append(result)
        if not args.json:
            out.print(_table(result))
    if plot:
        plot_tradeoff(plot, [
            (f"{r.model}: peak memory against step time", _points(r), r.budgets)
            for r in results
        ], [r.frontier for r in results], [r.predicted_frontier for r in results])
    if timeline:
        plot_timelines(timeline, [
            (f"{r.model}: bytes alive during one step",
             [Curve("plain", r.plain.timeline, r.plain.start_bytes)]
             + ([] if r.recommended is r.plain else
                [Curve(r.recommended.name, r.recommended.timeline, r.recommended.start_bytes)]),
             r.budgets)
            for r in results
        ])
    if args.json:
        print(json.dumps({"models": [r.to_json() for r in results]}, indent=2))
    else:
        for path, what in ((plot, "peak against time"), (timeline, "timelines")):
            if path:
                out.print(f"wrote {what} to {path}")
    return 0


def run_plan(args: argparse.Namespace) -> int:
    """The ``memgrad plan`` command. Returns the exit status."""
    try:
        budget = None if args.budget is None else parse_size(args.budget, PERCENT_OF)
    except SizeError as e:
        raise CliError(f"--budget: {e}") from None
    w = load_workload(args.model, args.size)
    in_place = args.grads == "in-place"
    with accounting():
        plain = plain_step(w, in_place)
        graph = graph_profile(w, in_place)
    nbytes = None if budget is None else budget.resolve(plain.peak)
    p = choose_graph_plan(graph, nbytes, w.name, plain.peak)
    rows = p.rows()  # in forward order
    if args.json:
        print(json.dumps({
            "model": w.name,
            "ops": len(graph.ops),
            "stages": p.stages,
            "levels": p.depth - 1,
            "plain_peak_bytes": plain.peak,
            "budget": None if budget is None else str(budget),
            "budget_bytes": p.budget_bytes,
            "predicted_peak_bytes": p.predicted_peak,
            "predicted_plain_peak_bytes": p.predicted_plain_peak,
            "predicted_extra_seconds": p.predicted_extra_seconds,
            "predicted_step_seconds": p.predicted_step_seconds,
            "modules": [{"path": r.path, "kept": r.kept, "kept_bytes": r.kept_bytes,
                         "recomputed": r.recomputed, "recomputed_bytes": r.recomputed_bytes,
                         "recompute_seconds": r.recompute_seconds} for r in rows],
        }, indent=2))
        return 0
    out = console()
    budget_text = ("none (the least peak)" if budget is None
                   else f"{budget} = {format_bytes(nbytes)} ({nbytes:,} bytes)")
    out.print(f"memgrad plan {w.title}: {len(graph.ops)} ops in {p.stages} stages")
    out.print(f"plain step peak (measured): {format_bytes(plain.peak)} ({plain.peak:,} bytes)")
    out.print(f"budget: {budget_text}")
    levels = p.depth - 1
    table = Table(title=f"values backward reads, by module: {levels} level"
                  f"{'s' if levels != 1 else ''} of recomputation")
    for name, justify in (("module", "left"), ("kept", "right"), ("kept bytes", "right"),
                          ("recomputed", "right"), ("recomputed bytes", "right"),
                          ("recompute time", "right")):
        table.add_column(name, justify=justify, no_wrap=name == "module")
    for r in rows:
        if r.kept + r.recomputed == 0 and r.recompute_seconds == 0:
            continue
        table.add_row(r.path, str(r.kept), format_bytes(r.kept_bytes), str(r.recomputed),
                      format_bytes(r.recomputed_bytes), f"{r.recompute_seconds * 1e3:.2f} ms")
    out.print(table)
    out.print(
        f"predicted peak: {format_bytes(p.predicted_peak)} ({p.predicted_peak:,} bytes, "
        f"{100 * p.predicted_peak / plain.peak:.0f}% of the plain peak)"
    )
    out.print(
        f"predicted extra time: {p.predicted_extra_seconds * 1e3:.1f} ms per step (values "
        "rebuilt in backward), a step of "
        f"{p.predicted_step_seconds * 1e3:.1f} ms"
    )
    return 0
