"""Checkpointing trade-off on W1-W3: step time and peak tracked bytes per segment count.

For each workload, the training step (forward + loss + backward + SGD step) runs plain
("none") and through ``checkpoint_sequential`` at 1, 2, 4, round(sqrt(n)) and n segments
(n stages). Gradients are zeroed in place before each step (they exist from a first step),
so the peak counts activations and transients only. The configurations of a workload are
timed in turn within each round, so that all see the same load on a shared machine.
Reported: the median step time; its paired ratio to the plain step (the median and
quartiles of the rounds' ratios, as benchmarks/workloads.py compares memgrad with PyTorch;
a target is met when the upper quartile is at or below it, not met when the lower quartile
is above it, and a tie otherwise); the peak tracked bytes above the pre-step level
(``mg.memory.track``, in a separate run: tracking is off while timing) and its ratio to the
plain run's; whether the gradients equal the plain run's.

Usage:
    python benchmarks/checkpointing.py [--repeats 5] [--only W1,W2,W3] [--small]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from common import emit, machine_info, paired_cell, table, timed_in_turn, verdict, workload_args
from workloads import FULL, SMALL

import memgrad as mg
from memgrad import models
from memgrad.checkpoint import checkpoint_sequential

__all__ = ["make_step", "main"]

TARGET_TIME = 1.30  # W1 at round(sqrt(n)) segments, step time over plain
TARGET_PEAK = 0.40  # W1 at round(sqrt(n)) segments, peak bytes over plain


def make_step(model: Any, x: Any, loss_fn: Callable, segments: Any) -> Callable[[], None]:
    """A training step; ``segments`` None runs the model plainly. The SGD step has learning
    rate 0 (all the work, no change), so every configuration sees the same parameters and
    their gradients can be compared."""
    opt = mg.optim.SGD(model.parameters(), lr=0.0)

    def step() -> None:
        opt.zero_grad(set_to_none=False)
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
        loss_fn(out).backward()
        opt.step()

    return step


def peak_bytes(step: Callable[[], None]) -> int:
    """The most bytes alive during one step, above the level before it."""
    with mg.memory.track() as t:
        step()
    return t.peak_above_start


def gradients(model: Any, x: Any, loss_fn: Callable, segments: Any) -> list[np.ndarray]:
    model.zero_grad(set_to_none=False)
    out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
    loss_fn(out).backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the tables; returns the exit status."""
    args = workload_args(__doc__, argv, repeats=5, warmup=1)
    machine = machine_info()
    for key in args.only.split(","):
        name, sizes = (SMALL if args.small else FULL)[key]
        model, x, loss_fn = models.BUILTIN[name](**sizes)
        n = len(model)
        counts = sorted({c for c in (1, 2, 4, round(math.sqrt(n)), n) if 1 <= c <= n})
        make_step(model, x, loss_fn, None)()  # the gradients exist from here on
        reference = gradients(model, x, loss_fn, None)
        configs = {"none" if c is None else str(c): c for c in [None, *counts]}
        steps = {label: make_step(model, x, loss_fn, c) for label, c in configs.items()}
        timed = timed_in_turn(steps, args.repeats, args.warmup, base="none")
        rows, base_peak = [], None
        for label, segments in configs.items():
            peak = peak_bytes(steps[label])
            same = all(np.array_equal(a, b)
                       for a, b in zip(gradients(model, x, loss_fn, segments), reference))
            base_peak = peak if base_peak is None else base_peak
            seconds, (ratio, q1, q3) = timed[label]
            emit({"bench": "checkpoint", "workload": key, "stages": n, "segments": label,
                  "step_s": round(seconds, 4), "peak_bytes": peak,
                  "time_ratio": round(ratio, 3), "time_q1": round(q1, 3),
                  "time_q3": round(q3, 3), "peak_ratio": round(peak / base_peak, 3),
                  "gradients_equal": same, "machine": machine})
            rows.append([label, seconds, paired_cell(timed[label][1]), peak,
                         f"{peak / base_peak:.2f}x", "yes" if same else "NO"])
        print()
        print(f"{key} ({name}, {n} stages): median step of {args.repeats} rounds, its paired "
              "ratio to the plain step [quartiles]; peak tracked bytes above the pre-step level")
        print(table(["segments", "step s", "time [q1, q3]", "peak bytes", "peak",
                     "grads equal"], rows))
        if key == "W1" and not args.small:
            label = str(round(math.sqrt(n)))
            _, q1, q3 = timed[label][1]
            peak = float(rows[list(configs).index(label)][4][:-1])
            print(f"target at {label} segments: time <= {TARGET_TIME}x: "
                  f"{verdict(q1, q3, TARGET_TIME)}; peak <= {TARGET_PEAK:.0%}: "
                  f"{'met' if peak <= TARGET_PEAK else 'not met'}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
