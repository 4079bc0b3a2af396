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
A rank whose program ends takes part in one last check (NOTE [ In step ]), so that ranks
still in a collective learn it at once instead of waiting.

NOTE [ Waiting ]
No collective blocks inside MPI: each starts MPI's nonblocking variant and polls its
request with ``Test()`` until it completes or the timeout of ``init(timeout=)`` has passed
since the wait began; then the rank raises a ``DistributedError`` naming itself, the
collective and the step, and the exception hook ends every rank. The poll spins for
``_SPIN_SECONDS`` (a collective whose ranks arrive together finishes at MPI's own speed),
then sleeps between tests, doubling the pause up to ``_PAUSE_MAX``: a rank that waits
minutes for a slow one uses about no CPU, and a transfer that starts late is delayed at most
that much per step of MPI's protocol. Open MPI's nonblocking all-reduce (libnbc) takes the
binomial algorithm for every in-place reduction unless told otherwise, three times slower
than the ring between two ranks at 16 MiB, so ``init()`` asks for the ring
(``OMPI_MCA_coll_libnbc_iallreduce_algorithm=1``) unless the environment chose already.

NOTE [ In step ]
MPI pairs the k-th collective of every rank with the k-th of the others, whatever they are;
ranks out of step (one skipped a backward, caught an error and carried on, or ran out of
data) would reduce unrelated buffers, silently or with an error from deep inside MPI. So
every collective first posts its *record* (kind, dtype, count, DDP step and bucket, ...;
``_FIELDS`` numbers) in an all-gather on a communicator of its own, a duplicate of the
world's made on the first collective: the k-th record of each rank meets the k-th of every
other, and records only ever meet records. The payload starts at once, behind it; a wait
tests the records in the order they were posted and a payload only once every record before
it agreed. Records that differ raise, on every rank alike, one error that says what each rank
was doing. Since each rank receives every record, the records also carry a little data that
may differ (``_EXTRA``): the byte counts of the object collectives, a rank's activity in
``DistributedDataParallel.join()``. ``barrier()`` is the record alone.
"""

from __future__ import annotations

import atexit
import datetime
import math
import numbers
import os
import pickle
import sys
import time
import traceback
from collections import deque
from collections.abc import Sequence
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
    "all_gather",
    "reduce_scatter",
    "all_gather_object",
    "broadcast_object",
    "launched_by_mpi",
    "destroy_process_group",
]

# set by the launchers of Open MPI, PMIx, and MPICH's Hydra in every process they start
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")
_OPS = ("sum", "mean")
# how long a rank that is not rank 0 waits for rank 0 to print an error all ranks raised
_QUIET_ABORT_SECONDS = 2.0
_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
# NOTE [ Waiting ]: spin this long, then sleep between tests, the pause doubling up to the max
_SPIN_SECONDS = 0.05
_PAUSE_FIRST, _PAUSE_MAX = 1e-4, 1e-3
# NOTE [ In step ]: a record is _FIELDS numbers the ranks must agree on, then the DDP step
# this rank last ran (context for the messages) and _EXTRA, which may differ
_FIELDS = 6
_STEP, _EXTRA = _FIELDS, _FIELDS + 1
(_ALL_REDUCE, _BROADCAST, _BARRIER, _ALL_GATHER_OBJECT, _BROADCAST_OBJECT, _BUCKET, _JOIN,
 _EXIT, _ALL_GATHER, _REDUCE_SCATTER, _DESTROY) = range(1, 12)


class DistributedError(MemgradError, RuntimeError):
    """A distributed setup or collective failed. ``all_ranks`` is true when every rank
    raises the same error (only rank 0 prints it)."""

    def __init__(self, message: str, all_ranks: bool = False) -> None:
        super().__init__(message)
        self.all_ranks = all_ranks


class _Check:
    """NOTE [ In step ]: one posted record and, once its request completed, every rank's."""

    __slots__ = ("request", "mine", "records")

    def __init__(self, request: Any, mine: np.ndarray, records: np.ndarray) -> None:
        self.request = request
        self.mine = mine
        self.records = records


class _World:
    __slots__ = ("comm", "rank", "size", "mpi", "timeout", "records", "pending", "step")

    def __init__(self, comm: Any, rank: int, size: int, mpi: Any) -> None:
        self.comm = comm
        self.rank = rank
        self.size = size
        self.mpi = mpi
        self.timeout = _DEFAULT_TIMEOUT.total_seconds()
        self.records: Any = None  # the communicator of the records, made on first use
        self.pending: deque[_Check] = deque()  # records posted and not yet agreed
        self.step = 0  # the last DistributedDataParallel step this rank ran


_world: _World | None = None


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher (``mpiexec``)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


def _seconds(timeout: Any) -> float:
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, numbers.Real) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"memgrad.distributed.init: timeout must be a datetime.timedelta or a number of "
            f"seconds, got {type(timeout).__name__} {timeout!r}; pass e.g. "
            "timeout=datetime.timedelta(minutes=30) or timeout=60"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"memgrad.distributed.init: timeout must be positive and finite, got {timeout!r}; "
            "pass how long a rank may wait in a collective for the others, e.g. timeout=60"
        )
    return seconds


def init(timeout: datetime.timedelta | float | None = None) -> None:
    """Join the world of ranks: MPI's ``COMM_WORLD`` under ``mpiexec``, else this process
    alone (world size 1). Idempotent; ``rank()``, ``world_size()`` and the collectives call
    it on first use.

    ``timeout`` (a ``datetime.timedelta`` or seconds; 30 minutes by default, as PyTorch's
    ``init_process_group``) bounds how long a rank waits in a collective for the others:
    past it the rank raises ``DistributedError`` and every rank ends. Passed again, it
    replaces the timeout in force.

    Example:
        >>> import datetime
        >>> import memgrad.distributed as dist
        >>> dist.init(timeout=datetime.timedelta(minutes=5))
        >>> dist.rank(), dist.world_size()
        (0, 1)
    """
    global _world
    seconds = None if timeout is None else _seconds(timeout)
    if _world is None:
        _world = _join()
    if seconds is not None:
        _world.timeout = seconds


def _join() -> _World:
    if not launched_by_mpi():
        return _World(None, 0, 1, None)
    # NOTE [ Waiting ]: read by Open MPI when mpi4py initialises it, below
    os.environ.setdefault("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1")
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError(
            "memgrad.distributed.init: this process was started by mpiexec, but mpi4py is not "
            "installed; install the dist extra: pip install 'memgrad[dist]'"
        ) from None
    comm = MPI.COMM_WORLD
    world = _World(comm, comm.Get_rank(), comm.Get_size(), MPI)
    if world.size > 1:
        sys.excepthook = _abort_on_error
        atexit.register(_at_exit)
    return world


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


# ----------------------------------------------------------------- NOTE [ In step ]
def _dtype_code(dtype: np.dtype) -> int:
    return ord(np.dtype(dtype).char)


def _agree(kind: int, *fields: int, extra: int = 0) -> _Check:
    """Post this rank's record of the collective it starts (NOTE [ In step ])."""
    w = _get()
    if w.records is None:
        records, request = w.comm.Idup()
        _wait([request], "its first collective (setting it up)")
        w.records = records
    mine = np.zeros(_EXTRA + 1, dtype=np.int64)
    mine[0] = kind
    mine[1:1 + len(fields)] = fields
    mine[_STEP] = w.step
    mine[_EXTRA] = extra
    everyone = np.empty((w.size, len(mine)), dtype=np.int64)
    check = _Check(w.records.Iallgather(mine, everyone), mine, everyone)
    w.pending.append(check)
    return check


def _settle() -> bool:
    """Check the records that arrived, in order; whether none is left pending. Raises
    ``DistributedError`` on every rank when the ranks' records differ."""
    w = _get()
    while w.pending:
        check = w.pending[0]
        if not check.request.Test():
            return False
        w.pending.popleft()
        agreed = check.records[:, :_FIELDS]
        if (agreed != agreed[0]).any():
            raise DistributedError(_out_of_step(check.records), all_ranks=True)
    return True


def _wait(requests: Sequence[Any], what: str, deadline: bool = True) -> None:
    """NOTE [ Waiting ]: poll the pending records, then ``requests``, until done or the
    timeout (none if not ``deadline``)."""
    w = _get()
    test = w.mpi.Request.Testall
    if _settle() and test(requests):
        return
    start = time.monotonic()
    spin_until = start + _SPIN_SECONDS
    pause = _PAUSE_FIRST
    while not (_settle() and test(requests)):
        now = time.monotonic()
        if deadline and now - start >= w.timeout:
            raise DistributedError(_timed_out(what, now - start))
        if now >= spin_until:
            time.sleep(pause)
            pause = min(2 * pause, _PAUSE_MAX)


def _describe(record: np.ndarray) -> str:
    """Where a rank is, from its record: "in all_reduce(...) after ... step 3"."""
    kind, a, b, c, d, e = (int(v) for v in record[:_FIELDS])
    step = int(record[_STEP])
    if kind == _BUCKET:
        return (f"in DistributedDataParallel step {a}, reducing bucket {b + 1} of {c} "
                f"({d} {_dtype_name(e)})")
    if kind == _JOIN:
        return f"in DistributedDataParallel.join() at step {a}"
    if kind == _ALL_REDUCE:
        where = f"in all_reduce(op={_OPS[c]!r}) of {b} {_dtype_name(a)}"
    elif kind == _BROADCAST:
        where = f"in broadcast(src={c}) of {b} {_dtype_name(a)}"
    elif kind == _ALL_GATHER:
        where = f"in all_gather() of {b} {_dtype_name(a)}"
    elif kind == _REDUCE_SCATTER:
        where = f"in reduce_scatter(op={_OPS[c]!r}) of {b} {_dtype_name(a)} per rank"
    elif kind == _BARRIER:
        where = "in barrier()"
    elif kind == _DESTROY:
        where = "in destroy_process_group()"
    elif kind == _ALL_GATHER_OBJECT:
        where = "in all_gather_object()"
    elif kind == _BROADCAST_OBJECT:
        where = f"in broadcast_object(src={a})"
    else:
        where = "at the end of its program"
    return f"{where} after DistributedDataParallel step {step}" if step else where


def _dtype_name(code: int) -> str:
    try:
        return str(np.dtype(chr(code)))
    except (TypeError, ValueError):
        return f"dtype {code}"


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]} is"
    return f"ranks {', '.join(map(str, ranks))} are"


def _out_of_step(records: np.ndarray) -> str:
    doing: dict[str, list[int]] = {}
    for r, record in enumerate(records):
        doing.setdefault(_describe(record), []).append(r)
    parts = "; ".join(f"{_ranks(ranks)} {where}" for where, ranks in doing.items())
    return (
        f"memgrad.distributed: the ranks fell out of step: {parts}. Every rank must run the "
        "same collectives in the same order; one that skipped a backward, caught an error "
        "and carried on, or ran out of data before the others does not (for uneven inputs, "
        "train inside `with model.join():`, DistributedDataParallel.join)"
    )


def _timed_out(what: str, waited: float) -> str:
    w = _get()
    if w.pending:
        where = _describe(w.pending[0].mine)
        why = "the other ranks did not all start it"
    else:
        where = f"in {what}"
        why = "it did not complete on every rank"
    return (
        f"memgrad.distributed: rank {w.rank} of {w.size} timed out after {waited:.1f} s "
        f"{where}: {why}. A rank that ran out of data (see DistributedDataParallel.join), "
        "left the training loop early or is stuck elsewhere leaves the others waiting; if a "
        "rank legitimately works alone for longer, raise the timeout with "
        "memgrad.distributed.init(timeout=...)"
    )


# ----------------------------------------------------------------- collectives
def barrier() -> None:
    """Wait until every rank has called ``barrier()``.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.barrier()
    """
    w = _get()
    if w.comm is not None:
        _agree(_BARRIER)  # the all-gather of the records is the barrier
        _wait([], "barrier()")


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
        _agree(_ALL_REDUCE, _dtype_code(data.dtype), data.size, _OPS.index(op))
        _wait([w.comm.Iallreduce(w.mpi.IN_PLACE, data, op=w.mpi.SUM)], "all_reduce()")
        if op == "mean":
            data /= w.size
        tensor._bump_version()
    return tensor


def _check_src(api: str, src: Any, size: int) -> None:
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < size:
        raise ValueError(
            f"{api}: src must be a rank in [0, {size}), got {src!r}; pass the rank whose "
            f"{'object' if api == 'broadcast_object' else 'values'} every rank should receive"
        )


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
    _check_src("broadcast", src, w.size)
    if w.comm is not None:
        _agree(_BROADCAST, _dtype_code(data.dtype), data.size, src)
        _wait([w.comm.Ibcast(data, root=src)], "broadcast()")
        tensor._bump_version()
    return tensor


def _peers(api: str, tensors: Any, like: np.ndarray, size: int, name: str) -> list[np.ndarray]:
    """The buffers of ``tensors``, one per rank, each of ``like``'s shape and dtype."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) != size:
        got = (f"{len(tensors)} tensors" if isinstance(tensors, (list, tuple))
               else type(tensors).__name__)
        raise ValueError(f"{api}: {name} must be a list of world_size() = {size} tensors, one "
                         f"per rank, got {got}")
    out = []
    for i, t in enumerate(tensors):
        data = _buffer(api, t)
        if data.shape != like.shape or data.dtype != like.dtype:
            raise ValueError(f"{api}: {name}[{i}] must have the shape and dtype of the "
                             f"tensor, {like.shape} {like.dtype}, got {data.shape} "
                             f"{data.dtype}")
        out.append(data)
    return out


def all_gather(tensor_list: list[Tensor], tensor: Tensor) -> list[Tensor]:
    """Fill ``tensor_list[i]``, on every rank, with rank ``i``'s ``tensor`` (the list holds
    ``world_size()`` tensors of ``tensor``'s shape and dtype). In place, outside autograd;
    returns ``tensor_list``.

    Example:
        >>> import memgrad as mg
        >>> import memgrad.distributed as dist
        >>> out = [mg.zeros(2)]
        >>> dist.all_gather(out, mg.tensor([1.0, 2.0]))
        [tensor([1., 2.])]
    """
    data = _buffer("all_gather", tensor)
    w = _get()
    outs = _peers("all_gather", tensor_list, data, w.size, "tensor_list")
    if w.comm is None:
        outs[0][...] = data
    else:
        _agree(_ALL_GATHER, _dtype_code(data.dtype), data.size)
        everyone = np.empty((w.size, *data.shape), dtype=data.dtype)
        _wait([w.comm.Iallgather(data, everyone)], "all_gather()")
        for out, got in zip(outs, everyone):
            out[...] = got
    for t in tensor_list:
        t._bump_version()
    return tensor_list


def reduce_scatter(output: Tensor, input_list: list[Tensor], op: str = "sum") -> Tensor:
    """Replace ``output``'s values on rank ``r`` by the sum (``op="sum"``) or mean
    (``op="mean"``) over all ranks of their ``input_list[r]`` (``world_size()`` tensors of
    ``output``'s shape and dtype). In place, outside autograd; returns ``output``.

    Example:
        >>> import memgrad as mg
        >>> import memgrad.distributed as dist
        >>> dist.reduce_scatter(mg.zeros(2), [mg.tensor([1.0, 2.0])])
        tensor([1., 2.])
    """
    if op not in _OPS:
        raise ValueError(f"reduce_scatter: op must be one of {_OPS}, got {op!r}")
    data = _buffer("reduce_scatter", output)
    if op == "mean" and data.dtype.kind not in "fc":
        raise TypeError(
            f"reduce_scatter: op='mean' needs a floating tensor, got {data.dtype}; use "
            "op='sum' or convert the tensors with .float() first"
        )
    w = _get()
    ins = _peers("reduce_scatter", input_list, data, w.size, "input_list")
    if w.comm is None:
        data[...] = ins[0]
    else:
        _agree(_REDUCE_SCATTER, _dtype_code(data.dtype), data.size, _OPS.index(op))
        send = np.stack(ins)
        _wait([w.comm.Ireduce_scatter_block(send, data, op=w.mpi.SUM)], "reduce_scatter()")
        if op == "mean":
            data /= w.size
    output._bump_version()
    return output


def destroy_process_group() -> None:
    """Leave the world ``init()`` joined: every rank calls it at the same point (it waits
    for the others, and ranks out of step are reported as for any collective). Afterwards
    ``is_initialized()`` is False and a collective or ``init()`` joins again.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.init()
        >>> dist.destroy_process_group()
        >>> dist.is_initialized()
        False
    """
    global _world
    w = _world
    if w is None:
        raise DistributedError("destroy_process_group: no process group to destroy; call "
                               "memgrad.distributed.init() first")
    if w.comm is not None:
        _agree(_DESTROY)
        _wait([], "destroy_process_group()")
        w.records.Free()
        if w.size > 1:
            atexit.unregister(_at_exit)
            sys.excepthook = sys.__excepthook__
    _world = None


def _pickled(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (any picklable object), in rank order, on every rank.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.all_gather_object({"rank": dist.rank()})
        [{'rank': 0}]
    """
    w = _get()
    if w.comm is None:
        return [obj]
    mine = _pickled(obj)
    check = _agree(_ALL_GATHER_OBJECT, extra=mine.size)
    _wait([], "all_gather_object()")
    sizes = check.records[:, _EXTRA].tolist()
    everyone = np.empty(sum(sizes), dtype=np.uint8)
    _wait([w.comm.Iallgatherv(mine, [everyone, sizes])], "all_gather_object()")
    ends = np.cumsum(sizes).tolist()
    return [pickle.loads(everyone[end - n:end].tobytes()) for n, end in zip(sizes, ends)]


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` (any picklable object) on every rank; the others' ``obj`` is
    ignored.

    Example:
        >>> import memgrad.distributed as dist
        >>> dist.broadcast_object([1, 2])
        [1, 2]
    """
    w = _get()
    _check_src("broadcast_object", src, w.size)
    if w.comm is None:
        return obj
    data = _pickled(obj) if w.rank == src else None
    check = _agree(_BROADCAST_OBJECT, src, extra=0 if data is None else data.size)
    _wait([], "broadcast_object()")
    if data is not None:
        _wait([w.comm.Ibcast(data.copy(), root=src)], "broadcast_object()")
        return obj
    data = np.empty(int(check.records[src, _EXTRA]), dtype=np.uint8)
    _wait([w.comm.Ibcast(data, root=src)], "broadcast_object()")
    return pickle.loads(data.tobytes())


# ----------------------------------------------------------------- NOTE [ Faults ]
def _at_exit() -> None:
    """NOTE [ Faults ]: the program ends; the others learn it at their next collective (no
    timeout here: another rank may legitimately work alone for long before it ends too)."""
    w = _world
    if w is None or w.mpi.Is_finalized():
        return
    try:
        _agree(_EXIT)
        _wait([], "the end of its program", deadline=False)
    except (DistributedError, KeyboardInterrupt) as error:
        _abort_on_error(type(error), error, error.__traceback__)


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
