"""Running an op in parts of its batch, one part per BLAS thread.

NOTE [ Batch parts ]
NumPy's OpenBLAS parallelises inside each GEMM. For a batch of small products (one
convolution's per-sample GEMMs, attention's per-head matrices) that is a thread hand-off and
a barrier per product, and the serial work between the products (im2col, col2im) leaves the
other cores idle. ``in_parts`` instead splits the batch into k contiguous parts, k the BLAS
thread count, and runs each on its own thread with single-threaded BLAS (the calling thread
takes the first part, ``k - 1`` helper threads the others; OpenBLAS's
``openblas_set_num_threads_local``, 0.3.27 or later, sets the count per thread): one join
per op. Each part writes its own slice of the result, or returns a partial sum that the
caller adds up in part order, so results do not depend on timing. With one BLAS thread, or
a BLAS without the per-thread count, or an op under ``PARTS_MIN_MACS`` multiply-adds (the
hand-off costs tens of microseconds), everything runs on the calling thread. A forked child
makes its own helper threads.

Example:
    >>> in_parts(4, 0, lambda lo, hi: (lo, hi))  # too small to split: one part
    [(0, 4)]
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["PARTS_MIN_MACS", "Parts", "in_parts"]

# multiply-adds below which an op stays on the calling thread: about 0.1 ms of one core,
# against tens of microseconds for a hand-off
PARTS_MIN_MACS = 1 << 23


def _find_set_local() -> Any:
    """``openblas_set_num_threads_local`` of NumPy's bundled OpenBLAS (the calling thread's
    BLAS thread count, returning the previous one), or None."""
    here = os.path.dirname(np.__file__)
    for path in glob.glob(here + ".libs/*openblas*") + glob.glob(here + "/.dylibs/*openblas*"):
        try:
            fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
        except OSError:
            continue
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
            return fn
    return None


class Parts:
    """The helper threads of ``in_parts``, made on first use."""

    set_local: object = False  # not looked up yet
    pool: ThreadPoolExecutor | None = None
    size = 0
    lock = threading.Lock()  # two threads' first ops make one pool


def _reset_after_fork() -> None:
    Parts.pool, Parts.size = None, 0  # the child has none of the parent's threads
    Parts.lock = threading.Lock()  # nor a lock another thread of the parent held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _one_blas_thread(set_local: Any, work: Callable[[int, int], Any], lo: int, hi: int) -> Any:
    prev = set_local(1)
    try:
        return work(lo, hi)
    finally:
        set_local(prev)


def in_parts(n: int, macs: int, work: Callable[[int, int], Any]) -> list:
    """``[work(lo, hi), ...]`` over contiguous parts of the batch ``range(n)``: one part per
    BLAS thread, each on its own thread with single-threaded BLAS, or ``[work(0, n)]`` when
    NumPy's BLAS runs one thread here or offers no per-thread count, or the op's ``macs``
    multiply-adds are too few to pay for the hand-off (NOTE [ Batch parts ])."""
    if Parts.set_local is False:
        Parts.set_local = _find_set_local()
    set_local = Parts.set_local
    if set_local is None or n < 2 or macs < PARTS_MIN_MACS:
        return [work(0, n)]
    threads = set_local(1)
    try:
        k = min(threads, n)
        if k < 2:
            return [work(0, n)]
        with Parts.lock:
            if Parts.size < k - 1:
                Parts.pool = ThreadPoolExecutor(k - 1, thread_name_prefix="memgrad-parts")
                Parts.size = k - 1
            pool = Parts.pool
        ends = [n * i // k for i in range(k + 1)]
        futures = [pool.submit(_one_blas_thread, set_local, work, ends[i], ends[i + 1])
                   for i in range(1, k)]
        try:
            first = work(0, ends[1])
        finally:
            rest = [f.result() for f in futures]
        return [first, *rest]
    finally:
        set_local(threads)
