"""Data parallelism on MPI: all-reduce bandwidth, and what DistributedDataParallel costs a step.

Two measurements, each on ranks started on this machine with ``mpiexec`` (the script starts
them itself, through ``memgrad.distributed.launch``):

1. All-reduce bandwidth with 2 ranks: a blocking mpi4py ``comm.Allreduce`` (in place, sum) on
   a float32 NumPy buffer of 4 KiB, 64 KiB, 1 MiB, 16 MiB and 64 MiB, and
   ``memgrad.distributed.all_reduce`` on a 4 KiB and a 16 MiB Tensor (timed in turns with the
   plain call of that size, to show the wrapper's overhead: its nonblocking all-reduce, the
   polling and the record every collective exchanges first, at 4 KiB mostly the latter).
   A barrier precedes every call; a call's time is the slowest rank's, and the table gives
   the median of ``10 * repeats`` calls after a warm-up. Bandwidths are computed as
   nccl-tests does for all-reduce: algbw = bytes / time, busbw = algbw * 2 * (n - 1) / n,
   in GB/s (1e9 bytes).
2. Step time of W1 (32 x (Linear(1024, 1024) + ReLU), MSE loss) on the same total batch of
   512: 1 rank with batch 512 against 2 ranks with batch 256 each, the model wrapped in
   ``DistributedDataParallel`` (default 25 MiB buckets) either way; a step is forward +
   backward + SGD step. Each rank count runs in its own ``mpiexec`` job with
   ``launch.rank_environment``'s BLAS threads (2 for 1 rank, 1 each for 2 ranks on 2 cores),
   set before NumPy is imported, and ``--bind-to none`` (Open MPI would otherwise pin a lone
   rank to one core). Reported: the median over ``repeats`` steps (after a warm-up, which
   includes DDP's first step, after which it rebuilds its buckets) of the slowest rank's
   step, the ratio 2 ranks / 1 rank, the DDPStats of the last step (buckets, and how many
   of them started during backward) and the largest peak resident set size of the ranks.
   The same again with ``gradient_as_bucket_view=True``, and with ``checkpoint_sequential``
   at round(sqrt(32)) = 6 segments inside the wrapped module's forward. A control row runs
   the 2 ranks with the exchange left out (every step inside ``no_sync()``): what the same
   ranks cost without the all-reduce, so that the difference to the DDP row is the
   exchange's part.

With PyTorch installed, the same all-reduces through ``torch.distributed`` (gloo) and the
same steps through torch's DistributedDataParallel are added as a comparison.

Prints one JSON line per measurement (with the machine), then the two tables in Markdown.

Usage:
    python benchmarks/distributed.py [--repeats 5] [--warmup 2] [--small] [--no-torch]

About 2 minutes on 2 cores with the defaults (``--small --repeats 1``: about 10 s).

``--worker`` is the entry point of the ranks the script starts; it is not for direct use.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib.util
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import emit, machine_info
from workloads import FULL, SMALL

import memgrad as mg
import memgrad.distributed as dist
from memgrad import models
from memgrad.checkpoint import CheckpointedSequential
from memgrad.distributed import launch
from memgrad.nn import functional as F

__all__ = ["main", "bus_bandwidth"]

KiB, MiB = 2**10, 2**20
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB]
WRAPPER_SIZES = (4 * KiB, 16 * MiB)  # also timed through memgrad.distributed.all_reduce
RANKS = 2
TIMEOUT = 900  # seconds, per mpiexec job


# ----------------------------------------------------------------------------- shared


def bus_bandwidth(nbytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """nccl-tests' all-reduce figures: ``(algbw, busbw)`` in GB/s.

    Example:
        >>> bus_bandwidth(10**9, 1.0, 2)
        (1.0, 1.0)
    """
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (nranks - 1) / nranks


def blas_threads() -> int | None:
    """The thread count of NumPy's BLAS in this process (OpenBLAS), or None if unknown."""
    try:
        from threadpoolctl import threadpool_info

        counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
        return counts[0] if counts else None
    except ImportError:
        pass
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        paths = set()
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                     "openblas_get_num_threads64_", "openblas_get_num_threads"):
            if hasattr(lib, name):
                return int(getattr(lib, name)())
    value = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    return int(value) if value else None


def cores() -> int | None:
    """How many cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def w1_sizes(small: bool) -> dict[str, int]:
    """W1's depth, width and per-rank batch B (the single rank runs 2B)."""
    return dict((SMALL if small else FULL)["W1"][1])


# ----------------------------------------------------------------------------- ranks


def _slowest_median(comm: Any, times: list[float]) -> tuple[float, float]:
    """Per repetition the slowest rank's time; returns its (best, median) over repetitions."""
    per_rep = [max(ts) for ts in zip(*comm.allgather(times))]
    return min(per_rep), statistics.median(per_rep)


def _time_in_turns(comm: Any, calls: list[tuple[Callable, Callable]], repeats: int,
                   warmup: int) -> list[tuple[float, float]]:
    """Time each ``(reset, call)`` pair in turns, a barrier before every call."""
    times: list[list[float]] = [[] for _ in calls]
    for rep in range(warmup + repeats):
        for k, (reset, call) in enumerate(calls):
            reset()
            comm.Barrier()
            t0 = time.perf_counter()
            call()
            elapsed = time.perf_counter() - t0
            if rep >= warmup:
                times[k].append(elapsed)
    return [_slowest_median(comm, ts) for ts in times]


def worker_comm(args: argparse.Namespace) -> dict[str, Any]:
    """Blocking all-reduces through mpi4py and through ``memgrad.distributed.all_reduce``."""
    from mpi4py import MPI

    dist.init()
    comm = MPI.COMM_WORLD
    repeats, warmup = 10 * args.repeats, max(3, args.warmup)
    rows = []
    for nbytes in SIZES:
        buf = np.ones(nbytes // 4, dtype=np.float32)

        def reset(buf: np.ndarray = buf) -> None:
            buf.fill(1.0)  # keep the sums finite

        def plain(buf: np.ndarray = buf) -> None:
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        calls = [(reset, plain)]
        if nbytes in WRAPPER_SIZES:
            arr = np.ones(nbytes // 4, dtype=np.float32)
            t = mg.from_numpy(arr)
            calls.append((lambda arr=arr: arr.fill(1.0), lambda t=t: dist.all_reduce(t)))
        timed = _time_in_turns(comm, calls, repeats, warmup)
        rows.append({"call": "comm.Allreduce", "bytes": nbytes, "median_s": timed[0][1],
                     "best_s": timed[0][0]})
        if len(timed) > 1:
            rows.append({"call": "memgrad.distributed.all_reduce", "bytes": nbytes,
                         "median_s": timed[1][1], "best_s": timed[1][0]})
    return {"ranks": comm.Get_size(), "repeats": repeats, "rows": rows}


def worker_torch_comm(args: argparse.Namespace) -> dict[str, Any]:
    """The same all-reduces through ``torch.distributed`` with the gloo backend."""
    import torch
    import torch.distributed as td
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    td.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                          rank=comm.Get_rank(), world_size=comm.Get_size())
    repeats, warmup = 10 * args.repeats, max(3, args.warmup)
    rows = []
    for nbytes in SIZES:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        timed = _time_in_turns(comm, [(lambda t=t: t.fill_(1.0), lambda t=t: td.all_reduce(t))],
                               repeats, warmup)
        rows.append({"call": "torch.distributed.all_reduce", "bytes": nbytes,
                     "median_s": timed[0][1], "best_s": timed[0][0]})
    td.destroy_process_group()
    return {"ranks": comm.Get_size(), "repeats": repeats, "rows": rows}


def _shard(sizes: dict[str, int], nranks: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s rows of the global batch of ``2 * batch`` inputs and targets."""
    total = 2 * sizes["batch"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((total, sizes["width"]), dtype=np.float32)
    target = rng.standard_normal((total, sizes["width"]), dtype=np.float32)
    rows = slice(rank * total // nranks, (rank + 1) * total // nranks)
    return np.ascontiguousarray(x[rows]), np.ascontiguousarray(target[rows])


def _time_steps(comm: Any, step: Callable[[], None], repeats: int,
                warmup: int) -> tuple[float, float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        gc.collect()
        comm.Barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return _slowest_median(comm, times)


def _peak_rss(comm: Any) -> int | None:
    """The largest peak resident set size of any rank, in bytes (Linux reports KiB)."""
    try:
        import resource
    except ImportError:
        return None
    return max(comm.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


def worker_train(args: argparse.Namespace) -> dict[str, Any]:
    """W1 training steps, the model wrapped in memgrad's DistributedDataParallel."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    nranks, rank = dist.world_size(), dist.rank()
    sizes = w1_sizes(args.small)
    model = models.mlp(depth=sizes["depth"], width=sizes["width"], batch=1, seed=0)[0]
    module = model if args.segments == 0 else CheckpointedSequential(model, args.segments)
    ddp = dist.DistributedDataParallel(module, gradient_as_bucket_view=args.view)
    x_np, target_np = _shard(sizes, nranks, rank)
    x, target = mg.from_numpy(x_np), mg.from_numpy(target_np)
    opt = mg.optim.SGD(ddp.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        with ddp.no_sync() if args.local else contextlib.nullcontext():
            F.mse_loss(ddp(x), target).backward()
        opt.step()

    best, median = _time_steps(comm, step, args.repeats, max(1, args.warmup))
    grad_bytes = sum(p.numpy().nbytes for p in ddp.parameters())
    return {"ranks": nranks, "batch_per_rank": len(x_np), "blas_threads": blas_threads(),
            "cores": cores(), "segments": args.segments, "median_s": median, "best_s": best,
            "buckets": ddp.stats.buckets, "during_backward": ddp.stats.during_backward,
            "grad_bytes": grad_bytes, "local": args.local, "peak_rss": _peak_rss(comm)}


def worker_torch_train(args: argparse.Namespace) -> dict[str, Any]:
    """The same W1 steps in PyTorch, wrapped in torch's DistributedDataParallel (gloo)."""
    import torch
    import torch.distributed as td
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    nranks, rank = comm.Get_size(), comm.Get_rank()
    threads = blas_threads() or 1
    torch.set_num_threads(threads)
    td.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                          world_size=nranks)
    sizes = w1_sizes(args.small)
    torch.manual_seed(0)
    width = sizes["width"]
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width),
                                                      torch.nn.ReLU())
                                  for _ in range(sizes["depth"])])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    x_np, target_np = _shard(sizes, nranks, rank)
    x, target = torch.from_numpy(x_np), torch.from_numpy(target_np)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), target).backward()
        opt.step()

    best, median = _time_steps(comm, step, args.repeats, max(1, args.warmup))
    td.destroy_process_group()
    return {"ranks": nranks, "batch_per_rank": len(x_np), "blas_threads": threads,
            "cores": cores(), "segments": 0, "median_s": median, "best_s": best,
            "peak_rss": _peak_rss(comm)}


WORKERS = {"comm": worker_comm, "torch-comm": worker_torch_comm, "train": worker_train,
           "torch-train": worker_torch_train}


def worker(args: argparse.Namespace) -> int:
    dist.init()  # before the workers import mpi4py.MPI: init() sets MPI's environment first
    result = WORKERS[args.worker](args)
    if dist.rank() == 0:
        Path(args.out).write_text(json.dumps(result))
    return 0


# ----------------------------------------------------------------------------- parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(nranks: int, kind: str, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    """Start ``nranks`` ranks of this script as worker ``kind``; rank 0's result."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        worker_args = [str(Path(__file__).resolve()), "--worker", kind, "--out", str(out),
                       "--repeats", str(args.repeats), "--warmup", str(args.warmup),
                       "--port", str(_free_port()), *extra]
        if args.small:
            worker_args.append("--small")
        cmd = launch.mpiexec_command(nranks, worker_args)  # with --bind-to none (Open MPI)
        r = subprocess.run(cmd, env=launch.rank_environment(nranks), capture_output=True,
                           text=True, timeout=TIMEOUT)
        if r.returncode != 0 or not out.exists():
            sys.stderr.write(r.stdout + r.stderr)
            raise SystemExit(f"distributed.py: {' '.join(cmd)} failed (status {r.returncode})")
        return json.loads(out.read_text())


def markdown(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    """A Markdown table; the columns in ``right`` are right-aligned."""
    rule = ["---:" if i in right else "---" for i in range(len(headers))]
    return "\n".join("| " + " | ".join(r) + " |" for r in [headers, rule, *rows])


def _size(nbytes: int) -> str:
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // KiB} KiB"


def comm_table(ours: dict[str, Any], theirs: dict[str, Any] | None,
               machine: dict[str, Any]) -> str:
    n = ours["ranks"]
    torch_at = {r["bytes"]: r for r in theirs["rows"]} if theirs else {}
    rows = []
    for r in ours["rows"]:
        algbw, busbw = bus_bandwidth(r["bytes"], r["median_s"], n)
        emit({"bench": "allreduce", "call": r["call"], "bytes": r["bytes"], "ranks": n,
              "median_s": r["median_s"], "best_s": r["best_s"], "algbw_gbs": round(algbw, 3),
              "busbw_gbs": round(busbw, 3), "machine": machine})
        label = "`comm.Allreduce`" if r["call"] == "comm.Allreduce" else f"`{r['call']}`"
        row = [_size(r["bytes"]), label, f"{r['median_s'] * 1e3:.3f}", f"{busbw:.2f}"]
        t = torch_at.get(r["bytes"]) if r["call"] == "comm.Allreduce" else None
        if theirs is not None:
            if t is None:
                row += ["", ""]
            else:
                _, tbus = bus_bandwidth(t["bytes"], t["median_s"], n)
                emit({"bench": "allreduce", "call": t["call"], "bytes": t["bytes"], "ranks": n,
                      "median_s": t["median_s"], "best_s": t["best_s"],
                      "busbw_gbs": round(tbus, 3), "machine": machine})
                row += [f"{t['median_s'] * 1e3:.3f}", f"{tbus:.2f}"]
        rows.append(row)
    headers = ["float32 message", "call", "median ms", "busbw GB/s"]
    if theirs is not None:
        headers += ["PyTorch gloo ms", "gloo busbw GB/s"]
    return markdown(headers, rows, right={2, 3, 4, 5})


def step_table(results: list[tuple[str, str, dict[str, Any]]], machine: dict[str, Any]) -> str:
    base: dict[tuple[str, int], float] = {}
    rows = []
    for framework, label, r in results:
        key = (framework, r["segments"])
        if r["ranks"] == 1:
            base[key] = r["median_s"]
        ratio = r["median_s"] / base[key] if key in base else None
        emit({"bench": "ddp_step", "framework": framework, "workload": "W1",
              "segments": r["segments"], "ranks": r["ranks"],
              "batch_per_rank": r["batch_per_rank"], "blas_threads": r["blas_threads"],
              "cores_per_rank": r["cores"],
              "median_s": round(r["median_s"], 4), "best_s": round(r["best_s"], 4),
              "ratio_to_1_rank": ratio and round(ratio, 3), "buckets": r.get("buckets"),
              "during_backward": r.get("during_backward"), "peak_rss": r.get("peak_rss"),
              "machine": machine})
        stats = "-"
        if r.get("local"):
            stats = "none (no_sync)"
        elif r.get("buckets"):
            stats = f"{r['buckets']} / {r['during_backward']}"
        rows.append([label, f"{r['ranks']} x {r['batch_per_rank']}", str(r["blas_threads"]),
                     f"{r['median_s']:.3f}", "1.00x" if r["ranks"] == 1 else f"{ratio:.2f}x",
                     stats, f"{r['peak_rss'] / MiB:.0f}" if r.get("peak_rss") else "-"])
    headers = ["W1 step", "ranks x batch", "BLAS threads", "median s", "vs 1 rank",
               "buckets / started in backward", "peak RSS MiB (largest rank)"]
    return markdown(headers, rows, right={2, 3, 4, 6})


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed training steps; the all-reduces are timed 10x as often "
                             "(default: 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default: 2)")
    parser.add_argument("--small", action="store_true", help="tiny W1 (a smoke run)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--segments", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--view", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be at least 1 and --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the tables; returns the exit status."""
    args = parse(argv)
    if args.worker:
        return worker(args)
    started = time.perf_counter()
    machine = machine_info()
    with_torch = not args.no_torch and importlib.util.find_spec("torch") is not None

    ours = run_ranks(RANKS, "comm", args)
    theirs = run_ranks(RANKS, "torch-comm", args) if with_torch else None

    sizes = w1_sizes(args.small)
    segments = round(math.sqrt(sizes["depth"]))
    steps: list[tuple[str, str, dict[str, Any]]] = []
    for seg, name in [(0, "DDP"), (segments, f"DDP, checkpointed ({segments} segments)")]:
        for n in (1, RANKS):
            steps.append(("memgrad", f"memgrad {name}",
                          run_ranks(n, "train", args, "--segments", str(seg))))
        if seg == 0:
            steps.append(("memgrad", "memgrad DDP, gradient_as_bucket_view",
                          run_ranks(RANKS, "train", args, "--segments", "0", "--view")))
            # the control: the same ranks and work, without the gradient exchange
            steps.append(("memgrad", "memgrad DDP, gradients not exchanged",
                          run_ranks(RANKS, "train", args, "--segments", "0", "--local")))
    if with_torch:
        for n in (1, RANKS):
            steps.append(("pytorch", "PyTorch DDP (gloo)", run_ranks(n, "torch-train", args)))

    grad_mib = steps[1][2]["grad_bytes"] / MiB
    comm_md, step_md = comm_table(ours, theirs, machine), step_table(steps, machine)
    print()
    print(f"All-reduce (sum, in place) with {ours['ranks']} ranks on one machine: median of "
          f"{ours['repeats']} calls, slowest rank; busbw = bytes / time * 2(n-1)/n")
    print()
    print(comm_md)
    print()
    print(f"W1 ({sizes['depth']} x Linear({sizes['width']}, {sizes['width']}) + ReLU, "
          f"{grad_mib:.1f} MiB of gradients) on a total batch of {2 * sizes['batch']}: median "
          f"of {args.repeats} steps, slowest rank; {machine['cpu']}, {machine['cores']} cores")
    print()
    print(step_md)
    crowded = [r for _, _, r in steps if (r["blas_threads"] or 0) > (r["cores"] or 0)]
    if crowded:
        print("\nwarning: some ranks ran more BLAS threads than they had cores")
    if not with_torch:
        print("\npytorch: not installed or --no-torch, its rows are skipped (a comparison only)")
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
