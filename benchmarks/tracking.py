"""What memory tracking costs: a training step of W1-W3 and of ``memgrad train``'s language
model (its default sizes: small arrays, many ops), and the 1,000-op chain of
benchmarks/overhead.py (tensor operands, forward and backward), with accounting off and
inside ``mg.memory.track()`` (entered for each tracked run: some 8 us). The two are timed in
turn within each round; the overhead is their paired ratio, the median and quartiles of the
rounds' ratios (as benchmarks/workloads.py compares memgrad with PyTorch).

Usage:
    python benchmarks/tracking.py [--repeats 5] [--warmup 2] [--only W1,W2,W3] [--small]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from checkpointing import make_step
from common import emit, machine_info, table, timed_in_turn, workload_args
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
        timed = timed_in_turn({"off": fn, "on": _tracked(fn)}, args.repeats, args.warmup,
                              base="off")
        off, (on, (ratio, q1, q3)) = timed["off"][0], timed["on"]
        emit({"bench": "tracking", "case": label, "off_s": round(off, 5), "on_s": round(on, 5),
              "overhead": round(ratio - 1, 4), "overhead_q1": round(q1 - 1, 4),
              "overhead_q3": round(q3 - 1, 4), "machine": machine})
        rows.append([label, off, on, f"{(ratio - 1) * 100:+.1f}% [{(q1 - 1) * 100:+.1f}%, "
                     f"{(q3 - 1) * 100:+.1f}%]"])
    print()
    print(f"median of {args.repeats} rounds, off and tracked in turn; the overhead is the "
          "paired ratio [quartiles]")
    print(table(["case", "off s", "tracked s", "overhead [q1, q3]"], rows))
    return 0


def _tracked(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with mg.memory.track():
            fn()

    return run


if __name__ == "__main__":
    raise SystemExit(main())
