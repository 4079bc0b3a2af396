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

from memgrad import nn
from memgrad.checkpoint import SegmentPlan, StageProfile, plan_from_profile, predict, profile
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
    "run_tune",
    "run_plan",
]

PERCENT_OF = "the plain step's peak"


@dataclass
class Config:
    """One configuration of a sweep and what was measured for it. ``bounds`` is ``None`` for
    a plan whose budget no segmentation fits (``smallest_feasible`` then says what would)."""

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

    @property
    def measured(self) -> bool:
        """Whether the configuration ran (an infeasible plan does not)."""
        return self.peak is not None

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
            "budget": self.budget,
            "budget_bytes": self.budget_bytes,
            "feasible": self.bounds is not None,
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


def sweep(
    workload: Workload, budgets: Sequence[Size], repeats: int = 3, in_place: bool = False
) -> TuneResult:
    """Measure one step of ``workload`` plainly, with each of ``equal_counts`` and with the
    planner's choice under each budget (a percentage is of the plain peak). Each measured
    configuration runs once under the tracker (peak, timeline, gradients) and ``repeats``
    times untracked (best time).

    Example:
        >>> r = sweep(load_workload("mlp"), [parse_size("64MB")], repeats=1)
        >>> [c.name for c in r.configs][:3]
        ['plain', '2 segments', '4 segments']
    """
    model, x, loss_fn = workload.model, workload.input, workload.loss_fn
    n = len(workload.stages)
    with accounting():  # one scan of live objects for all the tracked runs
        plain_result = plain_step(workload, in_place)
        profiles = profile(workload.stages, x)  # follows the gradients' state (in_place)
        resolved = [(str(b), b.resolve(plain_result.peak)) for b in budgets]
        runs = _configurations(profiles, resolved)
        # tracked runs first (peak, timeline, gradients), then the timed runs round-robin,
        # so that a change in the machine's load falls on every configuration alike
        first: dict[tuple[tuple[int, int], ...], Config] = {}
        timed: list[tuple[Config, int | SegmentPlan | None]] = []
        for c, segments in runs:
            if c.bounds is None or tuple(c.bounds) in first:
                continue
            first[tuple(c.bounds)] = c
            result = (plain_result if segments is None
                      else measure_step(model, x, loss_fn, segments, in_place))
            c.peak, c.timeline, c.start_bytes = result.peak, result.timeline, result.start_bytes
            c.grad_diff = compare_grads(plain_result.grads, result.grads)
            c.seconds = float("inf")
            timed.append((c, segments))
    for _ in range(repeats):
        for c, segments in timed:
            c.seconds = min(c.seconds, time_step(model, x, loss_fn, segments, in_place))
    for c, _ in runs:
        done = first.get(tuple(c.bounds or ()))
        if done is not None and done is not c:  # the same segmentation under another name
            c.peak, c.seconds, c.grad_diff = done.peak, done.seconds, done.grad_diff
            c.timeline, c.start_bytes = done.timeline, done.start_bytes

    configs = [c for c, _ in runs]
    recommended, rule = _recommend([c for c in configs if c.measured], resolved)
    return TuneResult(workload.name, workload.title, n, configs, resolved, recommended, rule)


def _configurations(
    profiles: list[StageProfile], budgets: list[tuple[str, int]]
) -> list[tuple[Config, int | SegmentPlan | None]]:
    """Each configuration of a sweep, with its predictions and what ``checkpoint_sequential``
    takes for it (``None``: the plain model, or an infeasible plan)."""
    n = len(profiles)
    runs: list[tuple[Config, int | SegmentPlan | None]] = [
        (Config("plain", "plain", [(0, n)]), None)]
    for k in equal_counts(n)[1:]:
        runs.append((Config(f"{k} segments", "equal", segment_bounds(n, k)), k))
    for text, nbytes in budgets:
        name = f"plan <= {text}"
        try:
            p = plan_from_profile(profiles, nbytes)
        except PlanError:
            least = plan_from_profile(profiles).predicted_peak
            runs.append((Config(name, "plan", None, text, nbytes, smallest_feasible=least), None))
            continue
        runs.append((Config(name, "plan", p.bounds, text, nbytes), p))
    for c, _ in runs:
        if c.bounds is not None:
            c.predicted_peak, c.predicted_extra_seconds = predict(profiles, c.bounds)
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
        ("configuration", "left"), ("segments", "right"), ("cuts at", "left"),
        ("peak (of plain)", "right"), ("predicted", "right"), ("step time (overhead)", "right"),
        ("grads", "left"),
    ):
        table.add_column(name, justify=justify, min_width=5, no_wrap=name == "configuration")
    for c in result.configs:
        if c.bounds is None:
            table.add_row(c.name, "-", "none fits", "-",
                          f"least {format_bytes(c.smallest_feasible)}", "-", "-", style="dim")
            continue
        overhead = "" if c is plain else f" ({100 * (c.seconds / plain.seconds - 1):+.0f}%)"
        table.add_row(
            c.name,
            str(len(c.bounds)),
            _cuts(c.bounds),
            f"{format_bytes(c.peak)} ({100 * c.peak / plain.peak:.0f}%)",
            format_bytes(c.predicted_peak),
            f"{c.seconds * 1e3:.1f} ms{overhead}",
            "exact" if c.grads_match else f"differ by {c.grad_diff:.2g}",
            style="bold green" if c is result.recommended else None,
        )
    return table


def _points(result: TuneResult) -> list[Point]:
    """One point per distinct segmentation, named after every configuration that has it."""
    names: dict[tuple[tuple[int, int], ...], list[Config]] = {}
    for c in result.measured:
        names.setdefault(tuple(c.bounds), []).append(c)
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
        result = sweep(w, budgets, args.repeats, in_place)
        results.append(result)
        if not args.json:
            out.print(_table(result))
    if plot:
        plot_tradeoff(plot, [
            (f"{r.model}: peak memory against step time", _points(r), r.budgets)
            for r in results
        ])
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


def _describe(stage: Any) -> str:
    """A stage's layer types: ``Linear+ReLU`` for an ``nn.Sequential`` of them."""
    if isinstance(stage, nn.Sequential):
        return "+".join(type(child).__name__ for child in stage)
    return type(stage).__name__


def _runs(names: list[str]) -> list[tuple[str, int]]:
    """Consecutive equal names counted: ``[a, a, b]`` -> ``[(a, 2), (b, 1)]``."""
    runs: list[tuple[str, int]] = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1] + 1)
        else:
            runs.append((name, 1))
    return runs


def run_plan(args: argparse.Namespace) -> int:
    """The ``memgrad plan`` command. Returns the exit status."""
    try:
        budget = None if args.budget is None else parse_size(args.budget, PERCENT_OF)
    except SizeError as e:
        raise CliError(f"--budget: {e}") from None
    w = load_workload(args.model, args.size)
    with accounting():
        plain = plain_step(w, args.grads == "in-place")
        profiles = profile(w.stages, w.input)
    if budget is None:
        p = plan_from_profile(profiles)
    else:
        p = choose_plan(profiles, budget.resolve(plain.peak), w.name, plain.peak)
    if args.json:
        print(json.dumps({
            "model": w.name,
            "stages": len(w.stages),
            "plain_peak_bytes": plain.peak,
            "budget": None if budget is None else str(budget),
            "budget_bytes": p.budget_bytes,
            "segments": p.segments,
            "sizes": p.sizes,
            "bounds": p.bounds,
            "predicted_peak_bytes": p.predicted_peak,
            "predicted_extra_seconds": p.predicted_extra_seconds,
        }, indent=2))
        return 0
    out = console()
    names = [_describe(s) for s in w.stages]
    budget_text = ("none (the least peak)" if budget is None
                   else f"{budget} = {format_bytes(p.budget_bytes)} ({p.budget_bytes:,} bytes)")
    out.print(f"memgrad plan {w.title}: {len(names)} stages")
    out.print(f"plain step peak (measured): {format_bytes(plain.peak)} ({plain.peak:,} bytes)")
    out.print(f"budget: {budget_text}")
    table = Table(title=f"plan: {p.segments} segments, sizes {p.sizes}")
    for name, justify in (("segment", "right"), ("stages", "left"), ("layers", "left"),
                          ("checkpointed", "left")):
        table.add_column(name, justify=justify)
    for i, (s, e) in enumerate(p.bounds):
        layers = ", ".join(
            name if count == 1 else f"{count} x {name}"
            for name, count in _runs(names[s:e])
        )
        span = str(s) if e == s + 1 else f"{s}-{e - 1}"
        table.add_row(str(i), span, layers, "yes" if i < p.segments - 1 else "no")
    out.print(table)
    out.print(f"cuts at: {[s for s, _ in p.bounds[1:]]}")
    out.print(
        f"predicted peak: {format_bytes(p.predicted_peak)} ({p.predicted_peak:,} bytes, "
        f"{100 * p.predicted_peak / plain.peak:.0f}% of the plain peak)"
    )
    out.print(
        f"predicted extra time: {p.predicted_extra_seconds * 1e3:.1f} ms per step "
        "(the checkpointed segments' forward, run again in backward)"
    )
    return 0
