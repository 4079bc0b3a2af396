"""The planner on W1-W3: under budgets of 25%, 50% and 75% of the plain peak, its plan's
measured and predicted peak and step time, against the best equal-count segmentation that
fits the same budget.

Gradients are zeroed in place before each step, so the peaks are activations and
transients. The plan and its rival are timed in turns after the sweep. The best equal count
is the fastest ``checkpoint_sequential(model, k, x)`` whose
measured peak fits the budget. Target: the plan is never slower than it, and at least 10% faster on
one of the three workloads.

Usage:
    python benchmarks/planner.py [--repeats 3] [--only W1,W2,W3] [--small]
"""

from __future__ import annotations

from checkpointing import make_step, peak_bytes
from common import best_time, emit, machine_info, table, workload_args
from workloads import FULL, SMALL

import memgrad as mg
from memgrad import models
from memgrad.checkpoint import plan

__all__ = ["main"]

FRACTIONS = (0.25, 0.50, 0.75)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the tables; returns the exit status."""
    args = workload_args(__doc__, argv, repeats=3, warmup=1)
    machine = machine_info()
    faster = []
    for key in args.only.split(","):
        name, sizes = (SMALL if args.small else FULL)[key]
        model, x, loss_fn = models.BUILTIN[name](**sizes)
        stages = list(model)
        n = len(stages)
        # gradients are zeroed in place before each step (they exist from a first step), so
        # the budgets are over activations and transients, as in benchmarks/checkpointing.py
        make_step(model, x, loss_fn, None)()
        equal = {}
        for k in range(1, n + 1):
            step = make_step(model, x, loss_fn, k if k > 1 else None)
            peak = peak_bytes(step)
            seconds, _ = best_time(step, args.repeats, args.warmup)
            equal[k] = (peak, seconds)
        plain_peak = equal[1][0]
        rows = []
        for fraction in FRACTIONS:
            budget = int(fraction * plain_peak)
            fitting = {k: v for k, v in equal.items() if v[0] <= budget}
            best_k = min(fitting, key=lambda k: fitting[k][1]) if fitting else None
            try:
                p = plan(stages, x, budget_bytes=budget)
            except mg.PlanError as e:
                emit({"bench": "planner", "workload": key, "fraction": fraction,
                      "budget": budget, "plan": None, "error": str(e), "machine": machine})
                rows.append([f"{fraction:.0%}", budget, "infeasible", None, None, None,
                             best_k, None, None])
                continue
            step = make_step(model, x, loss_fn, p)
            measured = peak_bytes(step)
            seconds, _ = best_time(step, args.repeats, args.warmup)
            if best_k:
                # time the plan and its rival in turns, so that a drift in the machine's
                # speed falls on both alike
                rival = make_step(model, x, loss_fn, best_k if best_k > 1 else None)
                for _ in range(args.repeats):
                    seconds = min(seconds, best_time(step, 1, 0)[0])
                    fitting[best_k] = (fitting[best_k][0],
                                       min(fitting[best_k][1], best_time(rival, 1, 0)[0]))
            speedup = fitting[best_k][1] / seconds if best_k else None
            if speedup:
                faster.append(speedup)
            emit({"bench": "planner", "workload": key, "fraction": fraction, "budget": budget,
                  "plan_sizes": p.sizes, "predicted_peak": p.predicted_peak,
                  "measured_peak": measured, "plan_step_s": round(seconds, 4),
                  "best_equal_segments": best_k,
                  "best_equal_step_s": best_k and round(fitting[best_k][1], 4),
                  "speedup": speedup and round(speedup, 3), "machine": machine})
            rows.append([f"{fraction:.0%}", budget, str(p.sizes), p.predicted_peak, measured,
                         seconds, best_k, best_k and fitting[best_k][1],
                         None if speedup is None else f"{speedup:.2f}x"])
        print()
        print(f"{key} ({name}, {n} stages), plain peak {plain_peak:,} bytes")
        print(table(["budget", "bytes", "plan sizes", "predicted", "measured", "plan step s",
                     "best equal", "its step s", "plan speedup"], rows))
    if faster:
        print(f"\ntarget: never slower ({min(faster):.2f}x at worst), >= 1.10x somewhere "
              f"({max(faster):.2f}x at best)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
