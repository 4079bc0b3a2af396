"""Keeping freed memory in the process for the next step (glibc's heap, on Linux).

NOTE [ Freed pages ]
A training step frees most of what it allocates (activations, gradients, temporaries), and
the next step allocates the same sizes again. With its default settings glibc gives the
free top of its heap back to the OS once it exceeds ``M_TRIM_THRESHOLD`` (twice the mmap
threshold, which rises with the sizes freed), and maps each array above
``M_MMAP_THRESHOLD`` afresh: either way the next step faults those pages in again, one
4 KiB page at a time, and the kernel zeroes each. Measured on a 2-core KVM guest: the W2
transformer of benchmarks/workloads.py took 31,025 page faults per step (0.14 s of system
time), the model of ``memgrad train`` 7,169 (12.5 of its 60 ms of CPU time); PyTorch's
steps of the same models 7,016 and 51. At import memgrad sets both thresholds
(``mallopt``): arrays up to 32 MiB (the largest threshold glibc accepts) come from the heap,
and freed memory stays in the process for reuse, so a step faults no pages once the first
has run. The process's resident memory then stays near its peak between steps instead of
shrinking after each (the peak itself does not change, and the tracker's counts are those
of the arrays, as before). ``MEMGRAD_KEEP_FREED_MEMORY=0`` in the environment leaves
glibc's defaults; other C libraries are left as they are.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_MMAP_THRESHOLD = 32 << 20  # glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
_TRIM_THRESHOLD = 2**31 - 1  # the largest int: the heap's top is given back above 2 GiB only


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False  # not a glibc system (macOS, Windows, musl)


def keep_freed_memory() -> bool:
    """Tell glibc to keep freed memory in the process for reuse rather than give it back to
    the OS after each step (NOTE [ Freed pages ] in memgrad/memory/heap.py); memgrad does
    this at import unless ``MEMGRAD_KEEP_FREED_MEMORY=0``. Returns whether it was set (False
    on other C libraries).

    Example:
        >>> import memgrad as mg
        >>> mg.memory.keep_freed_memory() in (True, False)
        True
    """
    if not _glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # the mmap threshold first: setting either one ends glibc's adjusting of both
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
