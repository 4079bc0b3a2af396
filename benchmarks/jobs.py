"""Batches of small products as jobs on the helper threads (NOTE [ Products as jobs ] in
memgrad/ops/parts.py), against the same products without them (in Python parts, or whole
on the calling thread below the parts' threshold): attention's three causal forms at the
sizes of ``memgrad train``'s model, and the training steps of ``benchmarks/small.py``'s
two models, plain and checkpointed, with the jobs on and off in turn in one process.

With ``--kernels``, the element-wise and row kernels of an op in parts as jobs (NOTE
[ Kernels as jobs ]) against the same kernels in Python parts: the attention softmax
forward and backward and GELU forward and backward at ``train``'s sizes, relu and its
backward at W3's (``benchmarks/workloads.py``), and the ``train`` steps.

Prints one JSON line per measurement, then a table of medians (and best) in milliseconds.

Usage:
    python benchmarks/jobs.py [--repeats 30] [--kernels]
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
from memgrad.ops.elementwise import relu, relu_backward
from memgrad.ops.nn import (
    _attention_softmax,
    _gelu,
    attention_softmax_backward,
    causal_matmul,
    gelu_backward,
)

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


def _kernel_cases() -> dict[str, Callable[[], Any]]:
    """The kernel-backed primitives' forwards (NumPy arrays in and out) at ``train``'s sizes
    (the attention softmax and GELU) and W3's (relu)."""
    sizes = MODELS["train"]
    n, t, h, d = sizes["batch"], sizes["seq"], sizes["heads"], sizes["d_model"]
    rng = np.random.default_rng(0)
    scores, g = (rng.standard_normal((n, h, t, t)).astype(np.float32) for _ in range(2))
    x, gx = (rng.standard_normal((n * t, 4 * d)).astype(np.float32) for _ in range(2))
    a, ga = (rng.standard_normal((16, 32, 32, 32)).astype(np.float32) for _ in range(2))
    w = _attention_softmax.forward(scores, scale=0.25, causal=True)
    y = relu.forward(a)

    def calls(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(CALLS):
                fn()

        return run

    return {
        "attention softmax": calls(lambda: _attention_softmax.forward(scores, scale=0.25,
                                                                      causal=True)),
        "attention softmax backward": calls(
            lambda: attention_softmax_backward.forward(g, w, scale=0.25)),
        "gelu (tanh)": calls(lambda: _gelu.forward(x, approximate="tanh")),
        "gelu (tanh) backward": calls(lambda: gelu_backward.forward(gx, x, approximate="tanh")),
        "relu (W3)": calls(lambda: relu.forward(a)),
        "relu backward (W3)": calls(lambda: relu_backward.forward(ga, y)),
    }


def _kernels_switched(fn: Callable[[], Any], on: bool) -> Callable[[], None]:
    def run() -> None:
        parts.kernel_as_jobs = _KERNEL_AS_JOBS if on else _never
        fn()

    return run


_KERNEL_AS_JOBS = parts.kernel_as_jobs


def _never(*args: Any, **kwargs: Any) -> bool:
    return False  # the kernels in Python parts


def _step_cases(models: tuple[str, ...] = tuple(MODELS)) -> dict[str, Callable[[], None]]:
    cases = {}
    for name in models:
        sizes = MODELS[name]
        x, loss_fn = memgrad_batch(sizes)
        for mode, segments in (("plain", None), ("checkpointed", sizes["blocks"])):
            cases[f"{name} step, {mode}"] = make_step(memgrad_model(sizes), x, loss_fn,
                                                      segments)
    return cases


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (default: 30)")
    parser.add_argument("--kernels", action="store_true",
                        help="the element-wise and row kernels as jobs instead of the products")
    args = parser.parse_args(argv)
    machine = machine_info()
    default = parts.JOB_PARTS_MIN_MACS
    rows = []
    cases = {**_kernel_cases(), **_step_cases(("train",))} if args.kernels else \
        {**_causal_cases(), **_step_cases()}
    for label, fn in cases.items():
        step = "step" in label
        runs = {"on": _kernels_switched(fn, True), "off": _kernels_switched(fn, False)} \
            if args.kernels else {"on": _switched(fn, default), "off": _switched(fn, OFF)}
        times = interleaved(runs, args.repeats, 2, lead=1 if step else 0)  # a step after a step
        parts.JOB_PARTS_MIN_MACS = default
        parts.kernel_as_jobs = _KERNEL_AS_JOBS
        per = 1 if step else CALLS
        (on_best, on), (off_best, off) = ((b / per, m / per) for b, m in (times["on"],
                                                                          times["off"]))
        emit({"bench": "kernel_jobs" if args.kernels else "jobs", "case": label,
              "jobs_ms": round(on * 1e3, 4), "without_ms": round(off * 1e3, 4),
              "repeats": args.repeats, "machine": machine})
        rows.append([label, f"{on * 1e3:.3f} ({on_best * 1e3:.3f})",
                     f"{off * 1e3:.3f} ({off_best * 1e3:.3f})", f"{on / off:.2f}x"])
    print()
    what = "kernels" if args.kernels else "products"
    print(f"{what} as jobs, ms, median (best) of {args.repeats}, interleaved; "
          f"{machine['cpu']}, {machine['cores']} cores, BLAS {machine['blas']}")
    print(table(["case", "jobs", "without", "ratio"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
