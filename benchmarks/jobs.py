"""Batches of small products as jobs on the helper threads (NOTE [ Products as jobs ] in
memgrad/ops/parts.py), against the same products without them (in Python parts, or whole
on the calling thread below the parts' threshold): attention's three causal forms at the
sizes of ``memgrad train``'s model, and the training steps of ``benchmarks/small.py``'s
two models, plain and checkpointed, with the jobs on and off in turn in one process.

Prints one JSON line per measurement, then a table of medians (and best) in milliseconds.

Usage:
    python benchmarks/jobs.py [--repeats 30]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from checkpointing import make_step
from common import emit, interleaved, machine_info, table
from small import MODELS, memgrad_batch, memgrad_model

import memgrad as mg
from memgrad.ops import parts
from memgrad.ops.nn import causal_matmul

__all__ = ["main"]

OFF = 1 << 62  # JOB_PARTS_MIN_MACS that no product reaches
CALLS = 20  # calls of a causal form per timed run (the table gives the time of one)


def _switched(fn: Callable[[], Any], threshold: int) -> Callable[[], None]:
    def run() -> None:
        parts.JOB_PARTS_MIN_MACS = threshold
        fn()

    return run


def _causal_cases() -> dict[str, Callable[[], Any]]:
    """The three causal forms of one attention layer of the ``train`` model, no_grad."""
    sizes = MODELS["train"]
    n, t, h = sizes["batch"], sizes["seq"], sizes["heads"]
    d = sizes["d_model"] // h
    rng = np.random.default_rng(0)

    def heads() -> mg.Tensor:
        rows = rng.standard_normal((n, t, h * d)).astype(np.float32)
        return mg.tensor(rows.reshape(n, t, h, d).swapaxes(1, 2))

    q, k, v, g = heads(), heads(), heads(), heads()
    w = mg.tensor(rng.standard_normal((n, h, t, t)).astype(np.float32))

    def form(a: mg.Tensor, b: mg.Tensor, name: str) -> Callable[[], Any]:
        def run() -> None:
            with mg.no_grad():
                for _ in range(CALLS):
                    causal_matmul(a, b, form=name, block=32)

        return run

    return {"abT (scores)": form(q, k, "abT"), "ab (weights @ values)": form(w, v, "ab"),
            "aTb (value gradient)": form(w, g, "aTb")}


def _step_cases() -> dict[str, Callable[[], None]]:
    cases = {}
    for name, sizes in MODELS.items():
        x, loss_fn = memgrad_batch(sizes)
        for mode, segments in (("plain", None), ("checkpointed", sizes["blocks"])):
            cases[f"{name} step, {mode}"] = make_step(memgrad_model(sizes), x, loss_fn,
                                                      segments)
    return cases


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (default: 30)")
    args = parser.parse_args(argv)
    machine = machine_info()
    default = parts.JOB_PARTS_MIN_MACS
    rows = []
    for label, fn in {**_causal_cases(), **_step_cases()}.items():
        step = "step" in label
        times = interleaved({"on": _switched(fn, default), "off": _switched(fn, OFF)},
                            args.repeats, 2, lead=1 if step else 0)  # a step after a step
        parts.JOB_PARTS_MIN_MACS = default
        per = 1 if step else CALLS
        (on_best, on), (off_best, off) = ((b / per, m / per) for b, m in (times["on"],
                                                                          times["off"]))
        emit({"bench": "jobs", "case": label, "jobs_ms": round(on * 1e3, 4),
              "without_ms": round(off * 1e3, 4), "repeats": args.repeats, "machine": machine})
        rows.append([label, f"{on * 1e3:.3f} ({on_best * 1e3:.3f})",
                     f"{off * 1e3:.3f} ({off_best * 1e3:.3f})", f"{on / off:.2f}x"])
    print()
    print(f"products as jobs, ms, median (best) of {args.repeats}, interleaved; "
          f"{machine['cpu']}, {machine['cores']} cores, BLAS {machine['blas']}")
    print(table(["case", "jobs", "without", "ratio"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
