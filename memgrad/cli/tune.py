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
import dataclasses
import json
import math
import statistics
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
from memgrad.cli.timing import (
    Timing,
    format_overhead,
    spread_name,
    summarize,
    tied,
    timed_rounds,
)
from memgrad.cli.workloads import Workload, load_workload
from memgrad.errors import PlanError
from memgrad.memory import TimelineEntry

__all__ = [
    "Config",
    "TuneResult",
    "equal_counts",
    "sweep",
    "segment_profile",
    "plain_step",
    "choose_plan",
    "choose_graph_plan",
    "graph_profile",
    "run_tune",
    "run_plan",
]

PERCENT_OF = "the plain step's peak"
WARMUP_ROUNDS = 1  # untimed rounds of every configuration before the timed ones
SPREAD_SHORT = {"interquartile range": "IQR", "min-max": "min-max"}


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
    timing: Timing | None = None  # of the timed rounds (memgrad.cli.timing)
    tied_with: list[str] = field(default_factory=list)  # the other runs it ties with
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
    def seconds(self) -> float | None:
        """The median of its timed rounds."""
        return None if self.timing is None else self.timing.seconds

    @property
    def checkpointed(self) -> int:
        """How many segments are recomputed (the levels of recomputation, for a plan)."""
        if self.plan is not None:
            return self.plan.depth - 1
        return max(0, len(self.bounds or ()) - 1)

    @property
    def feasible(self) -> bool:
        return self.bounds is not None or self.plan is not None

    @property
    def grads_match(self) -> bool:
        """Every parameter's gradient equals the plain run's, bit for bit."""
        return self.grad_diff == 0.0

    def to_json(self) -> dict[str, Any]:
        """The configuration as plain JSON values (no timeline)."""
        t = self.timing
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
            "round_seconds": None if t is None else list(t.rounds),
            "overhead": None if t is None else t.overhead,
            "overhead_spread": None if t is None else [t.low - 1, t.high - 1],
            "ties_plain": None if t is None else t.ties_plain,
            "tied_with": self.tied_with,
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
    rounds: int = 0  # timed rounds, after the warm-up
    warmup: int = 0  # untimed rounds before them
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
            "timing": {
                "warmup_rounds": self.warmup,
                "rounds": self.rounds,
                "seconds": "median of the rounds",
                "overhead": "median of the per-round ratios to the plain step, minus 1",
                "spread": spread_name(self.rounds),
                "tie": "ratio spreads overlap",
            },
            "budgets": [{"budget": text, "bytes": n} for text, n in self.budgets],
            "configurations": [c.to_json() for c in self.configs],
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


def segment_profile(workload: Workload, repeats: int = 3) -> list[StageProfile]:
    """The segment profile of an ``nn.Sequential`` workload, taken ``repeats`` times: the
    bytes of the first, each stage's median forward time. Run it after a warm-up step
    (``plain_step``), so that the times are of compiled kernels.

    Example:
        >>> w = load_workload("mlp")
        >>> len(segment_profile(w, repeats=2)) == len(w.stages)
        True
    """
    runs = [profile(workload.stages, workload.input) for _ in range(max(1, repeats))]
    return [dataclasses.replace(p, seconds=statistics.median(r[i].seconds for r in runs))
            for i, p in enumerate(runs[0])]


def sweep(
    workload: Workload, budgets: Sequence[Size], repeats: int = 5, in_place: bool = False,
    frontier: bool = False,
) -> TuneResult:
    """Measure one step of ``workload`` plainly, with each of ``equal_counts`` (an
    ``nn.Sequential``'s) and with the graph planner's plan under each budget (a percentage
    is of the plain peak); with ``frontier``, also plans at ten budgets from the least
    feasible to the plain peak. Each distinct configuration runs once under the tracker
    (peak, timeline, gradients), then all of them, the plain step included, run in one
    untimed warm-up round and ``repeats`` timed rounds (NOTE [ Paired timing ] in
    ``memgrad.cli.timing``): its time is the median, its overhead the median of its
    per-round ratios to the plain step, with their spread and the configurations it ties
    with.

    Example:
        >>> r = sweep(load_workload("mlp"), [parse_size("64MB")], repeats=1)
        >>> [c.name for c in r.configs][:3]
        ['plain', '2 segments', '4 segments']
    """
    model, x, loss_fn = workload.model, workload.input, workload.loss_fn
    n = len(workload.stages)
    with accounting():  # one scan of live objects for all the tracked runs
        plain_result = plain_step(workload, in_place)  # also the first warm-up step
        # the segment profile follows the gradients' state (in_place)
        profiles = segment_profile(workload, repeats) if workload.sequential else None
        graph = graph_profile(workload, in_place, repeats)
        resolved = [(str(b), b.resolve(plain_result.peak)) for b in budgets]
        runs = _configurations(profiles, graph, resolved, n)
        frontier_plans = _frontier_plans(graph, plain_result.peak) if frontier else []
        first: dict[tuple, Config] = {}
        timed: list[Any] = []  # what run_step takes, per distinct configuration
        for c, segments in runs:
            if not c.feasible or c.key in first:
                continue
            first[c.key] = c
            result = (plain_result if segments is None
                      else measure_step(model, x, loss_fn, segments, in_place))
            c.peak, c.timeline, c.start_bytes = result.peak, result.timeline, result.start_bytes
            c.grad_diff = compare_grads(plain_result.grads, result.grads)
            timed.append(segments)
        peaks = [measure_step(model, x, loss_fn, p, in_place).peak for p in frontier_plans]
    distinct = list(first.values())  # the plain step first: the reference of the ratios
    timed += frontier_plans
    rounds = timed_rounds(lambda i: time_step(model, x, loss_fn, timed[i], in_place),
                          len(timed), repeats, WARMUP_ROUNDS)
    timings = summarize(rounds)
    for c, t in zip(distinct, timings):
        c.timing = t
    _mark_ties(distinct)
    for c, _ in runs:
        done = first.get(c.key)
        if c.feasible and done is not None and done is not c:  # the same run, another name
            c.peak, c.timing, c.grad_diff = done.peak, done.timing, done.grad_diff
            c.tied_with, c.timeline, c.start_bytes = done.tied_with, done.timeline, done.start_bytes

    configs = [c for c, _ in runs]
    recommended, rule = _recommend([c for c in configs if c.measured], resolved)
    plain_seconds = timings[0].seconds
    predicted = []
    if frontier:
        top = plan_from_graph_profile(graph, plain_result.peak)
        predicted = [(b, plain_seconds + extra) for b, extra in top.frontier]
    measured_frontier = [(peak, t.seconds) for peak, t in zip(peaks, timings[len(distinct):])]
    return TuneResult(workload.name, workload.title, n, configs, resolved, recommended, rule,
                      repeats, WARMUP_ROUNDS, measured_frontier, predicted)


def _mark_ties(distinct: list[Config]) -> None:
    """Set each configuration's ``tied_with``: the others whose ratio spread overlaps its
    own."""
    for c in distinct:
        assert c.timing is not None
        c.tied_with = [o.name for o in distinct
                       if o is not c and o.timing is not None and tied(c.timing, o.timing)]


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


RECOMMEND_TIES = (
    "; of those that tie with the fastest, the one with the least predicted recompute time, "
    "then the fewest checkpointed segments"
)


def _ratio(c: Config) -> float:
    assert c.timing is not None
    return c.timing.ratio


def _fewest_recomputations(fits: list[Config]) -> tuple[Config, str]:
    """The fastest of ``fits`` (least median ratio to the plain step), or, among those that
    tie with it, the one with the least predicted recompute time (then the fewest
    checkpointed segments); with a note naming the fastest when it is not the one."""
    fastest = min(fits, key=lambda c: (_ratio(c), c.peak))
    assert fastest.timing is not None
    ties = [c for c in fits if c.timing is not None and tied(c.timing, fastest.timing)]
    best = min(ties, key=lambda c: (c.predicted_extra_seconds or 0.0, c.checkpointed,
                                    _ratio(c), c.peak))
    note = "" if best.key == fastest.key else f" ({fastest.name}, the fastest, ties with it)"
    return best, note


def _recommend(measured: list[Config], budgets: list[tuple[str, int]]) -> tuple[Config, str]:
    """The configuration ``memgrad tune`` recommends and the rule that chose it: among those
    with exact gradients whose measured peak fits the smallest budget any fits, the fastest,
    where a tie (NOTE [ Paired timing ]) goes to the fewest recomputations; the least peak
    when none fits.

    Example:
        >>> from memgrad.cli.timing import summarize
        >>> plain = Config("plain", "plain", [(0, 2)], peak=9, grad_diff=0.0)
        >>> two = Config("2 segments", "equal", [(0, 1), (1, 2)], peak=5, grad_diff=0.0,
        ...              predicted_extra_seconds=0.1)
        >>> plain.timing, two.timing = summarize([[1.0, 0.8], [1.0, 1.1], [1.0, 0.9]])
        >>> best, rule = _recommend([plain, two], [("10B", 10)])
        >>> best.name, rule.endswith("(2 segments, the fastest, ties with it)")
        ('plain', True)
    """
    exact = [c for c in measured if c.grads_match] or measured
    missed = []
    for text, limit in sorted(budgets, key=lambda b: b[1]):
        fits = [c for c in exact if c.peak is not None and c.peak <= limit]
        if fits:
            best, note = _fewest_recomputations(fits)
            rule = (
                "the fastest configuration with exact gradients whose measured peak fits the "
                f"smallest budget that any fits ({text} = {format_bytes(limit)})"
                + RECOMMEND_TIES + note
            )
            if missed:
                rule += f"; none fits {', '.join(missed)}"
            return best, rule
        missed.append(text)
    best = min(exact, key=lambda c: (c.peak, _ratio(c)))
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


def _ties(result: TuneResult) -> str:
    """The pairs of distinct configurations whose spreads overlap, as the table's caption
    lists them: ``a ~ b, c`` for a tied with b and with c."""
    seen: set[tuple] = set()
    parts = []
    names = {c.name: c for c in result.measured}
    for c in result.measured:
        if c.key in seen:
            continue
        seen.add(c.key)
        later = [o for o in c.tied_with if names[o].key not in seen]
        if later:
            parts.append(f"{c.name} ~ {', '.join(later)}")
    return "; ".join(parts) if parts else "none"


def _caption(result: TuneResult) -> str:
    n = result.rounds
    return (
        f"recommended: {result.recommended.name}, {result.rule}\n"
        "predicted: the peak and the recompute time per step that the planner predicts; "
        f"step time: the median of {n} timed round{'s' if n != 1 else ''} after "
        f"{result.warmup} untimed warm-up round, each running the plain step and every "
        "configuration in turn, in an order that changes from round to round; vs plain: the "
        f"median of the per-round ratios to the plain step, in brackets their {spread_name(n)}"
        "; 'tie ±x%' when that spread includes 0% (x: its widest reach from 0%)\n"
        f"ties (spreads overlap): {_ties(result)}"
    )


def _table(result: TuneResult) -> Table:
    plain = result.plain
    budgets = ", ".join(f"{text} = {format_bytes(n)}" for text, n in result.budgets)
    table = Table(
        title=f"memgrad tune {result.title}: {result.stages} stages"
        + (f"; budgets {budgets}" if budgets else ""),
        caption=_caption(result),
        caption_justify="left",
    )
    for name, justify in (
        ("configuration", "left"), ("segments (cuts at)", "left"), ("peak (of plain)", "right"),
        ("predicted", "right"), ("step time", "right"),
        (f"vs plain ({SPREAD_SHORT[spread_name(result.rounds)]})", "right"), ("grads", "left"),
    ):
        table.add_column(name, justify=justify, min_width=5, no_wrap=True)
    for c in result.configs:
        if not c.feasible:
            table.add_row(c.name, "none fits", "-", f"least {format_bytes(c.smallest_feasible)}",
                          "-", "-", "-", style="dim")
            continue
        assert c.timing is not None and c.peak is not None and plain.peak is not None
        if c.plan is not None:
            levels = c.plan.depth - 1
            shape = f"{c.plan.stages} stages, {levels} level{'s' if levels != 1 else ''}"
        else:
            assert c.bounds is not None
            shape = str(len(c.bounds)) + ("" if len(c.bounds) == 1 else f" ({_cuts(c.bounds)})")
        table.add_row(
            c.name,
            shape,
            f"{format_bytes(c.peak)} ({100 * c.peak / plain.peak:.0f}%)",
            f"{format_bytes(c.predicted_peak)} +{_ms(c.predicted_extra_seconds or 0.0)}",
            _ms(c.timing.seconds),
            "reference" if c is plain else format_overhead(c.timing),
            "exact" if c.grads_match else f"differ by {c.grad_diff:.2g}",
            style="bold green" if c is result.recommended else None,
        )
    return table


def _ms(seconds: float) -> str:
    """Seconds in milliseconds: whole from 10 ms, else two significant figures."""
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


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
                      f"{grads}) per configuration, in {args.repeats} interleaved rounds "
                      "after a warm-up round...", style="dim")
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
            "predicted_overhead_seconds": p.predicted_overhead_seconds,
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
        f"rebuilt in backward) and {p.predicted_overhead_seconds * 1e3:.1f} ms of the plan's "
        f"runtime, a step of {p.predicted_step_seconds * 1e3:.1f} ms"
    )
    return 0
