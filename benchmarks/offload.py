"""Offload beside recomputation on W1-W3: plain, checkpointed, saved tensors on disk, both.

Each configuration runs the training step (forward + loss + backward + SGD step with
learning rate 0, gradients zeroed in place): plain; ``checkpoint_sequential`` at
round(sqrt(n)) segments; under ``autograd.graph.save_on_disk`` (saved tensors of 64 KiB
and more go to files in a temporary directory until backward); and both (the segments'
inputs go to disk). The configurations are timed in turn within each round, so that all see
the same load. Reported: the median step time and its paired ratio to the plain step (the
median and quartiles of the rounds' ratios), the peak tracked bytes above the pre-step level
(``mg.memory.track``: tensor storage in memory; the memory-mapped files read back in
backward are file pages, not counted) and its ratio to plain, and whether the gradients
equal the plain run's.

Usage:
    python benchmarks/offload.py [--repeats 5] [--only W1] [--small]
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from common import emit, machine_info, paired_cell, table, timed_in_turn, workload_args
from workloads import FULL, SMALL

import memgrad as mg
from memgrad import models
from memgrad.autograd.graph import save_on_disk
from memgrad.checkpoint import checkpoint_sequential

__all__ = ["make_step", "main"]

MIN_BYTES = 64 * 1024


def make_step(model: Any, x: Any, loss_fn: Callable, segments: int | None,
              offload: bool) -> Callable[[], list[np.ndarray]]:
    """A training step; returns the parameter gradients' arrays (not copied)."""
    opt = mg.optim.SGD(model.parameters(), lr=0.0)
    params = list(model.parameters())

    def step() -> list[np.ndarray]:
        opt.zero_grad(set_to_none=False)
        hooks = save_on_disk(min_bytes=MIN_BYTES) if offload else contextlib.nullcontext()
        with hooks:
            out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
            loss = loss_fn(out)
        loss.backward()
        opt.step()
        return [p.grad.numpy() for p in params]

    return step


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the tables; returns the exit status."""
    args = workload_args(__doc__, argv, repeats=5, warmup=1)
    machine = machine_info()
    for key in args.only.split(","):
        name, sizes = (SMALL if args.small else FULL)[key]
        model, x, loss_fn = models.BUILTIN[name](**sizes)
        n = len(model)
        segments = round(math.sqrt(n))
        reference = [g.copy() for g in make_step(model, x, loss_fn, None, False)()]
        configs = {"plain": (None, False), f"checkpoint {segments}": (segments, False),
                   "save_on_disk": (None, True),
                   f"checkpoint {segments} + save_on_disk": (segments, True)}
        steps = {label: make_step(model, x, loss_fn, seg, off)
                 for label, (seg, off) in configs.items()}
        timed = timed_in_turn(steps, args.repeats, args.warmup, base="plain")
        rows, base_peak = [], None
        for label, step in steps.items():
            with mg.memory.track() as t:
                grads = step()
            peak = t.peak_above_start
            same = all(np.array_equal(a, b) for a, b in zip(grads, reference))
            base_peak = peak if base_peak is None else base_peak
            seconds, paired = timed[label]
            emit({"bench": "offload", "workload": key, "config": label,
                  "step_s": round(seconds, 4), "peak_bytes": peak,
                  "time_ratio": round(paired[0], 3), "time_q1": round(paired[1], 3),
                  "time_q3": round(paired[2], 3), "peak_ratio": round(peak / base_peak, 3),
                  "gradients_equal": same, "machine": machine})
            rows.append([label, seconds, paired_cell(paired), peak,
                         f"{peak / base_peak:.2f}x", "yes" if same else "NO"])
        print()
        print(f"{key} ({name}, {n} stages): median step of {args.repeats} rounds, its paired "
              "ratio to the plain step [quartiles]; peak tracked bytes above the pre-step level")
        print(table(["config", "step s", "time [q1, q3]", "peak bytes", "peak",
                     "grads equal"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
