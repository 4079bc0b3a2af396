"""Framework overhead per op: a chain of 1,000 elementwise ops on 16-element float32 tensors.

The chain is ``y = y * a; y = y + b; y = y.tanh(); y = y - 0.5``, repeated 250 times from a
leaf ``x`` that requires grad. With 16 elements the arithmetic is negligible, so the time
per op is what the framework itself costs: building the tensor, recording the graph node,
and running its backward. Reported as the best of ``--repeats`` runs after ``--warmup`` runs,
in microseconds per op of the chain (the final ``sum`` and its backward are included in the
time but not in the op count).

Prints one JSON line per measurement, then a plain-text table. PyTorch (eager, CPU, two
threads) is measured too when ``import torch`` works; it is a comparison only.

Usage:
    python benchmarks/overhead.py [--repeats 30] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np
from common import best_time, machine_info

import memgrad as mg

__all__ = ["memgrad_cases", "torch_cases", "main"]

LINKS = 250
OPS = 4 * LINKS
NUMEL = 16
TARGET_US = 12.0  # forward+backward, per op
TARGET_RATIO = 1.5  # forward+backward, memgrad over pytorch


def _inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(NUMEL).astype(np.float32)
    a = (0.5 + 0.5 * rng.random(NUMEL)).astype(np.float32)
    b = (0.1 * rng.standard_normal(NUMEL)).astype(np.float32)
    return x, a, b


def _cases(x: Any, a: Any, b: Any, no_grad: Callable[[], Any]) -> dict[str, Callable[[], None]]:
    """The three timed runs over the chain, for tensors of either framework."""

    def chain() -> Any:
        y = x
        for _ in range(LINKS):
            y = y * a
            y = y + b
            y = y.tanh()
            y = y - 0.5
        return y

    def forward_backward() -> None:
        chain().sum().backward()
        x.grad = None

    def forward() -> None:
        chain().sum()

    def forward_no_grad() -> None:
        with no_grad():
            chain().sum()

    return {"forward_backward": forward_backward, "forward": forward,
            "forward_no_grad": forward_no_grad}


def memgrad_cases() -> dict[str, Callable[[], None]]:
    """The memgrad runs to time, by mode: forward+backward, forward, forward under no_grad.

    Example:
        >>> sorted(memgrad_cases())
        ['forward', 'forward_backward', 'forward_no_grad']
    """
    xn, an, bn = _inputs()
    return _cases(mg.tensor(xn, requires_grad=True), mg.tensor(an), mg.tensor(bn), mg.no_grad)


def torch_cases() -> tuple[dict[str, Callable[[], None]], str]:
    """The same runs in PyTorch eager on the CPU with two threads, and the torch version.

    Raises ``ImportError`` when PyTorch is not installed.
    """
    import torch

    torch.set_num_threads(2)
    xn, an, bn = _inputs()
    x = torch.tensor(xn, requires_grad=True)
    return _cases(x, torch.tensor(an), torch.tensor(bn), torch.no_grad), torch.__version__


def _measure(framework: str, version: str, cases: dict, args: argparse.Namespace,
             machine: dict) -> list[dict]:
    rows = []
    for mode, fn in cases.items():
        best, median = best_time(fn, args.repeats, args.warmup)
        row = {
            "bench": "overhead",
            "framework": framework,
            "version": version,
            "mode": mode,
            "us_per_op": round(best / OPS * 1e6, 3),
            "median_us_per_op": round(median / OPS * 1e6, 3),
            "ops": OPS,
            "numel": NUMEL,
            "dtype": "float32",
            "repeats": args.repeats,
            "warmup": args.warmup,
            "machine": machine,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _table(rows: list[dict], machine: dict, note: str | None) -> str:
    by = {(r["framework"], r["mode"]): r["us_per_op"] for r in rows}
    lines = [
        f"overhead: {OPS} elementwise ops on {NUMEL}-element float32 tensors, "
        "best of runs, us per op",
        f"machine: {machine['cpu']}, {machine['cores']} cores "
        f"({machine['cores_available']} available), BLAS {machine['blas']}, {machine['date']}",
        "",
        f"{'mode':<18}{'memgrad':>10}{'pytorch':>10}{'ratio':>8}",
    ]
    for mode in ("forward_backward", "forward", "forward_no_grad"):
        ours = by.get(("memgrad", mode))
        theirs = by.get(("pytorch", mode))
        t = f"{theirs:>10.2f}" if theirs is not None else f"{'-':>10}"
        ratio = f"{ours / theirs:>7.2f}x" if theirs else f"{'-':>8}"
        lines.append(f"{mode:<18}{ours:>10.2f}{t}{ratio}")
    ours = by[("memgrad", "forward_backward")]
    theirs = by.get(("pytorch", "forward_backward"))
    lines += ["", f"target: forward_backward <= {TARGET_US:g} us/op: "
              + ("met" if ours <= TARGET_US else "not met")]
    if theirs:
        lines.append(f"target: forward_backward <= {TARGET_RATIO:g}x pytorch: "
                     + ("met" if ours <= TARGET_RATIO * theirs else "not met"))
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (default: 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    machine = machine_info()
    rows = _measure("memgrad", mg.__version__, memgrad_cases(), args, machine)
    note = None
    try:
        cases, version = torch_cases()
    except ImportError as e:
        note = f"pytorch: skipped ({e})"
    else:
        rows += _measure("pytorch", version, cases, args, machine)
    print()
    print(_table(rows, machine, note))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
