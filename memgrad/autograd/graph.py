"""The backward graph: Node, AccumulateGrad, hooks, and saved-tensor hooks.

A Node is the backward of one forward op. ``next_functions[i]`` is the edge ``(node,
input_nr)`` that receives the gradient of the op's i-th input: the producer's grad_fn and
the output number of that input, or a leaf's AccumulateGrad, or ``(None, 0)`` when the
input needs no gradient.

NOTE [ A node's inputs ]
A node keeps what it knows of its forward inputs in one flat tuple, ``_inputs``: three
entries an input, ``(child, output_nr, meta)``, where ``(child, output_nr)`` is the edge
``next_functions`` shows (``child`` None where no gradient flows) and ``meta`` is what the
engine checks the input's gradient against (a ``Meta``; for an op node's constant input
its value, for a custom Function's non-Tensor argument None). One tuple rather than a
tuple of edges, a pair for each edge and a tuple of metas: recording an op makes one
object instead of three or four, which the allocator and the collector see on every op
(``benchmarks/overhead.py --lead 1``, tensor operands: the forward 1.69-1.73 us an op
against 1.83-1.88). ``next_functions`` is made from it when read; the engine walks it by
index, ``_inputs[3 * i]`` the child of input ``i``.
"""

from __future__ import annotations

import itertools
import operator
import os
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import state
from memgrad.tensor import RemovableHandle, RetainGrad, Tensor, wrap

__all__ = [
    "Node",
    "Meta",
    "AccumulateGrad",
    "RemovableHandle",
    "saved_tensors_hooks",
    "disable_saved_tensors_hooks",
    "saved_tensors_hooks_with_op",
    "accumulator",
    "RetainGrad",
    "refresh_view",
    "sequence_mark",
    "raise_modified",
    "save_on_cpu",
    "save_on_disk",
]

_RELEASED_MSG = (
    "Trying to backward through the graph a second time (or to read saved tensors after "
    "they were freed). Saved intermediate values are freed when you call .backward() or "
    "autograd.grad(); pass retain_graph=True to the first call if you need to backward "
    "through the graph again."
)


class Meta(tuple):
    """``(shape, dtype)`` of a forward input: what the engine checks that input's gradient
    against, and what a VJP sees of an input its op did not save. Make one with
    ``Meta((shape, dtype))``."""

    __slots__ = ()
    shape = property(operator.itemgetter(0))
    dtype = property(operator.itemgetter(1))

    @property
    def ndim(self) -> int:
        return len(self[0])


class _NodeHooks:
    """A node's hooks, made on the first registration (most nodes have none)."""

    __slots__ = ("pre", "post", "tensor")

    def __init__(self) -> None:
        self.pre: list = []
        self.post: list = []
        # output_nr -> (user hooks, retain_grad hooks); retain_grad sees the final gradient
        self.tensor: dict[int, tuple[list, list]] = {}


class Node:
    """The backward of one forward op (the type of ``Tensor.grad_fn``).

    Subclasses implement ``apply(grads)``: one gradient per forward output in, one per
    ``next_functions`` entry out (None where no gradient flows).
    """

    # _inputs: (child, output_nr, meta) for each forward input, flat (NOTE [ A node's inputs ])
    __slots__ = ("_inputs", "_sequence_nr", "_hooks", "_trace", "__weakref__")
    num_outputs = 1
    # whether a gradient of a broadcast shape is summed back to its input's shape
    broadcasts = False
    # inputs whose gradient apply() can add into an existing .grad (NOTE [ Accumulate in
    # place ] in engine.py)
    sink_inputs: tuple[int, ...] = ()

    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self) -> tuple[tuple[Node | None, int], ...]:
        """The edge ``(node, output_nr)`` of each forward input: the node its gradient goes
        to (None where no gradient flows) and which of that node's outputs the input was."""
        links = self._inputs
        return tuple(zip(links[0::3], links[1::3]))

    def __repr__(self) -> str:
        return f"<{self.name()} #{self._sequence_nr}>"

    def apply(self, grads: tuple) -> tuple:
        raise NotImplementedError

    def release(self) -> None:
        """Free what this node saved for backward."""

    def _hook_lists(self) -> _NodeHooks:
        if self._hooks is None:
            self._hooks = _NodeHooks()
        return self._hooks

    @property
    def metadata(self) -> dict:
        """A dict for the user's notes about this node (PyTorch's ``Node.metadata``), made on
        first use and freed with the node."""
        return _METADATA.setdefault(self, {})

    def register_hook(self, fn: Callable) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs)`` runs after this node; a non-None return value
        replaces ``grad_inputs``."""
        hooks = self._hook_lists().post
        hooks.append(fn)
        return RemovableHandle(hooks, fn)

    def register_prehook(self, fn: Callable) -> RemovableHandle:
        """``fn(grad_outputs)`` runs before this node; a non-None return value replaces
        ``grad_outputs``."""
        hooks = self._hook_lists().pre
        hooks.append(fn)
        return RemovableHandle(hooks, fn)

    def _add_tensor_hook(self, output_nr: int, fn: Callable, last: bool = False) -> RemovableHandle:
        table = self._hook_lists().tensor
        hooks, retain = table.setdefault(output_nr, ([], []))
        target = retain if last else hooks
        target.append(fn)
        return RemovableHandle(target, fn)


# Node.metadata, outside the nodes (most never have one)
_METADATA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _init_node(node: Node, inputs: tuple) -> None:
    node._inputs = inputs  # NOTE [ A node's inputs ]
    node._sequence_nr = next(_seq)
    node._hooks = None
    node._trace = _anomaly_trace() if state.anomaly else None


def _anomaly_trace() -> str:
    from memgrad.autograd.anomaly import forward_trace

    return forward_trace()


# One counter for all threads: increasing within each thread too, and `next` on it is
# atomic under the GIL.
_seq = itertools.count()


def sequence_mark() -> int:
    """A ``_sequence_nr`` below that of every node made after this call."""
    return next(_seq)


class AccumulateGrad(Node):
    """The sink of a leaf that requires grad: the engine adds the gradients that reach it
    into the leaf's ``.grad``.

    ``lock`` makes each update of the leaf's ``.grad`` atomic: backward passes running in
    several threads may reach the same leaf (NOTE [ Engine ] point 8).
    """

    __slots__ = ("variable", "lock")

    def __init__(self, variable: Any) -> None:
        _init_node(self, ())
        # accumulators run as soon as they are ready (PyTorch gives them the largest number)
        self._sequence_nr = sys.maxsize
        self.variable = variable
        self.lock = threading.Lock()


_ACCUMULATOR_LOCK = threading.Lock()


def accumulator(t: Any) -> AccumulateGrad:
    """The one AccumulateGrad of leaf ``t``, shared by all its uses (in every thread) while a
    graph holds it."""
    ref = t._acc
    acc = ref() if ref is not None else None
    if acc is None:
        with _ACCUMULATOR_LOCK:  # two threads must not give one leaf two accumulators
            ref = t._acc
            acc = ref() if ref is not None else None
            if acc is None:
                acc = AccumulateGrad(t)
                t._acc = weakref.ref(acc)
    return acc


def refresh_view(t: Any) -> None:
    """Give view ``t`` its base's current graph (NOTE [ Views and in-place ops ] in
    ops/inplace.py): its view ops are replayed on the base in grad mode (new nodes, the same
    data), which no checkpoint region counts (``state.refreshing``: one pass may not)."""
    r = t._base
    prev, refreshing = state.grad_enabled, state.refreshing
    state.grad_enabled = state.refreshing = True
    try:
        for prim, params in t._view_fn:
            r = prim(r, **params)
    finally:
        state.grad_enabled, state.refreshing = prev, refreshing
    t.grad_fn = r.grad_fn
    t.output_nr = r.output_nr
    t._requires_grad = r._requires_grad
    t._view_gen = t._vc.gen


class saved_tensors_hooks:
    """Context manager: every tensor saved for backward inside it is stored as
    ``pack(tensor)`` and restored by ``unpack(packed)`` when backward needs it. Per thread;
    the innermost pair applies.

    Example:
        >>> import memgrad as mg
        >>> packed = []
        >>> def pack(t):
        ...     packed.append(t.shape)
        ...     return t
        >>> x = mg.ones(3, requires_grad=True)
        >>> with mg.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ...     y = x.exp()
        >>> packed
        [(3,)]
    """

    # whether pack_hook also takes the saving op and which of its inputs it saves
    # (pack(t, op, index), index -1 for the op's output): for memgrad's own hooks
    with_op = False

    def __init__(self, pack_hook: Callable[..., Any], unpack_hook: Callable[[Any], Any]) -> None:
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> saved_tensors_hooks:
        if state.hooks_disabled is not None:
            raise RuntimeError(state.hooks_disabled)
        state.saved_hooks = state.saved_hooks + (
            (self.pack_hook, self.unpack_hook, self.with_op),
        )
        state.plain = False
        return self

    def __exit__(self, *exc: object) -> None:
        state.saved_hooks = state.saved_hooks[:-1]
        state.plain = not state.saved_hooks and not state.anomaly


class disable_saved_tensors_hooks:
    """Context manager: inside it, entering any ``saved_tensors_hooks`` (and so a
    non-reentrant checkpoint or ``save_on_cpu``) raises ``RuntimeError(error_message)``,
    for code that does not work with them. Per thread; hooks entered before stay active.

    Example:
        >>> import memgrad as mg
        >>> graph = mg.autograd.graph
        >>> with graph.disable_saved_tensors_hooks("no hooks here"):
        ...     try:
        ...         graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()
        ...     except RuntimeError as e:
        ...         print(e)
        no hooks here
    """

    def __init__(self, error_message: str) -> None:
        self.error_message = str(error_message)

    def __enter__(self) -> None:
        self._prev = state.hooks_disabled
        state.hooks_disabled = self.error_message

    def __exit__(self, *exc: object) -> None:
        state.hooks_disabled = self._prev


class saved_tensors_hooks_with_op(saved_tensors_hooks):
    """``saved_tensors_hooks`` whose pack hook is called as ``pack(t, op, index)``: the
    primitive (or None for a custom Function) that saves ``t``, and which of its inputs ``t``
    is (-1 for its output). Checkpointing uses it."""

    with_op = True


def raise_modified(op: str, shape: tuple, dtype: Any, now: int, saved: int, source: str) -> None:
    """Raise the error of a saved tensor changed in place since it was saved (PyTorch's
    words first, so that code matching them keeps working)."""
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: the {dtype} tensor of shape {tuple(shape)} saved by "
        f"{op} ({source}) is at version {now}; expected version {saved} instead. Fix: do "
        "the in-place change after backward, or use its out-of-place form (or .clone() "
        "the tensor before changing it)."
    )


class save_on_cpu(saved_tensors_hooks):
    """Context manager: keep the tensors saved for backward in host memory, as PyTorch's
    ``save_on_cpu`` does. memgrad's tensors always live in host memory, so they are kept
    as they are (with the usual version check); code written for PyTorch runs unchanged.
    ``pin_memory`` and ``device_type`` are accepted and have no effect. To move saved tensors
    out of memory, use :class:`save_on_disk`.

    Example:
        >>> import memgrad as mg
        >>> x = mg.ones(3, requires_grad=True)
        >>> with mg.autograd.graph.save_on_cpu():
        ...     y = (x * x).sum()
        >>> y.backward()
        >>> x.grad
        tensor([2., 2., 2.])
    """

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        super().__init__(_pack_as_is, _unpack_as_is)


def _pack_as_is(t: Tensor) -> tuple[Tensor, int]:
    return t, t._version


def _unpack_as_is(packed: tuple[Tensor, int]) -> Tensor:
    t, version = packed
    if t._version != version:
        raise_modified("an op", t.shape, t.dtype, t._version, version, "saved under save_on_cpu")
    return t


class _SpillDir:
    """The directory of one ``save_on_disk``; removed when nothing refers to it any more
    (the context and every tensor saved in it)."""

    def __init__(self, directory: str | os.PathLike | None) -> None:
        if directory is None:
            self.path = tempfile.mkdtemp(prefix="memgrad-saved-")
            weakref.finalize(self, shutil.rmtree, self.path, True)
        else:
            self.path = os.fspath(directory)
            if not os.path.isdir(self.path):
                raise FileNotFoundError(
                    f"save_on_disk: directory {self.path!r} does not exist; create it, or pass "
                    "directory=None for a temporary one"
                )
        self.count = itertools.count()


class _Spilled:
    """A saved tensor written to a file: its path, dtype, shape and version counter."""

    __slots__ = ("where", "path", "vc", "version", "__weakref__")

    def __init__(self, where: _SpillDir, t: Tensor) -> None:
        self.where = where  # keeps the directory while this file is in it
        self.path = os.path.join(where.path, f"{os.getpid()}-{next(where.count)}.npy")
        np.save(self.path, t._data, allow_pickle=False)
        weakref.finalize(self, _remove, self.path)
        self.vc = t._version_counter()
        self.version = self.vc.v


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class save_on_disk(saved_tensors_hooks):
    """Context manager: every tensor saved for backward inside it of at least ``min_bytes``
    is written to a file in ``directory`` (a new temporary directory when None) and read
    back, memory-mapped, when backward needs it; the file is removed as soon as the graph
    that saved it is freed. The forward tensors are then free to go, so the saved
    activations leave memory until backward. Smaller tensors, and parameters (leaves that
    require grad, in memory anyway), are kept as they are. ``directory`` names the
    directory in use. Saved
    tensors keep their version check: one changed in place since raises autograd's error.
    Inside a checkpointed region it applies to what the region keeps; around one, to the
    region's inputs (a checkpoint saves them through the enclosing hooks).

    Example:
        >>> import memgrad as mg
        >>> w = mg.randn(64, 64, requires_grad=True)
        >>> with mg.autograd.graph.save_on_disk(min_bytes=1024):
        ...     loss = (mg.randn(32, 64) @ w).tanh().sum()
        >>> loss.backward()
        >>> w.grad.shape
        (64, 64)
    """

    def __init__(
        self, directory: str | os.PathLike | None = None, min_bytes: int = 1 << 20
    ) -> None:
        if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 0:
            raise ValueError(
                f"save_on_disk: min_bytes must be an int >= 0, got {min_bytes!r}"
            )
        where = _SpillDir(directory)
        self.directory = where.path

        def pack(t: Tensor) -> Any:
            if t._data.nbytes < min_bytes or (t.grad_fn is None and t._requires_grad):
                return _pack_as_is(t)
            return _Spilled(where, t)

        super().__init__(pack, _unpack_spilled)


def _unpack_spilled(packed: Any) -> Tensor:
    if not isinstance(packed, _Spilled):
        return _unpack_as_is(packed)
    if packed.vc.v != packed.version:
        data = np.load(packed.path, mmap_mode="r")
        raise_modified("an op", data.shape, data.dtype, packed.vc.v, packed.version,
                       "saved under save_on_disk")
    t = wrap(np.load(packed.path, mmap_mode="c", allow_pickle=False))
    t._vc = packed.vc
    return t
