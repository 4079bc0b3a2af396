"""Checkpointing trade-off on W1-W3: step time and peak tracked bytes per segment count.

For each workload, the training step (forward + loss + backward + SGD step) runs plain
("none") and through ``checkpoint_sequential`` at 1, 2, 4, round(sqrt(n)) and n segments
(n stages). Gradients are zeroed in place before each step (they exist from a first step),
so the peak counts activations and transients only. Reported: the best step time, the peak
tracked bytes above the pre-step level (``mg.memory.track``, in a separate run: tracking is
off while timing), both as ratios against ``none``, and whether the gradients equal the
plain run's.

Usage:
    python benchmarks/checkpointing.py [--repeats 3] [--only W1,W2,W3] [--small]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from common import best_time, emit, machine_info, table, workload_args
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
    args = workload_args(__doc__, argv, repeats=3, warmup=1)
    machine = machine_info()
    for key in args.only.split(","):
        name, sizes = (SMALL if args.small else FULL)[key]
        model, x, loss_fn = models.BUILTIN[name](**sizes)
        n = len(model)
        counts = sorted({c for c in (1, 2, 4, round(math.sqrt(n)), n) if 1 <= c <= n})
        make_step(model, x, loss_fn, None)()  # the gradients exist from here on
        reference = gradients(model, x, loss_fn, None)
        rows, base = [], None
        for segments in [None, *counts]:
            step = make_step(model, x, loss_fn, segments)
            seconds, _ = best_time(step, args.repeats, args.warmup)
            peak = peak_bytes(step)
            same = all(np.array_equal(a, b)
                       for a, b in zip(gradients(model, x, loss_fn, segments), reference))
            if segments is None:
                base = (seconds, peak)
            label = "none" if segments is None else str(segments)
            row = emit({"bench": "checkpoint", "workload": key, "stages": n, "segments": label,
                        "step_s": round(seconds, 4), "peak_bytes": peak,
                        "time_ratio": round(seconds / base[0], 3),
                        "peak_ratio": round(peak / base[1], 3), "gradients_equal": same,
                        "machine": machine})
            rows.append([label, seconds, f"{row['time_ratio']:.2f}x", peak,
                         f"{row['peak_ratio']:.2f}x", "yes" if same else "NO"])
        print()
        print(f"{key} ({name}, {n} stages): best step of {args.repeats}, peak tracked bytes "
              "above the pre-step level")
        print(table(["segments", "step s", "time", "peak bytes", "peak", "grads equal"], rows))
        if key == "W1" and not args.small:
            sqrt_row = next(r for r in rows if r[0] == str(round(math.sqrt(n))))
            t, p = float(sqrt_row[2][:-1]), float(sqrt_row[4][:-1])
            print(f"target at {sqrt_row[0]} segments: time <= {TARGET_TIME}x: "
                  f"{'met' if t <= TARGET_TIME else 'not met'}; peak <= {TARGET_PEAK:.0%}: "
                  f"{'met' if p <= TARGET_PEAK else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
