"""Framework overhead per op: chains of 1,000 elementwise ops on 16-element float32 tensors.

Two chains from a leaf ``x`` that requires grad, each ``y = y * a; y = y + b; y = y.tanh();
y = y - c`` repeated 250 times: with tensor operands (``a``, ``b``, ``c`` tensors that need
no gradient) and with Python scalar operands. With 16 elements the arithmetic is
negligible, so the time per op is what the framework itself costs: building the tensor,
recording the graph node, and running its backward. In microseconds per op of the chain
(the final ``sum`` and its backward are timed but not counted).

PyTorch (eager, CPU, two threads) is measured too when ``import torch`` works, a comparison
only, in the same process and interleaved with memgrad's runs (each repeat times every
case in turn), so that both see the same load on a shared machine: compare the medians,
or the paired ratio (the median and quartiles of the ratios of the runs timed in the same
round), which a change of load between rounds moves less.

Prints one JSON line per measurement, then a plain-text table.

``--clock cpu`` times with the process's CPU time instead of the wall clock: on a machine
shared with other jobs it leaves out the time they hold the cores (the ops of 16 elements
run on one thread in both frameworks).

Each timed run follows ``--lead`` untimed runs of the same case (default 3), so that a case
follows itself, as ops follow ops of their own framework in a training loop. ``--lead 0``
times each case right after the previous case in the round (the first of each framework's
after the other framework's last) and the full garbage collection the rounds make: a cold
start, which the figures before 2026-12-07's seventh session measured.

Usage:
    python benchmarks/overhead.py [--repeats 30] [--warmup 3] [--clock wall|cpu] [--lead N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import (
    interleaved_rounds,
    machine_info,
    median,
    paired_cell,
    paired_ratio,
    torch_or_none,
)

import memgrad as mg

__all__ = ["memgrad_cases", "torch_cases", "main"]

LINKS = 250
OPS = 4 * LINKS
NUMEL = 16
OPERANDS = ("tensor", "scalar")
MODES = ("forward_backward", "forward", "forward_no_grad")


def _inputs() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(NUMEL).astype(np.float32)
    a = (0.5 + 0.5 * rng.random(NUMEL)).astype(np.float32)
    b = (0.1 * rng.standard_normal(NUMEL)).astype(np.float32)
    c = np.full(NUMEL, 0.5, np.float32)
    return x, a, b, c


def _cases(x: Any, operands: dict[str, tuple], no_grad: Callable[[], Any]) -> dict:
    """The timed runs over both chains, for tensors of either framework:
    ``{(operands, mode): fn}``."""
    cases = {}
    for kind, (a, b, c) in operands.items():

        def chain(a: Any = a, b: Any = b, c: Any = c) -> Any:
            y = x
            for _ in range(LINKS):
                y = y * a
                y = y + b
                y = y.tanh()
                y = y - c
            return y

        def forward_backward(chain: Callable = chain) -> None:
            chain().sum().backward()
            x.grad = None

        def forward(chain: Callable = chain) -> None:
            chain().sum()

        def forward_no_grad(chain: Callable = chain) -> None:
            with no_grad():
                chain().sum()

        cases[(kind, "forward_backward")] = forward_backward
        cases[(kind, "forward")] = forward
        cases[(kind, "forward_no_grad")] = forward_no_grad
    return cases


def memgrad_cases() -> dict[tuple[str, str], Callable[[], None]]:
    """The memgrad runs to time, by (operands, mode).

    Example:
        >>> sorted(memgrad_cases())[:2]
        [('scalar', 'forward'), ('scalar', 'forward_backward')]
    """
    xn, an, bn, cn = _inputs()
    x = mg.tensor(xn, requires_grad=True)
    ops = {"tensor": (mg.tensor(an), mg.tensor(bn), mg.tensor(cn)), "scalar": (0.9, 0.1, 0.5)}
    return _cases(x, ops, mg.no_grad)


def torch_cases(torch: Any) -> dict[tuple[str, str], Callable[[], None]]:
    """The same runs in PyTorch eager on the CPU."""
    xn, an, bn, cn = _inputs()
    x = torch.tensor(xn, requires_grad=True)
    ops = {"tensor": (torch.tensor(an), torch.tensor(bn), torch.tensor(cn)),
           "scalar": (0.9, 0.1, 0.5)}
    return _cases(x, ops, torch.no_grad)


def _table(times: dict, paired: dict, machine: dict, args: argparse.Namespace,
           note: str | None) -> str:
    lines = [
        f"overhead: {OPS} elementwise ops on {NUMEL}-element float32 tensors, us per op "
        f"({args.clock} clock), median (best) of {args.repeats} interleaved runs"
        f"{f', {args.lead} untimed before each' if args.lead else ''}; the ratio "
        "of the medians, and paired: the median [quartiles] of the runs' ratios round by round",
        f"machine: {machine['cpu']}, {machine['cores']} cores "
        f"({machine['cores_available']} available), BLAS {machine['blas']}, {machine['date']}",
        "",
        f"{'operands':<10}{'mode':<18}{'memgrad':>16}{'pytorch':>16}{'ratio':>8}"
        f"{'paired [q1, q3]':>21}",
    ]
    for kind in OPERANDS:
        for mode in MODES:
            ours = times[("memgrad", kind, mode)]
            theirs = times.get(("pytorch", kind, mode))
            cell = f"{ours[1]:>8.2f} ({ours[0]:.2f})"
            tcell = f"{theirs[1]:>8.2f} ({theirs[0]:.2f})" if theirs else f"{'-':>16}"
            ratio = f"{ours[1] / theirs[1]:>7.2f}x" if theirs else f"{'-':>8}"
            pcell = paired_cell(paired[(kind, mode)]) if paired else "-"
            lines.append(f"{kind:<10}{mode:<18}{cell:>16}{tcell:>16}{ratio}{pcell:>21}")
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (default: 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or this process's CPU time (default: wall)")
    parser.add_argument("--lead", type=int, default=3,
                        help="untimed runs of the same case before each timed one (default: 3)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.lead < 0:
        parser.error(f"--lead: expected a count >= 0, got {args.lead}")

    machine = machine_info()
    fns = {("memgrad",) + k: fn for k, fn in memgrad_cases().items()}
    versions = {"memgrad": mg.__version__}
    torch = torch_or_none()
    note = None
    if torch is None:
        note = "pytorch: not installed, its column is skipped (a comparison only)"
    else:
        fns.update({("pytorch",) + k: fn for k, fn in torch_cases(torch).items()})
        versions["pytorch"] = torch.__version__
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rounds = interleaved_rounds(fns, args.repeats, args.warmup, clock, args.lead)
    times = {k: (min(v) / OPS * 1e6, median(v) / OPS * 1e6) for k, v in rounds.items()}
    paired = {k[1:]: paired_ratio(v, rounds[("pytorch",) + k[1:]])
              for k, v in rounds.items() if k[0] == "memgrad" and torch is not None}
    for (framework, kind, mode), (best, mid) in times.items():
        print(json.dumps({
            "bench": "overhead", "framework": framework, "version": versions[framework],
            "operands": kind, "mode": mode, "us_per_op": round(best, 3),
            "median_us_per_op": round(mid, 3), "ops": OPS, "numel": NUMEL,
            "dtype": "float32", "repeats": args.repeats, "warmup": args.warmup,
            "clock": args.clock, "lead": args.lead,
            "paired_ratio": [round(r, 3) for r in paired[(kind, mode)]]
            if framework == "memgrad" and paired else None,
            "machine": machine,
        }), flush=True)
    print()
    print(_table(times, paired, machine, args, note))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
