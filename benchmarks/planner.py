"""The graph planner on W1-W3, ``memgrad train``'s language model and a nanoGPT-shaped GPT:
under budgets of 20-75% of the plain peak, the plan's predicted and measured peak and step
time, against the best equal-count ``checkpoint_sequential`` that fits the same budget.

Gradients are zeroed in place before each step, so the peaks are activations and
transients. Each model is profiled once (``memgrad.checkpoint.graph_profile``) and planned
for every budget from that profile. The best equal count is the fastest segment count
(median of three steps each, the counts timed in turn) whose measured peak fits the budget
(Sequential models only). The plan and its rival are timed in pairs, alternating, in one
process: the speedup is the median of the pairs' ratios, the spread their interquartile
range. The plain step is timed in the same rounds,
and the predicted step time is its median plus the plan's predicted overhead and
recomputation (the profile times with the benchmark's clock). Targets: on W2 at 50% and
25% the plan is at least 10% faster; it is never slower (within the spread); W1 fits at
20%; predicted peak within 10% and predicted step time within 15% of measured.

``--clock cpu`` times with the process's CPU time (all its threads) instead of the wall
clock: on a machine shared with other jobs the wall clock measures the load as much as
the step.

Usage:
    python benchmarks/planner.py [--repeats 5] [--only W1,W2,W3,train,gpt] [--small]
                                 [--clock wall|cpu]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import emit, machine_info, table, workload_args
from workloads import FULL, SMALL

import memgrad as mg
from memgrad import models
from memgrad.checkpoint import checkpoint_sequential
from memgrad.checkpoint.graph_plan import plan_from_graph_profile
from memgrad.checkpoint.graph_profile import profile_graph

__all__ = ["main"]

FRACTIONS = {"W1": (0.20, 0.25, 0.50, 0.75)}
DEFAULT_FRACTIONS = (0.25, 0.50, 0.75)
EXTRA = {
    "train": ("lm", dict(d_model=64, heads=4, blocks=4, seq=64, batch=16)),
    "gpt": ("gpt", FULL["W2"][1]),
}
EXTRA_SMALL = {
    "train": ("lm", dict(d_model=32, heads=4, blocks=2, seq=16, batch=4)),
    "gpt": ("gpt", SMALL["W2"][1]),
}


def _build(name: str, sizes: dict) -> tuple[Any, mg.Tensor, Callable]:
    if name == "lm":
        mg.manual_seed(0)
        model = models.build_lm(sizes["d_model"], sizes["heads"], sizes["blocks"], sizes["seq"])
        x, y = models.sample_batch(np.arange(50_000) % 251, sizes["batch"], sizes["seq"],
                                   np.random.default_rng(0))
        return model, x, models.lm_loss(y)
    return models.BUILTIN[name](**sizes)


def _step(model: Any, x: mg.Tensor, loss_fn: Callable, segments: int | None
          ) -> Callable[[], None]:
    params = list(model.parameters())

    def step() -> None:
        for p in params:
            if p.grad is not None:
                p.grad.numpy()[...] = 0
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
        loss = loss_fn(out)
        del out  # the graph keeps what backward needs (as memgrad train does)
        loss.backward()

    return step


def _peak(step: Callable[[], None]) -> int:
    with mg.memory.track() as t:
        step()
    return t.peak_above_start


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _seconds(step: Callable[[], None], clock: Callable[[], float] = time.perf_counter
             ) -> float:
    start = clock()
    step()
    return clock() - start


def _paired(a: Callable[[], None], b: Callable[[], None], repeats: int,
            clock: Callable[[], float] = time.perf_counter, c: Callable[[], None] | None = None
            ) -> tuple[float, float, float, float, float | None]:
    """Medians of a and b timed alternately (and of c, timed after them in each round), the
    median ratio b/a and its spread (IQR)."""
    ta, tb, tc, ratios = [], [], [], []
    for _ in range(repeats):
        x, y = _seconds(a, clock), _seconds(b, clock)
        ta.append(x)
        tb.append(y)
        ratios.append(y / x)
        if c is not None:
            tc.append(_seconds(c, clock))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return (statistics.median(ta), statistics.median(tb), statistics.median(ratios),
            q[2] - q[0], statistics.median(tc) if tc else None)


def _equal_counts(model: Any, x: mg.Tensor, loss_fn: Callable, clock: Callable[[], float],
                  repeats: int = 3) -> dict[int, tuple[int, float]]:
    """Measured peak and median step time (of ``repeats``, the counts timed in turn) of every
    segment count (a Sequential's): the plan's rival is the fastest that fits, so one noisy
    timing must not pick a slower one."""
    steps = {k: _step(model, x, loss_fn, k) for k in range(2, len(model) + 1)}
    peaks = {}
    for k, step in steps.items():
        step()
        peaks[k] = _peak(step)
    times: dict[int, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for k, step in steps.items():
            times[k].append(_seconds(step, clock))
    return {k: (peaks[k], statistics.median(times[k])) for k in steps}


def run(key: str, name: str, sizes: dict, repeats: int, machine: dict,
        clock: str = "wall") -> list[list]:
    """Measure one model under its budgets; returns its table rows."""
    tick = CLOCKS[clock]
    model, x, loss_fn = _build(name, sizes)
    plain = _step(model, x, loss_fn, None)
    plain()  # the gradients exist from here on, and are zeroed in place
    plain_peak = _peak(plain)
    start = time.perf_counter()
    profile = profile_graph(model, (x,), loss_fn, repeats, clock=clock)
    profile_s = time.perf_counter() - start
    equal = _equal_counts(model, x, loss_fn, tick) if isinstance(model, mg.nn.Sequential) else {}
    rows = []
    for fraction in FRACTIONS.get(key, DEFAULT_FRACTIONS):
        budget = int(fraction * plain_peak)
        start = time.perf_counter()
        try:
            p = plan_from_graph_profile(profile, budget)
        except mg.PlanError as e:
            emit({"bench": "planner", "workload": key, "fraction": fraction, "budget": budget,
                  "error": str(e), "machine": machine})
            rows.append([key, f"{fraction:.0%}", "none fits", "", "", "", "", "", "", ""])
            continue
        solve_s = time.perf_counter() - start
        handle = p.apply(model)
        planned = _step(model, x, loss_fn, None)
        planned()
        measured_peak = _peak(planned)
        handle.remove()

        def planned_step(p: Any = p, run: Callable[[], None] = planned) -> None:
            with p.apply(model):
                run()

        fits = {k: v for k, v in equal.items() if v[0] <= budget}
        if plain_peak <= budget:
            fits[1] = (plain_peak, statistics.median(_seconds(plain, tick) for _ in range(3)))
        best = min(fits, key=lambda k: fits[k][1]) if fits else None
        rival = _step(model, x, loss_fn, None if best == 1 else best) if best else plain
        plan_s, rival_s, speedup, spread, plain_s = _paired(planned_step, rival, repeats, tick,
                                                             None if rival is plain else plain)
        plain_s = rival_s if plain_s is None else plain_s
        peak_err = measured_peak / p.predicted_peak - 1
        predicted_s = plain_s + p.predicted_overhead_seconds + p.predicted_extra_seconds
        time_err = plan_s / predicted_s - 1
        emit({"bench": "planner", "workload": key, "model": name, "fraction": fraction,
              "budget": budget, "plain_peak": plain_peak, "predicted_peak": p.predicted_peak,
              "measured_peak": measured_peak, "fits": measured_peak <= budget,
              "depth": p.depth, "stages": p.stages,
              "predicted_step_s": round(predicted_s, 4), "plan_step_s": round(plan_s, 4),
              "best_equal_segments": best, "best_equal_step_s": round(rival_s, 4) if best
              else None, "speedup": round(speedup, 3) if best else None,
              "speedup_iqr": round(spread, 3) if best else None,
              "profile_s": round(profile_s, 2), "solve_s": round(solve_s, 2),
              "clock": clock, "machine": machine})
        rows.append([
            key, f"{fraction:.0%}", f"{measured_peak / budget:.2f}", f"{peak_err:+.1%}",
            f"{plan_s * 1e3:.0f}", f"{time_err:+.1%}", str(p.depth - 1),
            "-" if best is None else ("plain" if best == 1 else str(best)),
            "-" if best is None else f"{rival_s * 1e3:.0f}",
            "-" if best is None else f"{speedup:.2f}x ±{spread / 2:.2f}",
        ])
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    args = workload_args(__doc__, argv, repeats=5, warmup=1, clock=True)
    machine = machine_info()
    catalogue = {**(SMALL if args.small else FULL), **(EXTRA_SMALL if args.small else EXTRA)}
    only = args.only if args.only != "W1,W2,W3" else "W1,W2,W3,train,gpt"
    rows = []
    for key in only.split(","):
        name, sizes = catalogue[key]
        rows += run(key, name, sizes, args.repeats, machine, args.clock)
    print()
    print(f"graph planner, gradients zeroed in place; {machine['cpu']}, {machine['cores']} "
          f"cores (shared), BLAS {machine['blas']}; paired timing ({args.clock} clock), median "
          f"of {args.repeats}")
    print(table(["model", "budget", "peak/budget", "peak vs predicted", "plan ms",
                 "time vs predicted", "levels", "best equal", "its ms", "plan speedup"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
