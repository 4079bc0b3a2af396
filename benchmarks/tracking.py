"""What memory tracking costs: a training step of W1-W3 and of ``memgrad train``'s language
model (its default sizes: small arrays, many ops), and the 1,000-op chain of
benchmarks/overhead.py, with accounting off and inside ``mg.memory.track()``.

Usage:
    python benchmarks/tracking.py [--repeats 5]
"""

from __future__ import annotations

import argparse

import numpy as np
from checkpointing import make_step
from common import best_time, emit, machine_info, table
from overhead import memgrad_cases
from workloads import FULL

import memgrad as mg
from memgrad import models

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs (default: 5)")
    args = parser.parse_args(argv)
    machine = machine_info()
    cases = {"chain (1,000 ops)": memgrad_cases()["forward_backward"]}
    for key, (name, sizes) in FULL.items():
        model, x, loss_fn = models.BUILTIN[name](**sizes)
        cases[f"{key} step"] = make_step(model, x, loss_fn, None)
    mg.manual_seed(0)
    lm = models.build_lm(d_model=64, heads=4, blocks=4, seq=64)
    tokens = np.random.default_rng(0).integers(0, models.VOCAB, 10_000)  # timing only
    x, y = models.sample_batch(tokens, 16, 64, np.random.default_rng(0))
    cases["memgrad train's LM step"] = make_step(lm, x, models.lm_loss(y), None)
    rows = []
    for label, fn in cases.items():
        off, _ = best_time(fn, args.repeats, 2)
        with mg.memory.track():
            on, _ = best_time(fn, args.repeats, 2)
        emit({"bench": "tracking", "case": label, "off_s": round(off, 5), "on_s": round(on, 5),
              "overhead": round(on / off - 1, 4), "machine": machine})
        rows.append([label, off, on, f"{(on / off - 1) * 100:+.1f}%"])
    print()
    print(table(["case", "off s", "tracked s", "overhead"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
