"""Convolution speed: one Conv2d(32, 32, 3, padding=1) layer and the W3 training step, against
PyTorch, and each numba kernel against its NumPy formulation.

W3 is 8 x (Conv2d(32, 32, 3, padding=1) + ReLU) on a 16x32x32x32 float32 input with an MSE
loss, forward and backward (gradients of every weight and bias). ``layer`` is one such conv
forward and backward with the input requiring grad as well. ``pool`` is max_pool2d(2) forward
and backward on the same input. Frameworks are timed round-robin (one run of each in turn),
so that both see the same machine load; the best and the median of ``--repeats`` runs are
reported after ``--warmup`` runs.

The kernels (im2col, col2im, im2row, row_sum, the Winograd transforms, max pooling and its
backward scatter) are timed against their NumPy references on the W3 shapes, at the batch
chunk ``memgrad.ops.conv`` hands them and at the full batch; a kernel is worth keeping only
at >= 2x its NumPy formulation.

Prints one JSON line per measurement, then a plain-text table. PyTorch (eager, CPU,
``--torch-threads`` threads, two by default) is measured when ``import torch`` works; it is a
comparison only. NumPy's BLAS uses its own thread count (``OPENBLAS_NUM_THREADS``); on a busy
machine, ``OPENBLAS_NUM_THREADS=1`` with ``--torch-threads 1`` gives the steadier comparison.

Usage:
    python benchmarks/conv.py [--repeats 20] [--warmup 3] [--torch-threads 2] [--no-torch]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from common import emit, machine_info

import memgrad as mg
import memgrad.nn.functional as F
from memgrad._kernels import conv as conv_kernels
from memgrad._kernels import pool as pool_kernels
from memgrad._kernels import winograd as winograd_kernels
from memgrad.ops import conv as conv_ops

__all__ = ["KernelCase", "memgrad_cases", "torch_cases", "kernel_cases", "round_robin", "main"]

BATCH, CHANNELS, SIZE, LAYERS = 16, 32, 32, 8
TORCH_W3_S = 0.093  # PyTorch's W3 step on the reference 2-core machine
TARGET_RATIO = 2.0  # W3 step, memgrad over pytorch
KERNEL_TARGET = 2.0  # kernel over its NumPy formulation


def _arrays() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    shape = (BATCH, CHANNELS, SIZE, SIZE)
    scale = 1.0 / np.sqrt(CHANNELS * 9)
    return {
        "x": rng.standard_normal(shape).astype(np.float32),
        "y": rng.standard_normal(shape).astype(np.float32),
        "w": [(rng.uniform(-scale, scale, (CHANNELS, CHANNELS, 3, 3))).astype(np.float32)
              for _ in range(LAYERS)],
        "b": [(rng.uniform(-scale, scale, CHANNELS)).astype(np.float32) for _ in range(LAYERS)],
    }


def _cases(lib: Any, fn: Any, tensor: Callable, zero: Callable) -> dict[str, Callable[[], None]]:
    """The timed runs, for either framework: ``lib`` is memgrad or torch, ``fn`` its
    functional module, ``tensor(array, requires_grad)`` makes a tensor, ``zero(t)`` clears
    a gradient."""
    a = _arrays()
    x, y = tensor(a["x"], False), tensor(a["y"], False)
    ws = [tensor(w, True) for w in a["w"]]
    bs = [tensor(b, True) for b in a["b"]]
    params = ws + bs
    xg = tensor(a["x"], True)

    def w3_step() -> None:
        h = x
        for w, b in zip(ws, bs):
            h = fn.relu(fn.conv2d(h, w, b, padding=1))
        loss = fn.mse_loss(h, y)
        for p in params:
            zero(p)
        loss.backward()

    def layer() -> None:
        out = fn.conv2d(xg, ws[0], bs[0], padding=1)
        for p in (xg, ws[0], bs[0]):
            zero(p)
        out.sum().backward()

    def layer_forward() -> None:
        with lib.no_grad():
            fn.conv2d(x, ws[0], bs[0], padding=1)

    def pool() -> None:
        zero(xg)
        fn.max_pool2d(xg, 2).sum().backward()

    return {"w3_step": w3_step, "layer": layer, "layer_forward": layer_forward, "pool": pool}


def _zero(t: Any) -> None:
    t.grad = None


def memgrad_cases() -> dict[str, Callable[[], None]]:
    """The memgrad runs to time: ``w3_step``, ``layer`` (conv forward+backward),
    ``layer_forward`` (under no_grad) and ``pool`` (max_pool2d forward+backward).

    Example:
        >>> sorted(memgrad_cases())
        ['layer', 'layer_forward', 'pool', 'w3_step']
    """
    return _cases(mg, F, lambda a, rg: mg.tensor(a, requires_grad=rg), _zero)


def torch_cases(threads: int = 2) -> tuple[dict[str, Callable[[], None]], str]:
    """The same runs in PyTorch eager on the CPU with ``threads`` threads, and the torch
    version.

    Raises ``ImportError`` when PyTorch is not installed.
    """
    import torch
    import torch.nn.functional as tf

    torch.set_num_threads(threads)
    cases = _cases(torch, tf, lambda a, rg: torch.tensor(a, requires_grad=rg), _zero)
    return cases, torch.__version__


class KernelCase(NamedTuple):
    """One kernel call on the W3 shapes and the same computation in NumPy."""

    run: Callable[[], Any]
    reference: Callable[[], Any]
    shape: str


def kernel_cases() -> dict[str, KernelCase]:
    """The kernels and their NumPy references on the W3 shapes, at the batch chunk that
    ``memgrad.ops.conv`` hands them and at the full batch.

    Example:
        >>> "im2col/chunk" in kernel_cases()
        True
    """
    rng = np.random.default_rng(1)
    chunk = max(1, conv_ops._CHUNK_BYTES // (CHANNELS * 9 * SIZE * SIZE * 4))
    out: dict[str, KernelCase] = {}
    for label, n in (("chunk", min(chunk, BATCH)), ("batch", BATCH)):
        x = rng.standard_normal((n, CHANNELS, SIZE, SIZE)).astype(np.float32)
        col = np.empty((CHANNELS, 3, 3, n, SIZE, SIZE), np.float32)
        gx = np.empty_like(x)
        shape = f"N={n}, 3x3, pad 1"
        out[f"im2col/{label}"] = KernelCase(
            lambda x=x, col=col: conv_kernels.im2col(x, col, 1, 1, 1, 1, 1, 1),
            lambda x=x: conv_kernels.im2col_reference(x, 3, 3, 1, 1, 1, 1, 1, 1), shape)
        out[f"col2im/{label}"] = KernelCase(
            lambda col=col, gx=gx: conv_kernels.col2im(col, gx, 1, 1, 1, 1, 1, 1),
            lambda col=col, x=x: conv_kernels.col2im_reference(col, x.shape, 1, 1, 1, 1, 1, 1),
            shape)
    row_chunk = max(1, conv_ops._CHUNK_BYTES // (CHANNELS * 3 * (SIZE + 2) * SIZE * 4))
    for label, n in (("chunk", min(row_chunk, BATCH)), ("batch", BATCH)):
        x = rng.standard_normal((n, CHANNELS, SIZE, SIZE)).astype(np.float32)
        rows = np.empty((n, CHANNELS, 3, SIZE + 2, SIZE), np.float32)
        out[f"im2row/{label}"] = KernelCase(
            lambda x=x, rows=rows: conv_kernels.im2row(x, rows, 1, 1, 1, 1),
            lambda x=x: conv_kernels.im2row_reference(x, 3, SIZE, 1, 1, 1, 1),
            f"N={n}, 3 wide, pad 1")
    # one sample's kernel-row products, as the stacked forward sums them
    partial = rng.standard_normal((3, CHANNELS, (SIZE + 2) * SIZE)).astype(np.float32)
    bias = rng.standard_normal(CHANNELS).astype(np.float32)
    summed = np.empty((CHANNELS, SIZE * SIZE), np.float32)
    out["row_sum/sample"] = KernelCase(
        lambda: conv_kernels.row_sum(partial, bias, summed, SIZE),
        lambda: conv_kernels.row_sum_reference(partial, bias, SIZE * SIZE, SIZE),
        "3 kernel rows, 32 channels")
    # one sample's Winograd transforms (NOTE [ Winograd convolution ] in memgrad/ops/conv.py)
    th = tw = SIZE // 2
    per = th * (tw + 1)
    sample = rng.standard_normal((CHANNELS, SIZE, SIZE)).astype(np.float32)
    tiles = np.empty((16, CHANNELS * per), np.float32)
    products = rng.standard_normal((16, CHANNELS * per)).astype(np.float32)
    plane = np.empty((CHANNELS, SIZE, SIZE), np.float32)
    shape = f"{CHANNELS} channels, {SIZE}x{SIZE}"
    out["winograd_input/sample"] = KernelCase(
        lambda: winograd_kernels.winograd_input(sample, tiles, 1, 1, th, tw),
        lambda: winograd_kernels.winograd_input_reference(sample, 1, 1, th, tw), shape)
    out["winograd_output/sample"] = KernelCase(
        lambda: winograd_kernels.winograd_output(products, bias, plane),
        lambda: winograd_kernels.winograd_output_reference(
            products.reshape(16, CHANNELS, th, tw + 1)[..., :tw], bias, SIZE, SIZE), shape)
    out["winograd_grad/sample"] = KernelCase(
        lambda: winograd_kernels.winograd_grad(sample, tiles),
        lambda: winograd_kernels.winograd_grad_reference(sample), shape)
    x = rng.standard_normal((BATCH, CHANNELS, SIZE, SIZE)).astype(np.float32)
    half = (BATCH, CHANNELS, SIZE // 2, SIZE // 2)
    pooled, argmax = np.empty(half, np.float32), np.empty(half, np.int64)
    g = rng.standard_normal(half).astype(np.float32)
    gx = np.empty_like(x)
    pool_kernels.max_pool2d(x, pooled, argmax, 2, 2, 2, 2, 0, 0, 1, 1)
    shape = f"N={BATCH}, 2x2, stride 2"
    out["max_pool2d/batch"] = KernelCase(
        lambda: pool_kernels.max_pool2d(x, pooled, argmax, 2, 2, 2, 2, 0, 0, 1, 1),
        lambda: pool_kernels.max_pool2d_reference(x, 2, 2, 2, 2, 0, 0, 1, 1), shape)
    out["max_pool2d_backward/batch"] = KernelCase(
        lambda: pool_kernels.max_pool2d_backward(g, argmax, gx),
        lambda: pool_kernels.max_pool2d_backward_reference(g, argmax, x.shape), shape)
    return out


def round_robin(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int,
                settle: float = 0.02, collect: bool = True) -> dict[str, tuple[float, float]]:
    """Time every function ``repeats`` times, one run of each in turn, after ``warmup`` runs.

    Each timed run starts ``settle`` seconds after the previous one ended, so that thread
    pools left spinning by one framework (OpenMP workers spin for a while after a parallel
    region) do not slow down the next one, and (with ``collect``) after a garbage collection,
    so that no framework pays for another's garbage.

    Returns:
        ``{name: (best, median)}`` wall time of one call, in seconds.

    Example:
        >>> t = round_robin({"a": lambda: None}, repeats=3, warmup=1, settle=0)
        >>> 0 <= t["a"][0] <= t["a"][1]
        True
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if collect:
                gc.collect()
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    result = {}
    for name, ts in times.items():
        ts.sort()
        result[name] = (ts[0], ts[len(ts) // 2])
    return result


def _row(bench: str, framework: str, version: str, mode: str, best: float, median: float,
         args: argparse.Namespace, machine: dict, **extra: Any) -> dict:
    return emit({"bench": bench, "framework": framework, "version": version, "mode": mode,
                 "ms": round(best * 1e3, 3), "median_ms": round(median * 1e3, 3), **extra,
                 "dtype": "float32", "repeats": args.repeats, "warmup": args.warmup,
                 "machine": machine})


def _table(rows: list[dict], machine: dict, note: str | None) -> str:
    by = {(r["bench"], r["framework"], r["mode"]): r for r in rows}
    lines = [
        f"conv: W3 = {LAYERS} x (Conv2d({CHANNELS}, {CHANNELS}, 3, padding=1) + ReLU) on "
        f"{BATCH}x{CHANNELS}x{SIZE}x{SIZE} float32, MSE, forward+backward; ms, best (median)",
        f"machine: {machine['cpu']}, {machine['cores']} cores "
        f"({machine['cores_available']} available), BLAS {machine['blas']}, {machine['date']}",
        "",
        f"{'case':<16}{'memgrad':>18}{'pytorch':>18}{'ratio':>8}",
    ]
    for mode in ("w3_step", "layer", "layer_forward", "pool"):
        ours = by[("conv", "memgrad", mode)]
        theirs = by.get(("conv", "pytorch", mode))
        cell = f"{ours['ms']:.1f} ({ours['median_ms']:.1f})"
        tcell = f"{theirs['ms']:.1f} ({theirs['median_ms']:.1f})" if theirs else "-"
        ratio = f"{ours['ms'] / theirs['ms']:.2f}x" if theirs else "-"
        lines.append(f"{mode:<16}{cell:>18}{tcell:>18}{ratio:>8}")
    lines += ["", f"{'kernel':<26}{'shape':<21}{'numba':>9}{'numpy':>9}{'speedup':>9}"]
    for r in rows:
        if r["bench"] == "conv_kernel" and r["framework"] == "numba":
            ref = by[("conv_kernel", "numpy", r["mode"])]["ms"]
            lines.append(f"{r['mode']:<26}{r['shape']:<21}{r['ms']:>9.3f}{ref:>9.3f}"
                         f"{ref / r['ms']:>8.2f}x")
    lines.append(f"(a kernel is kept at >= {KERNEL_TARGET:g}x its NumPy formulation at the shape "
                 "the op hands it: the chunk for im2col/col2im)")
    step = by[("conv", "memgrad", "w3_step")]["ms"]
    theirs = by.get(("conv", "pytorch", "w3_step"))
    lines.append("")
    if theirs:
        lines.append(f"target: w3_step <= {TARGET_RATIO:g}x pytorch measured here: "
                     + ("met" if step <= TARGET_RATIO * theirs["ms"] else "not met"))
    lines.append(f"target: w3_step <= {TARGET_RATIO:g}x {TORCH_W3_S * 1e3:.0f} ms (pytorch on the "
                 "reference machine): "
                 + ("met" if step <= TARGET_RATIO * TORCH_W3_S * 1e3 else "not met"))
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed runs (default: 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    parser.add_argument("--torch-threads", type=int, default=2,
                        help="PyTorch's intra-op threads (default: 2; NumPy's BLAS follows "
                        "OPENBLAS_NUM_THREADS)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    machine = machine_info()
    fns = {("memgrad", k): f for k, f in memgrad_cases().items()}
    versions = {"memgrad": mg.__version__}
    note = None
    if args.no_torch:
        note = "pytorch: skipped (--no-torch)"
    else:
        try:
            cases, versions["pytorch"] = torch_cases(args.torch_threads)
        except ImportError as e:
            note = f"pytorch: skipped ({e})"
        else:
            fns.update({("pytorch", k): f for k, f in cases.items()})
    # round-robin per case, so the frameworks of one case see the same machine load
    rows = []
    for mode in ("w3_step", "layer", "layer_forward", "pool"):
        group = {fw: f for (fw, m), f in fns.items() if m == mode}
        for fw, (best, median) in round_robin(group, args.repeats, args.warmup).items():
            rows.append(_row("conv", fw, versions[fw], mode, best, median, args, machine))
    for name, case in kernel_cases().items():
        # no pause or collection between runs: no thread pool is involved, and either would
        # leave the caches colder than the op's own calls find them
        timed = round_robin({"numba": case.run, "numpy": case.reference}, args.repeats,
                            args.warmup, settle=0, collect=False)
        for fw, (best, median) in timed.items():
            rows.append(_row("conv_kernel", fw, "", name, best, median, args, machine,
                             shape=case.shape))
    print()
    print(_table(rows, machine, note))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
