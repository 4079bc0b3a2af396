"""What memory tracking costs: a training step of W1-W3 and of ``memgrad train``'s language
model (its default sizes: small arrays, many ops), and the 1,000-op chain of
benchmarks/overhead.py (tensor operands, forward and backward), with accounting off and
inside ``mg.memory.track()``.

Usage:
    python benchmarks/tracking.py [--repeats 5] [--warmup 2] [--only W1,W2,W3] [--small]
"""

from __future__ import annotations

import numpy as np
from checkpointing import make_step
from common import best_time, emit, machine_info, table, workload_args
from overhead import memgrad_cases
from workloads import FULL, SMALL

import memgrad as mg
from memgrad import models

__all__ = ["main"]

# the language model of ``memgrad train`` at its defaults, and tiny for a smoke run
LM_SIZES = dict(d_model=64, heads=4, blocks=4, seq=64)
LM_SMALL = dict(d_model=16, heads=2, blocks=1, seq=16)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    args = workload_args(__doc__, argv, repeats=5, warmup=2)
    machine = machine_info()
    cases = {"chain (1,000 ops)": memgrad_cases()[("tensor", "forward_backward")]}
    for key in args.only.split(","):
        name, sizes = (SMALL if args.small else FULL)[key]
        model, x, loss_fn = models.BUILTIN[name](**sizes)
        cases[f"{key} step"] = make_step(model, x, loss_fn, None)
    mg.manual_seed(0)
    lm_sizes = LM_SMALL if args.small else LM_SIZES
    lm = models.build_lm(**lm_sizes)
    tokens = np.random.default_rng(0).integers(0, models.VOCAB, 10_000)  # timing only
    x, y = models.sample_batch(tokens, 16, lm_sizes["seq"], np.random.default_rng(0))
    cases["memgrad train's LM step"] = make_step(lm, x, models.lm_loss(y), None)
    rows = []
    for label, fn in cases.items():
        off, _ = best_time(fn, args.repeats, args.warmup)
        with mg.memory.track():
            on, _ = best_time(fn, args.repeats, args.warmup)
        emit({"bench": "tracking", "case": label, "off_s": round(off, 5), "on_s": round(on, 5),
              "overhead": round(on / off - 1, 4), "machine": machine})
        rows.append([label, off, on, f"{(on / off - 1) * 100:+.1f}%"])
    print()
    print(table(["case", "off s", "tracked s", "overhead"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
