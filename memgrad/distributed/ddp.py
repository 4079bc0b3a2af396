"""``DistributedDataParallel``: average gradients across ranks while backward runs.

NOTE [ Buckets ]
At construction rank 0's parameters and buffers are broadcast, after checking that every
rank built the same model. The parameters that require grad are packed, in reverse
registration order (about the order backward finishes them), into buckets of at most
``bucket_bytes`` of one dtype. A backward that follows a forward through the wrapper (and is
not inside ``no_sync()``) then works like this:
1. Each parameter's post-accumulate hook counts how many times its ``.grad`` was added into.
   When the count reaches the number learned in the first synchronised step (NOTE [ Uses
   ]), the gradient is final; when every gradient of a bucket is final, the bucket is
   copied into its flat buffer and all-reduced without blocking (``Iallreduce``). Buckets
   start in index order on every rank, so that ranks match their collectives one to one.
   Each hook also tests the reductions in flight, which lets MPI progress them while
   backward goes on.
2. When the outermost backward has finished (``autograd.engine.queue_callback``), the
   buckets not yet started start, in order; all are waited for, and each gradient becomes
   the mean over ranks. Optimizer code after ``backward()`` sees the averaged ``.grad``.
Each bucket carries one flag per parameter, 1 where this rank has a gradient; a parameter
no rank used keeps ``.grad`` None, as without the wrapper. Each bucket's reduction is
preceded by its record (NOTE [ In step ] in comm.py): the step, which counts the
synchronised forwards, the bucket's index, the number of buckets, its size and dtype, so
that a rank one step ahead or one bucket behind is an error on every rank, not a silent
average of unrelated gradients. A step whose backward failed after some buckets started
has those reductions completed by the next forward, before the buckets are reused.

NOTE [ Gradients as bucket views ]
With ``gradient_as_bucket_view=True`` each parameter's ``.grad`` is a view of its slice of
the bucket, so gradients take no memory besides the buckets, are not copied in, and the
mean is taken in place. A forward through the wrapper gives each parameter whose ``.grad``
is None its zeroed slice; backward then adds into it in place (a linear layer's weight
gradient in row blocks, NOTE [ Accumulate in place ]), which is exact, since 0 + g == g.
A parameter whose ``.grad`` is another tensor (set by the user, say) is copied in when its
bucket starts and its ``.grad`` becomes the view. A slice given out zeroed but never added
into on any rank goes back to None. The price: an optimizer step that keeps a reference to
``.grad`` sees it change when the next backward adds into the bucket (as in PyTorch).

NOTE [ Uses ]
A gradient is final once its ``.grad`` has been added into as many times as this backward
will add into it. For a graph of built-in ops that is once for every parameter the graph
reaches, however many times it was used (the engine sums the uses first), and never for
the others; so each synchronised forward walks the graph back from the wrapper's outputs
and expects 1 for the parameters it reaches and 0 for the rest (unused parameters, as
PyTorch's ``find_unused_parameters``). A custom ``Function`` may run a backward inside its
own, as the reentrant checkpoint does, adding into a parameter once per region; when the
graph holds one, the counts are learned instead: the first such step reduces every bucket
at its end and records them, and later steps expect the same. Either way the first
synchronised step also records the order in which gradients became final, and the
buckets are rebuilt in that order (rank 0's, so that every rank agrees). A parameter that
receives a gradient after its bucket was reduced would end with a wrong gradient: that
raises ``DistributedError``.

NOTE [ Join ]
Inside ``join()`` (PyTorch's ``DistributedDataParallel.join``) each synchronised forward
first agrees a record ``_JOIN`` with the step, carrying 1 from a rank that has data. A rank
whose loop ended leaves the block and *shadows*: it posts the same record with 0, and while
some rank had data it takes part in that step's bucket reductions with zeros (in a scratch
buffer: its own gradients and weights stay as they were), and in the rebuild of the first
step. When a step's records are all 0, every rank has left the block: the parameters and
buffers of the rank that was last to have data (the lowest such rank) are broadcast, so that
every rank ends with the same weights. The mean divides by the initial world size
(``divide_by_initial_world_size=True``, PyTorch's default: every example weighs the same,
and a joined rank counts as zeros) or by the number of ranks that had data in that step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memgrad.autograd.engine import queue_callback
from memgrad.autograd.function import FunctionCtx
from memgrad.autograd.grad_mode import is_grad_enabled, no_grad
from memgrad.autograd.graph import AccumulateGrad
from memgrad.distributed import comm
from memgrad.distributed.comm import DistributedError
from memgrad.nn.module import Module
from memgrad.tensor import Tensor

__all__ = ["DistributedDataParallel", "DDPStats", "DEFAULT_BUCKET_BYTES"]

DEFAULT_BUCKET_BYTES = 25 * 2**20  # PyTorch's bucket_cap_mb=25


@dataclass
class DDPStats:
    """What the last synchronised backward did: ``buckets`` reduced, how many of them
    started ``during_backward`` (from a gradient hook, while backward still ran; the last of
    these has little left to overlap with) rather than at its end, and ``reductions``, by
    parameter name, how many times each gradient was reduced (1 for every parameter)."""

    buckets: int = 0
    during_backward: int = 0
    reductions: dict[str, int] = field(default_factory=dict)


class _Bucket:
    __slots__ = ("index", "params", "offsets", "storage", "flat", "waiting", "request")

    def __init__(self, index: int, params: list[int], sizes: list[int], dtype: np.dtype) -> None:
        self.index = index
        self.params = params
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        # the gradients, then one flag per parameter: 1 where this rank has a gradient; held
        # as a Tensor, so that memory accounting (memgrad.memory) counts the bucket
        self.storage = Tensor(np.empty(int(self.offsets[-1]) + len(params), dtype=dtype))
        self.flat = self.storage._data
        self.waiting = 0
        self.request: Any = None


class DistributedDataParallel(Module):
    """Wrap ``module`` so that ``backward()`` leaves in every parameter's ``.grad`` the mean
    of the gradients of all ranks, reduced in buckets of ``bucket_bytes`` that overlap with
    the rest of backward (NOTE [ Buckets ]). Rank 0's parameters and buffers are broadcast
    at construction. With one rank (no ``mpiexec``) it is ``module`` unchanged.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.distributed import DistributedDataParallel
        >>> model = DistributedDataParallel(mg.nn.Linear(4, 2))
        >>> model(mg.ones(3, 4)).sum().backward()
        >>> model.module.weight.grad.shape
        (2, 4)
    """

    def __init__(
        self,
        module: Module,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        gradient_as_bucket_view: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(
                f"DistributedDataParallel: expected an nn.Module to wrap, got "
                f"{type(module).__name__}; wrap a model, e.g. DistributedDataParallel(net)"
            )
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise ValueError(
                f"DistributedDataParallel: bucket_bytes must be a positive int, got "
                f"{bucket_bytes!r}; pass a size in bytes such as 25 * 2**20"
            )
        self.module = module
        self.bucket_bytes = bucket_bytes
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.stats = DDPStats()
        comm.init()
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._sync = True
        self._expecting = False
        self._queued = False
        self._index = {id(p): i for i, p in enumerate(self._params)}
        # NOTE [ Uses ]: the counts this backward should reach (None: reduce at the end),
        # whether its graph holds a custom Function, the counts learned from the first such
        # step, and whether the buckets were rebuilt after the first step
        self._expected: list[int] | None = None
        self._custom = False
        self._learned: list[int] | None = None
        self._rebuilt = False
        self._counts = [0] * len(self._params)
        self._reductions = [0] * len(self._params)
        self._final_order: dict[int, None] = {}  # parameters, in the order they became final
        # NOTE [ Gradients as bucket views ]: whether .grad is a zeroed slice given out by a
        # forward, and whether backward has added into it since the last reduction
        self._given = [False] * len(self._params)
        self._used = [False] * len(self._params)
        self._during = 0
        self._bucket_of: list[int] = []
        self._buckets: list[_Bucket] = []
        self._next = 0  # the next bucket to start
        self._step = 0  # synchronised forwards (NOTE [ Buckets ]), and shadowed steps
        # NOTE [ Join ]: inside join(), how the mean divides, what it divides by in this
        # step, and the last step in which each rank had data
        self._joining = False
        self._divide_by_initial = True
        self._divisor = comm.world_size()
        self._last_active: list[int] = []
        if comm.world_size() == 1:
            return
        self._check_same_model()
        with no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                comm.broadcast(_contiguous(t), src=0)
        self._build_buckets(list(range(len(self._params)))[::-1])
        for i, p in enumerate(self._params):
            p.register_post_accumulate_grad_hook(self._hook(i))

    # ------------------------------------------------------------------ public
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module; a backward from its result averages the gradients
        (unless inside ``no_sync()``)."""
        if comm.world_size() == 1 or not is_grad_enabled():
            return self.module(*args, **kwargs)
        self._expecting = self._sync
        self._reset_step()
        if self._expecting:
            self._step += 1
            comm._get().step = self._step
            self._divisor = comm.world_size()
            if self._joining:  # NOTE [ Join ]
                having = self._join_step(1)
                if not self._divide_by_initial:
                    self._divisor = having
        if self.gradient_as_bucket_view:
            self._give_views()
        out = self.module(*args, **kwargs)
        if self._expecting:
            self._arm(out)
        return out

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside this block, forwards through the wrapper lead to backwards that only
        accumulate gradients locally; the first synchronised backward after it averages the
        accumulated sums (gradient accumulation, as PyTorch's ``no_sync``).

        Example:
            >>> import memgrad as mg
            >>> from memgrad.distributed import DistributedDataParallel
            >>> model = DistributedDataParallel(mg.nn.Linear(2, 1))
            >>> with model.no_sync():
            ...     model(mg.ones(1, 2)).sum().backward()
            >>> model(mg.ones(1, 2)).sum().backward()
            >>> model.module.bias.grad
            tensor([2.])
        """
        previous = self._sync
        self._sync = False
        try:
            yield
        finally:
            self._sync = previous

    @contextlib.contextmanager
    def join(self, divide_by_initial_world_size: bool = True) -> Iterator[None]:
        """Train on uneven inputs: a rank whose loop inside this block ends before the
        others' keeps taking part in their gradient reductions, with zeros, until every rank
        has left the block; then all ranks take the weights of the rank that had data last
        (NOTE [ Join ], as PyTorch's ``DistributedDataParallel.join``). The mean divides by
        the world size (``divide_by_initial_world_size=True``: a joined rank counts as zeros)
        or by the number of ranks that had data in that step (False). Every synchronised
        forward inside the block must be followed by its backward.

        Example:
            >>> import memgrad as mg
            >>> from memgrad.distributed import DistributedDataParallel
            >>> model = DistributedDataParallel(mg.nn.Linear(2, 1))
            >>> with model.join():
            ...     for batch in [mg.ones(1, 2)] * 3:   # each rank its own number of batches
            ...         model(batch).sum().backward()
            >>> model.module.bias.grad
            tensor([3.])
        """
        if not isinstance(divide_by_initial_world_size, bool):
            raise TypeError(
                "DistributedDataParallel.join: divide_by_initial_world_size must be True or "
                f"False, got {divide_by_initial_world_size!r}"
            )
        if self._joining:
            raise RuntimeError(
                "DistributedDataParallel.join: already inside join() of this model; use one "
                "join() around the whole training loop"
            )
        self._joining = True
        self._divide_by_initial = divide_by_initial_world_size
        self._last_active = [0] * comm.world_size()
        try:
            yield
        except BaseException:
            self._joining = False
            raise
        try:
            if comm.world_size() > 1:
                self._shadow()
        finally:
            self._joining = False

    # ------------------------------------------------------------------ setup
    def _check_same_model(self) -> None:
        """Every rank must hold the same parameters and buffers, in the same order (the
        broadcast that follows pairs them by position)."""
        m = self.module
        mine = [
            (n, tuple(t.shape), str(t.dtype))
            for n, t in [*m.named_parameters(), *m.named_buffers()]
        ]
        everyone = comm.all_gather_object(mine)
        reference = everyone[0]
        for r, theirs in enumerate(everyone):
            if theirs == reference:
                continue
            ours, ref = {n: s for n, *s in theirs}, {n: s for n, *s in reference}
            differs = [n for n in [*ref, *ours] if ours.get(n) != ref.get(n)]
            if differs:
                name = differs[0]
                detail = (
                    f"{name!r} is {_describe(ours.get(name))} on rank {r} and "
                    f"{_describe(ref.get(name))} on rank 0"
                )
            else:
                detail = "the same tensors are registered in another order"
            raise DistributedError(
                f"DistributedDataParallel: rank {r}'s model differs from rank 0's: {detail}; "
                "build the same model (same sizes, dtypes and order) on every rank",
                all_ranks=True,
            )

    def _build_buckets(self, order: list[int]) -> None:
        buckets: list[tuple[list[int], np.dtype]] = []
        size = 0
        for i in order:
            data = self._params[i]._data
            if (
                not buckets
                or buckets[-1][1] != data.dtype
                or size + data.nbytes > self.bucket_bytes
            ):
                buckets.append(([], data.dtype))
                size = 0
            buckets[-1][0].append(i)
            size += data.nbytes
        self._buckets = [
            _Bucket(b, ids, [self._params[i]._data.size for i in ids], dtype)
            for b, (ids, dtype) in enumerate(buckets)
        ]
        self._bucket_of = [0] * len(self._params)
        self._views: list[np.ndarray] = [np.empty(0)] * len(self._params)
        for bucket in self._buckets:
            off = bucket.offsets
            for k, i in enumerate(bucket.params):
                self._bucket_of[i] = bucket.index
                # parameter i's slice of its bucket, in the parameter's shape
                self._views[i] = bucket.flat[off[k]:off[k + 1]].reshape(self._params[i].shape)

    # ------------------------------------------------------------------ per step
    def _give_views(self) -> None:
        """NOTE [ Gradients as bucket views ]: a zeroed slice for each ``.grad`` that is
        None."""
        for i, p in enumerate(self._params):
            if p.grad is None:
                view = self._views[i]
                view.fill(0)
                p.grad = Tensor(view)
                self._given[i] = True

    def _reset_step(self) -> None:
        live = [b.request for b in self._buckets if b.request is not None]
        if live:  # NOTE [ Buckets ]: a step left unfinished (its backward failed)
            comm._wait(live, f"DistributedDataParallel step {self._step}")
        self._counts = [0] * len(self._params)
        self._reductions = [0] * len(self._params)
        self._final_order = {}
        self._next = 0
        self._during = 0
        self._queued = False
        self._expected = None
        for bucket in self._buckets:
            bucket.request = None

    def _arm(self, out: Any) -> None:
        """NOTE [ Uses ]: the counts the coming backward should reach, from the graph."""
        expected = [0] * len(self._params)
        self._custom = False
        stack = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
        if not stack:
            return  # nothing to differentiate through the wrapper: reduce at the end
        seen = set(stack)
        while stack:
            node = stack.pop()
            if node.__class__ is AccumulateGrad:
                i = self._index.get(id(node.variable))
                if i is not None:
                    expected[i] = 1
                continue
            if isinstance(node, FunctionCtx):
                self._custom = True
            for child in node._inputs[0::3]:
                if child is not None and child not in seen:
                    seen.add(child)
                    stack.append(child)
        self._expected = self._learned if self._custom else expected
        if self._expected is not None:
            for bucket in self._buckets:
                bucket.waiting = sum(1 for i in bucket.params if self._expected[i] > 0)

    def _hook(self, i: int) -> Any:
        def on_grad(param: Tensor) -> None:
            self._used[i] = True
            if self._expecting:
                self._on_grad(i)

        return on_grad

    def _on_grad(self, i: int) -> None:
        if not self._queued:
            queue_callback(self._finish)
            self._queued = True
        self._counts[i] += 1
        bucket = self._buckets[self._bucket_of[i]]
        if bucket.index < self._next:
            self._too_late(i)
        if not self._rebuilt:
            self._final_order.pop(i, None)
            self._final_order[i] = None
        if self._expected is None:
            return
        if self._counts[i] == self._expected[i]:
            bucket.waiting -= 1
            while self._next < len(self._buckets) and self._buckets[self._next].waiting == 0:
                self._start(self._buckets[self._next])
                self._during += 1
        self._progress()

    def _too_late(self, i: int) -> None:
        expected = self._expected[i] if self._expected is not None else 0
        if self._custom:
            why = (
                f"{expected} as in the first step; the graph holds a custom Function (such as "
                "a reentrant checkpoint), so the counts were learned then: use each parameter "
                "the same number of times, in the same checkpoint regions, in every step"
            )
        else:
            why = (
                f"{expected} from the graph of the wrapper's output; compute everything that "
                "uses the parameters inside the wrapped module's forward"
            )
        raise DistributedError(
            f"DistributedDataParallel: parameter {self._names[i]!r} received a gradient after "
            f"its bucket was reduced: {self._counts[i]} additions into .grad in this backward "
            f"where the wrapper expected {why}"
        )

    def _start(self, bucket: _Bucket) -> None:
        flat = bucket.flat
        flags = flat[bucket.offsets[-1]:]
        views = self.gradient_as_bucket_view
        for k, i in enumerate(bucket.params):
            self._reductions[i] += 1
            p = self._params[i]
            g = p.grad
            view = self._views[i]
            if g is None:
                view.fill(0)
                flags[k] = 0
                continue
            # a slice given out zeroed counts as a gradient once backward added into it
            flags[k] = 1 if self._used[i] or not self._given[i] else 0
            if not (views and _same_memory(g._data, view)):
                view[...] = g._data
                if views:
                    p.grad = Tensor(view)
        bucket.request = self._post(bucket, flat)
        self._next = bucket.index + 1

    def _post(self, bucket: _Bucket, flat: np.ndarray) -> Any:
        """Agree on the bucket's record, then start its sum (NOTE [ Buckets ])."""
        comm._agree(comm._BUCKET, self._step, bucket.index, len(self._buckets), flat.size,
                    comm._dtype_code(flat.dtype))
        w = comm._get()
        return w.comm.Iallreduce(w.mpi.IN_PLACE, flat, op=w.mpi.SUM)

    def _progress(self) -> None:
        if comm._settle():  # a payload is tested only once its record agreed
            pending = [b.request for b in self._buckets[: self._next] if b.request is not None]
            if pending:
                comm._get().mpi.Request.Testall(pending)

    def _finish(self) -> None:
        """NOTE [ Buckets ] step 2, at the end of the outermost backward."""
        while self._next < len(self._buckets):
            self._start(self._buckets[self._next])
        comm._wait([b.request for b in self._buckets], f"DistributedDataParallel step {self._step}")
        views = self.gradient_as_bucket_view
        divisor = self._divisor
        for bucket in self._buckets:
            flat, off = bucket.flat, bucket.offsets
            flags = flat[off[-1]:]
            if views:
                np.divide(flat[:off[-1]], divisor, out=flat[:off[-1]])
            for k, i in enumerate(bucket.params):
                p = self._params[i]
                if flags[k] == 0:  # no rank has a gradient
                    if self._given[i]:
                        p.grad = None  # the zeroed slice goes back
                    continue
                view = self._views[i]
                if views:
                    if p.grad is None or not _same_memory(p.grad._data, view):
                        p.grad = Tensor(view)  # another rank's gradient, this one had none
                    else:
                        p.grad._bump_version()
                    continue
                g = p.grad
                if g is None or g._requires_grad or g._data.shape != p._data.shape:
                    p.grad = Tensor(view / divisor)
                else:
                    np.divide(view, divisor, out=g._data)
                    g._bump_version()
        reductions = dict(zip(self._names, self._reductions))
        self.stats = DDPStats(len(self._buckets), self._during, reductions)
        self._given = [False] * len(self._params)
        self._used = [False] * len(self._params)
        if self._custom and self._learned is None:
            self._learned = list(self._counts)
        if not self._rebuilt:
            self._rebuild()
            self._rebuilt = True
        self._expecting = False

    # ------------------------------------------------------------------ NOTE [ Join ]
    def _join_step(self, having: int) -> int:
        """Agree on this step inside join(), ``having`` 1 if this rank has data in it; how
        many ranks have."""
        check = comm._agree(comm._JOIN, self._step, extra=having)
        comm._wait([], f"DistributedDataParallel.join() at step {self._step}")
        flags = check.records[:, comm._EXTRA]
        for r in np.flatnonzero(flags):
            self._last_active[r] = self._step
        return int(flags.sum())

    def _shadow(self) -> None:
        """This rank's data ended: take part, with zeros, in the others' steps until every
        rank's data ended; then every rank takes the weights of the one that had data last."""
        w = comm._get()
        scratch: dict[np.dtype, np.ndarray] = {}  # by dtype, as large as the largest bucket
        self._reset_step()
        while True:
            self._step += 1
            w.step = self._step
            if self._join_step(0) == 0:
                break
            for bucket in self._buckets:  # one at a time, through the scratch buffer
                n, dtype = bucket.flat.size, bucket.flat.dtype
                if dtype not in scratch or scratch[dtype].size < n:
                    scratch[dtype] = np.empty(n, dtype=dtype)
                zeros = scratch[dtype][:n]
                zeros.fill(0)
                comm._wait([self._post(bucket, zeros)],
                           f"DistributedDataParallel.join() at step {self._step}")
            if not self._rebuilt:
                self._rebuild()
                self._rebuilt = True
        self._step -= 1  # the step in which no rank had data did not happen
        w.step = self._step
        src = int(np.argmax(self._last_active))  # the first of those that had data last
        with no_grad():
            for t in [*self.module.parameters(), *self.module.buffers()]:
                comm.broadcast(_contiguous(t), src=src)

    def _rebuild(self) -> None:
        """NOTE [ Uses ]: rebuild the buckets in rank 0's order of final gradients (unused
        parameters last)."""
        order = list(self._final_order) + [
            i for i in reversed(range(len(self._params))) if i not in self._final_order
        ]
        order = comm.broadcast_object(order, src=0)
        self._build_buckets(order)
        if self.gradient_as_bucket_view:  # move the gradients into the new buckets
            for i, p in enumerate(self._params):
                if p.grad is not None:
                    view = self._views[i]
                    view[...] = p.grad._data
                    p.grad = Tensor(view)


def _tensors(value: Any) -> list[Tensor]:
    """The tensors in a module's output: a Tensor, or tuples, lists and dicts of them."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same bytes (a view of the other, whatever shape)."""
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.nbytes == b.nbytes
        and a.flags.c_contiguous
    )


def _describe(entry: Any) -> str:
    return "absent" if entry is None else f"shape {entry[0]} {entry[1]}"


def _contiguous(t: Tensor) -> Tensor:
    if not t._data.flags.c_contiguous:
        raise DistributedError(
            f"DistributedDataParallel: a parameter or buffer of shape {tuple(t.shape)} is not "
            "contiguous; make it contiguous in the model (t.data = t.contiguous()) before "
            "wrapping"
        )
    return t
