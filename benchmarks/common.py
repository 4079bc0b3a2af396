"""What every benchmark needs: the machine's description, timing, and output.

Each benchmark prints one JSON line per measurement (with the machine), then a table.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import memgrad as mg
from memgrad.interpreters import Interpreter, push

__all__ = ["machine_info", "interleaved", "interleaved_rounds", "median",
           "paired_ratio", "timed_in_turn", "paired_cell", "verdict", "emit", "table",
           "torch_or_none", "workload_args", "memgrad_op_times", "torch_op_times", "op_rows",
           "by_op", "print_by_op"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def _blas() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
        return f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip()
    libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(
        f"{i['internal_api']} {i['version']} ({i['num_threads']} threads)" for i in libs
    ) or "unknown"


def machine_info() -> dict[str, Any]:
    """CPU model, core counts, NumPy's BLAS and the library versions of this run.

    Example:
        >>> sorted(machine_info())[:3]
        ['blas', 'cores', 'cores_available']
    """
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "blas": _blas(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "memgrad": mg.__version__,
        "date": datetime.date.today().isoformat(),
    }


def interleaved(fns: dict[str, Callable[[], None]], repeats: int, warmup: int,
                clock: Callable[[], float] = time.perf_counter,
                lead: int = 0) -> dict[str, tuple[float, float]]:
    """The best and the median time of one call of each of several functions, timed in turn
    within each repeat (by ``interleaved_rounds``): ``{name: (best, median)}``.

    Example:
        >>> t = interleaved({"a": lambda: None, "b": lambda: None}, repeats=3, warmup=1)
        >>> sorted(t), all(best <= median for best, median in t.values())
        (['a', 'b'], True)
    """
    rounds = interleaved_rounds(fns, repeats, warmup, clock, lead)
    return {k: (min(v), median(v)) for k, v in rounds.items()}


def median(times: list[float]) -> float:
    """The middle time (the upper of the two middle ones of an even count).

    Example:
        >>> median([3.0, 1.0, 2.0, 4.0])
        3.0
    """
    return sorted(times)[len(times) // 2]


def interleaved_rounds(fns: dict[str, Callable[[], None]], repeats: int, warmup: int,
                       clock: Callable[[], float] = time.perf_counter,
                       lead: int = 0) -> dict[str, list[float]]:
    """Time several functions in turn within each of ``repeats`` rounds, so that on a
    shared, noisy machine they see the same load: ``{name: [seconds of each round]}``, the
    rounds in order (``paired_ratio`` compares two of them round by round). ``clock`` may be
    ``time.process_time``: the CPU time of this process, which leaves out the time other
    processes hold the cores (for code that runs on one thread). Each timed run comes after a
    full collection (``gc.collect``), so that garbage left by the runs before it is not
    collected inside it. ``lead`` untimed runs of the same function come between that
    collection and the timed run: a step then follows a step of its own, as in a training
    loop, rather than the other framework's (whose threads may still spin, or have let their
    own go to sleep) or the collection (which walks every object of the process and leaves
    the caches cold: memgrad's small-model steps ran 6-9% longer right after one, with
    PyTorch loaded).

    Example:
        >>> t = interleaved_rounds({"a": lambda: None, "b": lambda: None}, repeats=3, warmup=1)
        >>> sorted(t), [len(v) for v in t.values()]
        (['a', 'b'], [3, 3])
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            gc.collect()
            for _ in range(lead):
                fn()
            t0 = clock()
            fn()
            times[k].append(clock() - t0)
    return times


def paired_ratio(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """The ratios ``ours[i] / theirs[i]`` of runs timed in the same round: their median and
    quartiles, ``(median, q1, q3)``. Each ratio compares two runs that saw the same load,
    so a change of the host's load between rounds moves the quartiles less than it moves
    the ratio of the two medians.

    Example:
        >>> paired_ratio([2.0, 4.0, 3.0, 8.0], [1.0, 2.0, 2.0, 4.0])
        (2.0, 1.875, 2.0)
    """
    if len(ours) != len(theirs) or not ours:
        raise ValueError(f"paired_ratio: expected two equal, non-empty lists of times, got "
                         f"{len(ours)} and {len(theirs)}")
    r = np.asarray(ours, dtype=float) / np.asarray(theirs, dtype=float)
    q1, median, q3 = np.percentile(r, [25, 50, 75])
    return float(median), float(q1), float(q3)


def timed_in_turn(fns: dict[str, Callable[[], None]], repeats: int, warmup: int,
                  base: str) -> dict[str, tuple[float, tuple[float, float, float]]]:
    """Time configurations of one run in turn within each round (``interleaved_rounds``):
    ``{name: (median seconds, paired_ratio against fns[base])}``.

    Example:
        >>> t = timed_in_turn({"a": lambda: None, "b": lambda: None}, 3, 1, base="a")
        >>> sorted(t), t["a"][1]
        (['a', 'b'], (1.0, 1.0, 1.0))
    """
    rounds = interleaved_rounds(fns, repeats, warmup)
    return {k: (median(v), paired_ratio(v, rounds[base])) for k, v in rounds.items()}


def paired_cell(paired: tuple[float, float, float]) -> str:
    """``paired_ratio``'s answer as a table cell.

    Example:
        >>> paired_cell((1.2, 1.15, 1.25))
        '1.20x [1.15, 1.25]'
    """
    m, q1, q3 = paired
    return f"{m:.2f}x [{q1:.2f}, {q3:.2f}]"


def verdict(q1: float, q3: float, target: float) -> str:
    """A target met when the upper quartile of the paired ratios is at or below it, not
    met when the lower quartile is above it, and a tie when the target lies between the
    quartiles (the run cannot tell).

    Example:
        >>> verdict(0.95, 1.05, 1.1), verdict(1.15, 1.3, 1.1), verdict(1.05, 1.15, 1.1)
        ('met', 'not met', 'tie')
    """
    if q3 <= target:
        return "met"
    return "not met" if q1 > target else "tie"


def emit(row: dict[str, Any]) -> dict[str, Any]:
    """Print one measurement as a JSON line and return it."""
    print(json.dumps(row), flush=True)
    return row


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table, numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if n and _numeric(c) else c.ljust(w)
                               for c, w in zip(r, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(c: Any) -> str:
    if isinstance(c, float):
        return f"{c:.3f}" if abs(c) < 100 else f"{c:,.1f}"
    if isinstance(c, int) and not isinstance(c, bool):
        return f"{c:,}"
    return "-" if c is None else str(c)


def _numeric(c: str) -> bool:
    return c.replace(",", "").replace(".", "").replace("x", "").replace("-", "").isdigit()


def torch_or_none() -> Any:
    """``torch`` set to two threads, or None when it is not installed (a comparison only)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(2)
    return torch


def workload_args(doc: str, argv: list[str] | None, repeats: int, warmup: int,
                  clock: bool = False, by_op: bool = False) -> Any:
    """The options every W1-W3 benchmark takes: --repeats, --warmup, --only, --small (and,
    with ``clock``, --clock wall|cpu; with ``by_op``, --by-op N)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    if clock:
        parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                            help="wall time, or this process's CPU time (default: wall)")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help=f"timed steps (default: {repeats})")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    parser.add_argument("--only", default="W1,W2,W3", help="workloads to run")
    parser.add_argument("--small", action="store_true", help="tiny sizes (a smoke run)")
    if by_op:
        parser.add_argument("--by-op", type=int, default=0, metavar="N",
                            help="then print the N ops that take the most time per step")
    args = parser.parse_args(argv)
    if by_op and args.by_op < 0:
        parser.error(f"--by-op: expected a count >= 0, got {args.by_op}")
    return args


class _OpTimer(Interpreter):
    """Wall time and count of each primitive's calls on this thread (the forward ops and
    the ones the VJPs run in backward)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        t0 = time.perf_counter()
        try:
            return call_next(prim, args, params)
        finally:
            name = prim.name
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
            self.calls[name] = self.calls.get(name, 0) + 1


def memgrad_op_times(fn: Callable[[], Any], steps: int) -> dict[str, tuple[float, float]]:
    """Per primitive, ``(seconds, calls)`` per run of ``fn``, averaged over ``steps`` runs:
    each call timed from the dispatcher in, its node's recording included. The timing
    interpreter turns the dispatcher's short path off, so the ops cost a little more than
    in an untimed step; a primitive's parts on other threads are inside its time.

    Example:
        >>> times = memgrad_op_times(lambda: (mg.ones(3) * 2).exp(), steps=2)
        >>> sorted(times), times["mul"][1]
        (['exp', 'mul'], 1.0)
    """
    timer = _OpTimer()
    with push(timer):
        for _ in range(steps):
            fn()
    return {k: (timer.seconds[k] / steps, timer.calls[k] / steps) for k in timer.seconds}


def torch_op_times(torch: Any, fn: Callable[[], Any], steps: int) -> dict[str, tuple[float, float]]:
    """Per PyTorch op, ``(seconds, calls)`` per run of ``fn`` over ``steps`` runs: the self
    CPU time of ``torch.profiler`` (the op's time on the calling thread, its own threads'
    work inside it, the ops it calls outside)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
    return {e.key: (e.self_cpu_time_total * 1e-6 / steps, e.count / steps)
            for e in prof.key_averages()}


def op_rows(times: dict[str, tuple[float, float]], top: int) -> list[list[Any]]:
    """The ``top`` ops by time as table rows: name, milliseconds and calls per step."""
    ranked = sorted(times.items(), key=lambda kv: -kv[1][0])[:top]
    return [[name, round(s * 1e3, 3), int(c) if c == int(c) else round(c, 1)]
            for name, (s, c) in ranked]


def by_op(fns: dict[str, Callable[[], Any]], torch: Any, steps: int, bench: str,
          machine: dict[str, Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """Each framework's time per op over ``steps`` more runs of its step in ``fns``
    (``"memgrad"`` and, when PyTorch is installed, ``"pytorch"``), one JSON line each."""
    tables = {"memgrad": memgrad_op_times(fns["memgrad"], steps)}
    if "pytorch" in fns:
        tables["pytorch"] = torch_op_times(torch, fns["pytorch"], steps)
    for framework, ops in tables.items():
        emit({"bench": bench, "framework": framework,
              "ops": {k: [round(s, 6), c] for k, (s, c) in ops.items()}, "machine": machine})
    return tables


def print_by_op(profiles: list[tuple[str, dict]], top: int) -> None:
    """For each case's ``by_op`` tables, the ``top`` ops of each framework."""
    for case, tables in profiles:
        for framework, ops in tables.items():
            print(f"\n{case}, {framework}: the ops that take the most time, per step")
            print(table(["op", "ms", "calls"], op_rows(ops, top)))
