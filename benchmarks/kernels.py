"""numba kernels against their NumPy formulations, and what numba's compiler costs.

Every kernel of ``memgrad/_kernels`` is timed against the NumPy formulation it replaces
(its ``*_reference`` function) on a realistic float32 size: 2048x1024 for activations,
softmax and layer norm (and 1024x64 for layer norm's short rows, the ``_64`` rows: a small
transformer's), W2's causal attention scores (16 x 4 heads of 128x128, scale 1/8)
for the scaled softmax, (2048, 256) logits for cross-entropy, 2048x1024 rows scattered
into 512 for ``index_add_rows``. Each time is the best of ``--repeats`` calls after a
warm-up call, numba with ``--threads`` threads (``NUMBA_NUM_THREADS``, default 2). The
calls go in rounds over all kernels, so that load from other processes spreads over all of
them; on a shared machine, a parallel kernel whose thread is not scheduled waits for it,
so take the figures of a quiet run (or compare with ``--threads 1``). NumPy has
no ``erf``, so the exact GELU is also timed against ``scipy.special.erf`` when SciPy is
installed: that row is the fair one. A kernel is worth keeping at a speedup of 2 or more.

Then each kernel module is compiled in a fresh process with an empty cache directory
(``NUMBA_CACHE_DIR``), and loaded again in a second process from that cache: the time of
the first call of every kernel (float32 and float64) is what a user pays once per machine,
and once per process after that.

Prints one JSON line per measurement, then a plain-text table.

Usage:
    python benchmarks/kernels.py [--repeats 20] [--threads 2] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from common import machine_info

__all__ = ["Case", "cases", "measure", "compile_times", "main"]

MODULES = ("activation", "softmax", "norm", "loss", "scatter", "select")
KEEP_AT = 2.0


class Case(NamedTuple):
    """One kernel against one NumPy formulation, on arguments built by ``args(n, d)``."""

    name: str
    module: str
    kernel: str
    reference: Callable[..., Any] | None  # None: the module's ``<kernel>_reference``
    args: Callable[[int, int, np.dtype], tuple]
    rows: int = 2048
    cols: int = 1024
    baseline: str = "numpy"


def _normal(shape: tuple, dtype: np.dtype, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _flat(n: int, d: int, dt: np.dtype) -> tuple:
    return (_normal((n * d,), dt, 0),)


def _grad_flat(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n * d,), dt, 1), _normal((n * d,), dt, 0)


def _grad_sigmoid(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n * d,), dt, 1), 1 / (1 + np.exp(-_normal((n * d,), dt, 0)))


def _grad_relu(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n * d,), dt, 1), np.maximum(_normal((n * d,), dt, 0), 0)


def _select(n: int, d: int, dt: np.dtype) -> tuple:
    cond = np.random.default_rng(2).random(n * d) < 0.5  # true at random, half the time
    return cond, _normal((n * d,), dt, 0), _normal((n * d,), dt, 1)


def _rows(n: int, d: int, dt: np.dtype) -> tuple:
    return (_normal((n, d), dt, 0),)


def _grad_softmax(n: int, d: int, dt: np.dtype) -> tuple:
    from memgrad._kernels.softmax import softmax_forward_reference

    return _normal((n, d), dt, 1), softmax_forward_reference(_normal((n, d), dt, 0))


def _grad_log_softmax(n: int, d: int, dt: np.dtype) -> tuple:
    from memgrad._kernels.softmax import log_softmax_forward_reference

    return _normal((n, d), dt, 1), log_softmax_forward_reference(_normal((n, d), dt, 0))


def _scores(n: int, d: int, dt: np.dtype) -> tuple:
    # stacked (d, d) attention scores, causal, scaled by 1/8
    return _normal((n, d), dt, 0), 0.125, d


def _grad_scaled_softmax(n: int, d: int, dt: np.dtype) -> tuple:
    from memgrad._kernels.softmax import scaled_softmax_forward_reference

    y = scaled_softmax_forward_reference(_normal((n, d), dt, 0), 0.125, d)
    return _normal((n, d), dt, 1), y, 0.125


def _ln_forward(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n, d), dt, 0), _normal((d,), dt, 2), _normal((d,), dt, 3), 1e-5


def _ln_backward(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n, d), dt, 1), _normal((n, d), dt, 0), _normal((d,), dt, 2), 1e-5


def _ln_weight_grad(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n, d), dt, 1), _normal((n, d), dt, 0), 1e-5


def _targets(n: int, d: int) -> np.ndarray:
    t = np.random.default_rng(4).integers(0, d, n)
    t[::10] = -100  # a few ignored rows
    return t


def _nll_forward(n: int, d: int, dt: np.dtype) -> tuple:
    return 3 * _normal((n, d), dt, 0), _targets(n, d), -100, 0.1


def _nll_backward(n: int, d: int, dt: np.dtype) -> tuple:
    return _normal((n,), dt, 1), _targets(n, d), d, -100, 0.1


def _scatter(n: int, d: int, dt: np.dtype) -> tuple:
    index = np.random.default_rng(5).integers(0, max(n // 4, 1), n)
    return np.zeros((max(n // 4, 1), d), dt), index, _normal((n, d), dt, 0)


def _scipy_gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x * np.float32(0.7071067811865476)))


def _scipy_gelu_backward(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    cdf = 0.5 * (1 + erf(x * np.float32(0.7071067811865476)))
    return g * (cdf + x * np.float32(0.3989422804014327) * np.exp(-0.5 * x * x))


def cases() -> list[Case]:
    """Every kernel at its benchmark size (a kernel may appear twice, against two
    baselines).

    Example:
        >>> sorted({c.module for c in cases()})
        ['activation', 'loss', 'norm', 'scatter', 'softmax']
    """
    out = [
        Case("gelu", "activation", "gelu", None, _flat, baseline="numpy+math.erfc"),
        Case("gelu_backward", "activation", "gelu_backward", None, _grad_flat,
             baseline="numpy+math.erfc"),
    ]
    try:
        import scipy.special  # noqa: F401
    except ImportError:
        pass
    else:
        out += [
            Case("gelu", "activation", "gelu", _scipy_gelu, _flat, baseline="scipy.erf"),
            Case("gelu_backward", "activation", "gelu_backward", _scipy_gelu_backward,
                 _grad_flat, baseline="scipy.erf"),
        ]
    return out + [
        Case("gelu_tanh", "activation", "gelu_tanh", None, _flat),
        Case("gelu_tanh_backward", "activation", "gelu_tanh_backward", None, _grad_flat),
        Case("sigmoid", "activation", "sigmoid", None, _flat),
        Case("sigmoid_backward", "activation", "sigmoid_backward", None, _grad_sigmoid),
        Case("exp", "activation", "exp", None, _flat),
        Case("relu", "activation", "relu", None, _flat),
        Case("relu_backward", "activation", "relu_backward", None, _grad_relu),
        Case("softmax_forward", "softmax", "softmax_forward", None, _rows),
        Case("log_softmax_forward", "softmax", "log_softmax_forward", None, _rows),
        Case("softmax_backward", "softmax", "softmax_backward", None, _grad_softmax),
        Case("log_softmax_backward", "softmax", "log_softmax_backward", None,
             _grad_log_softmax),
        Case("scaled_softmax_forward", "softmax", "scaled_softmax_forward", None, _scores,
             rows=16 * 4 * 128, cols=128),
        Case("scaled_softmax_backward", "softmax", "scaled_softmax_backward", None,
             _grad_scaled_softmax, rows=16 * 4 * 128, cols=128),
        Case("layer_norm_forward", "norm", "layer_norm_forward", None, _ln_forward),
        Case("layer_norm_backward", "norm", "layer_norm_backward", None, _ln_backward),
        Case("layer_norm_weight_grad", "norm", "layer_norm_weight_grad", None,
             _ln_weight_grad),
        Case("layer_norm_forward_64", "norm", "layer_norm_forward", None, _ln_forward,
             rows=1024, cols=64),
        Case("layer_norm_grads_64", "norm", "layer_norm_grads", None, _ln_backward,
             rows=1024, cols=64),
        Case("nll_forward", "loss", "nll_forward", None, _nll_forward, cols=256),
        Case("nll_backward", "loss", "nll_backward", None, _nll_backward, cols=256),
        Case("index_add_rows", "scatter", "index_add_rows", None, _scatter),
        Case("where", "select", "where", None, _select),
    ]


def _functions(case: Case) -> tuple[Callable[..., Any], Callable[..., Any]]:
    import importlib

    module = importlib.import_module(f"memgrad._kernels.{case.module}")
    kernel = getattr(module, case.kernel)
    reference = case.reference or getattr(module, f"{case.kernel}_reference")
    return kernel, reference


def _call_ms(fn: Callable[..., Any], args: tuple) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1e3


class _Timed:
    """One case being timed: its functions, arguments and best times so far."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.kernel, self.reference = _functions(case)
        self.numba_ms = self.numpy_ms = float("inf")
        self.numpy_calls = 0
        self.kernel(*self.args())  # compile (or load from the cache)
        self.time_numpy()

    def args(self) -> tuple:
        # index_add_rows adds into its first argument: it gets fresh arguments every call
        return self.case.args(self.case.rows, self.case.cols, np.dtype(np.float32))

    def time_numba(self) -> None:
        self.numba_ms = min(self.numba_ms, _call_ms(self.kernel, self.args()))

    def time_numpy(self) -> None:
        # the element-by-element erfc reference takes half a second: two calls are enough
        if self.numpy_calls < 2 or self.numpy_ms < 100:
            self.numpy_ms = min(self.numpy_ms, _call_ms(self.reference, self.args()))
            self.numpy_calls += 1


def measure(selected: list[Case], repeats: int, threads: int) -> list[dict[str, Any]]:
    """Time every case ``repeats`` times, in rounds that visit each case once (a burst of
    load from other processes then spoils one sample of every case rather than all samples
    of one), and keep the best time of each.

    Example:
        >>> rows = measure([c for c in cases() if c.name == "sigmoid_backward"], 2, 2)
        >>> rows[0]["bench"], rows[0]["name"]
        ('kernel', 'sigmoid_backward')
    """
    timed = [_Timed(case) for case in selected]
    for _ in range(repeats):
        for t in timed:
            t.time_numba()
            t.time_numpy()
    return [
        {
            "bench": "kernel",
            "name": t.case.name,
            "module": t.case.module,
            "baseline": t.case.baseline,
            "shape": [t.case.rows, t.case.cols],
            "dtype": "float32",
            "threads": threads,
            "numba_ms": round(t.numba_ms, 3),
            "numpy_ms": round(t.numpy_ms, 3),
            "speedup": round(t.numpy_ms / t.numba_ms, 2),
        }
        for t in timed
    ]


def _compile_probe(module_name: str) -> None:
    """In this (fresh) process: import one kernel module and call each of its kernels once
    in float32 and once in float64; print the times as one JSON object."""
    import importlib

    t0 = time.perf_counter()
    import numba  # noqa: F401

    t1 = time.perf_counter()
    module = importlib.import_module(f"memgrad._kernels.{module_name}")
    t2 = time.perf_counter()
    first_calls = 0.0
    count = 0
    for case in cases():
        if case.module != module_name or case.reference is not None:
            continue
        kernel = getattr(module, case.kernel)
        for dt in (np.float32, np.float64):
            args = case.args(4, 8, np.dtype(dt))
            t = time.perf_counter()
            kernel(*args)
            first_calls += time.perf_counter() - t
            count += 1
    print(json.dumps({"numba_import_s": t1 - t0, "module_import_s": t2 - t1,
                      "first_calls_s": first_calls, "signatures": count}))


def compile_times(threads: int, machine: dict[str, Any]) -> list[dict[str, Any]]:
    """For each kernel module: first-call time with an empty cache, then from the cache."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="memgrad-numba-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS=str(threads))
        for module in MODULES:
            runs = []
            for _ in ("cold", "cached"):
                out = subprocess.run(
                    [sys.executable, __file__, "--compile-probe", module],
                    env=env, capture_output=True, text=True, check=True,
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            row = {
                "bench": "compile",
                "module": module,
                "signatures": runs[0]["signatures"],
                "cold_s": round(runs[0]["first_calls_s"], 3),
                "cached_s": round(runs[1]["first_calls_s"], 3),
                "module_import_s": round(runs[1]["module_import_s"], 3),
                "numba_import_s": round(runs[1]["numba_import_s"], 3),
            }
            print(json.dumps({**row, "machine": machine}), flush=True)
            rows.append(row)
    return rows


def _table(kernels: list[dict], compiles: list[dict]) -> str:
    lines = [
        f"{'kernel':<24} {'baseline':<16} {'numba ms':>9} {'numpy ms':>9} {'speedup':>8}  verdict",
    ]
    for r in kernels:
        verdict = "keep" if r["speedup"] >= KEEP_AT else f"below {KEEP_AT:g}x"
        lines.append(
            f"{r['name']:<24} {r['baseline']:<16} {r['numba_ms']:>9.2f} {r['numpy_ms']:>9.2f} "
            f"{r['speedup']:>7.2f}x  {verdict}"
        )
    if compiles:
        lines += ["", f"{'module':<12} {'signatures':>10} {'cold s':>8} {'cached s':>9}"]
        for r in compiles:
            lines.append(
                f"{r['module']:<12} {r['signatures']:>10} {r['cold_s']:>8.2f} "
                f"{r['cached_s']:>9.3f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true",
                        help="skip the compile-time measurement")
    parser.add_argument("--compile-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_probe:
        _compile_probe(args.compile_probe)
        return 0
    # must be set before numba is imported (the kernel modules import it lazily)
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    machine = machine_info()
    kernels = measure(cases(), args.repeats, args.threads)
    for row in kernels:
        print(json.dumps({**row, "machine": machine}), flush=True)
    compiles = [] if args.no_compile else compile_times(args.threads, machine)
    print()
    print(_table(kernels, compiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
