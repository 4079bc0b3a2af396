"""Processes and collectives: the world of ranks, on MPI through mpi4py.

NOTE [ World ]
``init()`` decides once per process. Started by ``mpiexec`` (the launcher's environment
says so), the world is MPI's ``COMM_WORLD``; started plainly, it is this process alone, world
size 1, and mpi4py is never imported: every collective is then the identity, so code
written for several ranks runs unchanged on one, without the ``dist`` extra. Collectives
act in place on a tensor's storage, outside autograd (as ``torch.distributed`` does), and
bump its version so that a saved tensor changed behind autograd's back is caught.

NOTE [ Faults ]
A rank that raises while others wait in a collective would leave them waiting for ever, and
a rank that exits normally calls ``MPI_Finalize``, which waits for the others too. So when
the world has more than one rank, ``init()`` installs an exception hook: it prints the
error once, prefixed with the rank, and calls ``MPI_Abort``, which makes ``mpiexec`` end
every rank with a non-zero status. An error raised on every rank alike (``all_ranks=True``
on a ``DistributedError``) is printed by rank 0 only; the other ranks give it a moment
before aborting. Ctrl-C, which ``mpiexec`` passes to every rank, is one line from rank 0.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from types import TracebackType
from typing import Any

import numpy as np

from memgrad.errors import MemgradError
from memgrad.tensor import Tensor

__all__ = [
    "DistributedError",
    "init",
    "is_initialized",
    "rank",
    "world_size",
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather_object",
    "broadcast_object",
    "launched_by_mpi",
]

# set by the launchers of Open MPI, PMIx, and MPICH's Hydra in every process they start
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")
_OPS = ("sum", "mean")
# how long a rank that is not rank 0 waits for rank 0 to print an error all ranks raised
_QUIET_ABORT_SECONDS = 2.0


class DistributedError(MemgradError, RuntimeError):
    """A distributed setup or collective failed. ``all_ranks`` is true when every rank
    raises the same error (only rank 0 prints it)."""

    def __init__(self, message: str, all_ranks: bool = False) -> None:
        super().__init__(message)
        self.all_ranks = all_ranks


class _World:
    __slots__ = ("comm", "rank", "size", "mpi")

    def __init__(self, comm: Any, rank: int, size: int, mpi: Any) -> None:
        self.comm = comm
        self.rank = rank
        self.size = size
        self.mpi = mpi


_world: _World | None = None


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher (``mpiexec``)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


def init() -> None:
    """Join the world of ranks: MPI's ``COMM_WORLD`` under ``mpiexec``, else this process
    alone (world size 1). Idempotent; ``rank()``, ``world_size()`` and the collectives call
    it on first use.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.init()
        >>> dist.rank(), dist.world_size()
        (0, 1)
    """
    global _world
    if _world is not None:
        return
    if not launched_by_mpi():
        _world = _World(None, 0, 1, None)
        return
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError(
            "memgrad.distributed.init: this process was started by mpiexec, but mpi4py is not "
            "installed; install the dist extra: pip install 'memgrad[dist]'"
        ) from None
    comm = MPI.COMM_WORLD
    _world = _World(comm, comm.Get_rank(), comm.Get_size(), MPI)
    if _world.size > 1:
        sys.excepthook = _abort_on_error


def is_initialized() -> bool:
    """Whether ``init()`` has run in this process."""
    return _world is not None


def _get() -> _World:
    if _world is None:
        init()
    assert _world is not None
    return _world


def rank() -> int:
    """This process's rank, from 0 to ``world_size() - 1``.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.rank()
        0
    """
    return _get().rank


def world_size() -> int:
    """How many ranks train together (1 without ``mpiexec``).

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.world_size()
        1
    """
    return _get().size


def barrier() -> None:
    """Wait until every rank has called ``barrier()``.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.barrier()
    """
    w = _get()
    if w.comm is not None:
        w.comm.Barrier()


def _buffer(api: str, tensor: Any) -> np.ndarray:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{api}: expected a Tensor, got {type(tensor).__name__}")
    data = tensor._data
    if not data.flags.c_contiguous or not data.flags.writeable:
        raise ValueError(
            f"{api}: the tensor must be contiguous and writable (the collective works in place "
            f"on its storage), got strides {data.strides} for shape {data.shape}; pass "
            "t.contiguous() and use the result"
        )
    return data


def all_reduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """Replace ``tensor``'s values, on every rank, by their sum (``op="sum"``) or mean
    (``op="mean"``) over all ranks. In place, outside autograd; returns ``tensor``.

    Example:
        >>> import memgrad as mg
        >>> import memgrad.distributed as dist
        >>> dist.all_reduce(mg.tensor([1.0, 2.0]), op="mean")
        tensor([1., 2.])
    """
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {_OPS}, got {op!r}")
    data = _buffer("all_reduce", tensor)
    if op == "mean" and data.dtype.kind not in "fc":
        raise TypeError(
            f"all_reduce: op='mean' needs a floating tensor, got {data.dtype}; use op='sum' "
            "or convert the tensor with .float() first"
        )
    w = _get()
    if w.comm is not None:
        w.comm.Allreduce(w.mpi.IN_PLACE, data, op=w.mpi.SUM)
        if op == "mean":
            data /= w.size
        tensor._bump_version()
    return tensor


def broadcast(tensor: Tensor, src: int = 0) -> Tensor:
    """Replace ``tensor``'s values on every rank by those on rank ``src``. In place, outside
    autograd; returns ``tensor``.

    Example:
        >>> import memgrad as mg
        >>> import memgrad.distributed as dist
        >>> dist.broadcast(mg.tensor([3.0]), src=0)
        tensor([3.])
    """
    data = _buffer("broadcast", tensor)
    w = _get()
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < w.size:
        raise ValueError(
            f"broadcast: src must be a rank in [0, {w.size}), got {src!r}; pass the rank whose "
            "values every rank should receive"
        )
    if w.comm is not None:
        w.comm.Bcast(data, root=src)
        tensor._bump_version()
    return tensor


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (any picklable object), in rank order, on every rank.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.all_gather_object({"rank": dist.rank()})
        [{'rank': 0}]
    """
    w = _get()
    return [obj] if w.comm is None else w.comm.allgather(obj)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` (any picklable object) on every rank; the others' ``obj`` is
    ignored.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.broadcast_object([1, 2])
        [1, 2]
    """
    w = _get()
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < w.size:
        raise ValueError(
            f"broadcast_object: src must be a rank in [0, {w.size}), got {src!r}; pass the "
            "rank whose object every rank should receive"
        )
    return obj if w.comm is None else w.comm.bcast(obj, root=src)


def _abort_on_error(
    kind: type[BaseException], error: BaseException, tb: TracebackType | None
) -> None:
    """NOTE [ Faults ]: print an uncaught error once, then end every rank."""
    w = _get()
    if issubclass(kind, KeyboardInterrupt):  # Ctrl-C reaches every rank: say it once
        if w.rank == 0:
            sys.stderr.write(f"memgrad.distributed: interrupted; aborting all {w.size} ranks\n")
            sys.stderr.flush()
        else:
            time.sleep(_QUIET_ABORT_SECONDS)  # rank 0 says it and aborts the job meanwhile
        w.comm.Abort(130)
        return
    if isinstance(error, DistributedError) and error.all_ranks and w.rank != 0:
        time.sleep(_QUIET_ABORT_SECONDS)  # rank 0 prints it and aborts the job meanwhile
    else:
        text = "".join(traceback.format_exception(kind, error, tb))
        sys.stderr.write(f"memgrad.distributed: rank {w.rank} of {w.size} failed:\n{text}")
        sys.stderr.write(f"memgrad.distributed: rank {w.rank} aborts all {w.size} ranks\n")
        sys.stderr.flush()
    w.comm.Abort(1)
