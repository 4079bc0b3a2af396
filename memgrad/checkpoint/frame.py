"""One non-reentrant checkpointed call: its forward, its placeholders, its recomputation
(NOTE [ Recompute rules ] in checkpoint.py)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from memgrad import interpreters
from memgrad.autograd.engine import current_backward
from memgrad.autograd.grad_mode import enable_grad, state
from memgrad.autograd.graph import saved_tensors_hooks, saved_tensors_hooks_with_op
from memgrad.autograd.saved import raise_modified, save
from memgrad.checkpoint.oplog import OpLog
from memgrad.checkpoint.selective import Chooser, extra_save_error
from memgrad.errors import CheckpointError
from memgrad.interpreters import Interpreter
from memgrad.random import get_rng_state, set_rng_state
from memgrad.tensor import Tensor, wrap

__all__ = ["Frame", "GraphExecGroup"]

_UNPACKED_TWICE = (
    "memgrad.checkpoint: Unpack is being triggered for a tensor that was already unpacked "
    "once. If you are calling ctx.saved_tensors in backward, make sure to do so only once. "
    "Otherwise please open an issue with details on your use case."
)
_OVERLAP = (
    "Performing two backward calls that overlap (i.e. require the same saved activation in "
    "order to compute gradients) is not allowed while under the GraphExecGroup context. "
)
_BACKWARD_AGAIN = (
    "memgrad.checkpoint: Trying to backward an extra time. You are only allowed to backward "
    "once on any region computed under selective activation checkpoint: the outputs its "
    "policy saved were used by the first backward. Fix: backward once, or use policy= "
    "(which runs the op again), or checkpoint without a policy."
)
_MUTATED = (
    "memgrad.checkpoint: Tensor cached during selective activation checkpoint has been "
    "mutated (the output of op {k} ({name}) was changed in place after the forward pass "
    "saved it). Fix: pass allow_cache_entry_mutation=True to "
    "create_selective_checkpoint_contexts (the op then runs again), or do not save that op."
)


class _Groups(threading.local):
    current: GraphExecGroup | None = None


_groups = _Groups()


class GraphExecGroup:
    """Context manager: the backward calls inside it share one recomputation per
    checkpointed region, as if they were one backward (for several ``autograd.grad``
    calls over disjoint parts of a region, e.g. ``grad(z, y)`` then ``grad(y, x)``). They
    must not need the same saved value twice; groups do not nest.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import GraphExecGroup, checkpoint
        >>> x = mg.randn(3, requires_grad=True)
        >>> y = checkpoint(lambda a: a.tanh().exp(), x)
        >>> with GraphExecGroup():
        ...     (g,) = mg.autograd.grad(y.sum(), x)
    """

    def __enter__(self) -> GraphExecGroup:
        if _groups.current is not None:
            raise RuntimeError(
                "memgrad.checkpoint: GraphExecGroup contexts cannot be nested. Already inside "
                f"group {_groups.current!r}; leave it first"
            )
        _groups.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        _groups.current = None


class _StopRecompute(Exception):
    """Raised inside the recomputation once every placeholder is rebuilt."""


class _Marker:
    """The ``op`` a frame's own saves (its tensor arguments) are made with."""

    name = "checkpoint"


_MARKER = _Marker()
_SUPPRESSED = object()  # the forward's result while it has none


class _Slot:
    """Where a tensor argument sat in ``args``/``kwargs``, when saved through the enclosing
    saved-tensor hooks (NOTE [ Recompute rules ] point 6)."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


class _Placeholder:
    """A saved tensor the region dropped: rebuilt by recomputation when backward needs it.
    ``vc`` and ``version`` are those of the forward tensor it stands for."""

    __slots__ = ("frame", "index", "vc", "version")
    recomputed = True  # what the saved-tensor report reads (NOTE [ Interpreters ])

    def __init__(self, frame: Frame, index: int, t: Tensor) -> None:
        self.frame = frame
        self.index = index
        self.vc = t._version_counter()
        self.version = self.vc.v


class _Kept:
    """A saved tensor the region kept as itself, with the version it was saved at."""

    __slots__ = ("t", "version", "op")

    def __init__(self, t: Tensor, op: str) -> None:
        self.t = t
        self.version = t._version
        self.op = op


def _unpack(packed: Any) -> Tensor:
    if isinstance(packed, _Placeholder):
        if packed.vc.v != packed.version:
            shape, dtype, op = packed.frame.metas[packed.index]
            raise_modified(op, shape, dtype, packed.vc.v, packed.version, "in a checkpoint")
        return packed.frame.rebuilt_tensor(packed.index)
    t = packed.t
    if t._version != packed.version:
        raise_modified(packed.op, t.shape, t.dtype, t._version, packed.version, "in a checkpoint")
    return t


def _alias(t: Tensor) -> Tensor:
    """A tensor on ``t``'s data and version counter with no graph: what a recomputation
    keeps, so that nothing it keeps refers back to the graph it made (point 7)."""
    a = wrap(t._data)
    a._vc = t._version_counter()
    return a


def _tensors(tree: Any) -> Iterator[Tensor]:
    """The tensors in nested lists, tuples and dicts."""
    if isinstance(tree, Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for x in tree:
            yield from _tensors(x)
    elif isinstance(tree, dict):
        for x in tree.values():
            yield from _tensors(x)


def _rebuild(tree: Any, items: list) -> Any:
    if isinstance(tree, list):
        return items
    return type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items)


def _template(tree: Any, found: list) -> Any:
    """``tree`` with each tensor replaced by a ``_Slot`` numbering it in ``found``."""
    if isinstance(tree, Tensor):
        found.append(tree)
        return _Slot(len(found) - 1)
    if isinstance(tree, (list, tuple)):
        return _rebuild(tree, [_template(x, found) for x in tree])
    if isinstance(tree, dict):
        return {k: _template(v, found) for k, v in tree.items()}
    return tree


def _fill(tree: Any, tensors: list) -> Any:
    """``tree`` with each ``_Slot`` replaced by its tensor."""
    if isinstance(tree, _Slot):
        return tensors[tree.i]
    if isinstance(tree, (list, tuple)):
        return _rebuild(tree, [_fill(x, tensors) for x in tree])
    if isinstance(tree, dict):
        return {k: _fill(v, tensors) for k, v in tree.items()}
    return tree


class Frame:
    """One non-reentrant checkpointed call (NOTE [ Recompute rules ])."""

    def __init__(
        self,
        function: Callable,
        args: tuple,
        kwargs: dict,
        *,
        preserve_rng_state: bool,
        determinism_check: str,
        debug: bool,
        early_stop: bool,
        chooser: Chooser | None,
        contexts: tuple[Any, Any],
    ) -> None:
        self.function = function
        self.rng = get_rng_state() if preserve_rng_state else None
        self.check = determinism_check == "default"
        self.early_stop = early_stop
        self.log = OpLog(self.check, debug)
        self.chooser = chooser
        self.contexts = contexts
        self.input_ids = {id(t) for t in _tensors((args, kwargs))}
        # point 6: under enclosing saved-tensor hooks (an outer checkpoint, an offload) the
        # tensor arguments are saved through them, and this frame keeps no reference
        self.nested = bool(state.saved_hooks)
        if self.nested:
            found: list[Tensor] = []
            self.call = _template((args, kwargs), found)
            self.saved_args = [save(t, False, _MARKER, i) for i, t in enumerate(found)]
            self.arg_versions = [(t._version_counter(), t._version) for t in found]
        else:
            self.call = (args, kwargs)
            self.saved_args = None
        self.metas: list[tuple] = []  # per save: (shape, dtype, op name)
        self.placeholders: set[int] = set()
        self.saves_of: dict[int, list[tuple[int, int]]] = {}  # op -> [(save, input index)]
        self.kept: dict[int, tuple[Tensor, int]] = {}  # op -> (output kept, version then)
        self.kept_ops: set[int] = set()
        self.kept_ids: set[int] = set()
        self.current_op: int | None = None
        self.current_keep = False
        self.forward_done = False
        self.recomputing = False
        self.rebuilt: dict[int, tuple[Tensor, int]] = {}  # save -> (tensor, version when rebuilt)
        self.task: Any = None  # weakref to the backward the rebuilt tensors are for
        self.handed: set[int] = set()  # saves handed out to that backward
        self.recomputations = 0
        self.recomputed_ops = 0  # ops run by the last recomputation

    @property
    def ops(self) -> list[str]:
        return self.log.ops

    # -- forward
    def forward(self, args: tuple, kwargs: dict) -> Any:
        with contextlib.ExitStack() as stack:
            if self.contexts[0] is not None:
                stack.enter_context(self.contexts[0])
            stack.enter_context(interpreters.region(self.function))
            stack.enter_context(saved_tensors_hooks_with_op(self._pack, _unpack))
            stack.enter_context(interpreters.push(_FrameForward(self)))
            out = _SUPPRESSED
            out = self.function(*args, **kwargs)
        if out is _SUPPRESSED:
            raise RuntimeError(
                "memgrad.checkpoint: the forward context provided by context_fn suppressed an "
                "exception raised during the checkpointed forward. This is not supported "
                "because checkpoint cannot return a value for a failed forward; let the "
                "context's __exit__ return None."
            )
        self.forward_done = True
        self.input_ids = set()
        self.log.forward_done()
        return out

    def forward_op(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Tensor:
        if self.recomputing or state.refreshing:
            # autograd.grad inside the function made this frame recompute, or a view read
            # from outside the region is given its base's graph (graph.refresh_view)
            return call_next(prim, args, params)
        k = self.log.forward_op(prim, args, params)
        keep = (self.chooser is not None and not prim.inplace
                and self.chooser.keep(prim, args, params, False, k))
        self.current_op = k
        self.current_keep = keep
        try:
            out = call_next(prim, args, params)  # enclosing interpreters see the op too
        finally:
            self.current_op = None
            self.current_keep = False
        self.log.forward_out(out)
        if keep:
            self.kept[k] = (out, out._version)
            self.kept_ops.add(k)
            self.kept_ids.add(id(out))
        return out

    def _pack(self, t: Tensor, op: Any, index: int) -> Any:
        j = len(self.metas)
        name = getattr(op, "name", type(op).__name__)
        self.metas.append((t.shape, t.dtype, name))
        if self.current_op is not None:
            self.saves_of.setdefault(self.current_op, []).append((j, index))
        keep = (
            (not self.nested and id(t) in self.input_ids)
            or id(t) in self.kept_ids
            or (t.grad_fn is None and t.requires_grad)
            or (index < 0 and self.current_keep)
        )
        if keep:
            return _Kept(t, name)  # alive anyway (an argument or a parameter) or kept
        self.placeholders.add(j)
        return _Placeholder(self, j, t)

    # -- backward
    def rebuilt_tensor(self, j: int) -> Tensor:
        group = _groups.current
        task = group if group is not None else current_backward()
        if task is None or self.task is None or self.task() is not task:
            self._recompute()
            self.task = None if task is None else weakref.ref(task)
            self.handed = set()
        entry = self.rebuilt.pop(j, None)
        if entry is None or j in self.handed:
            raise CheckpointError(_UNPACKED_TWICE.replace("If you are", _OVERLAP + "If you are")
                                  if group is not None else _UNPACKED_TWICE)
        self.handed.add(j)
        t, version = entry
        if t._version != version:
            shape, dtype, op = self.metas[j]
            raise CheckpointError(
                f"memgrad.checkpoint: the tensor of shape {shape} saved by {op} was changed in "
                f"place after the recomputation rebuilt it (version {version} -> "
                f"{t._version}), before backward used it; the recomputation did not end as "
                "the forward pass did. Make the checkpointed function free of in-place changes "
                "to the tensors it saves."
            )
        return t

    def _check_arguments(self) -> None:
        """The tensor arguments, saved through the enclosing hooks, are as the forward pass
        read them (NOTE [ Recompute rules ] point 5): else the recomputation would differ."""
        for i, (vc, version) in enumerate(self.arg_versions):
            if vc.v != version:
                raise CheckpointError(
                    f"memgrad.checkpoint: tensor argument {i} of the checkpointed function was "
                    f"changed in place after the forward pass (version {version} -> {vc.v}), "
                    "so recomputing would give other activations than the forward pass did. "
                    "Change it after backward, or pass the function a copy (.clone())."
                )

    def _recompute(self) -> None:
        run = _Recomputation(self)
        self.recomputations += 1
        if self.nested:
            self._check_arguments()
            args, kwargs = _fill(self.call, [
                s.unpack(None, "checkpoint") for s in self.saved_args  # type: ignore[union-attr]
            ])
        else:
            args, kwargs = self.call
        self.recomputing = True
        try:
            with contextlib.ExitStack() as stack:
                if self.rng is not None:
                    saved_rng = get_rng_state()
                    stack.callback(set_rng_state, saved_rng)
                    set_rng_state(self.rng)
                stack.enter_context(enable_grad())
                if self.contexts[1] is not None:
                    stack.enter_context(self.contexts[1])
                stack.enter_context(saved_tensors_hooks(run.pack, _unpack_recomputed))
                stack.enter_context(interpreters.push(run))
                try:
                    self.function(*args, **kwargs)
                except _StopRecompute:
                    pass
                else:
                    run.finished()
        finally:
            self.recomputing = False
        self.recomputed_ops = run.n_ops
        self.rebuilt = run.rebuilt


def _unpack_recomputed(packed: tuple[Tensor, int]) -> Tensor:
    """A tensor the recomputation saved, for a backward inside the recomputed function
    (``autograd.grad`` in it): checked as an eager saved tensor is."""
    t, version = packed
    if t._version != version:
        raise_modified("the recomputation", t.shape, t.dtype, t._version, version,
                       "in a checkpoint")
    return t


class _FrameForward(Interpreter):
    """A frame's forward: numbers the ops and logs what they read (NOTE [ Recompute rules ])."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        return self.frame.forward_op(prim, args, params, call_next)

    def written(self, prim: Any, args: tuple, params: dict) -> None:
        if not self.frame.recomputing:
            self.frame.log.forward_written(prim, args, params)


class _Recomputation(Interpreter):
    """The state of one recomputation of a frame."""

    phase = "recompute"

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.n_saves = 0
        self.n_ops = 0
        self.ops: list[str] = []
        self.rebuilt: dict[int, tuple[Tensor, int]] = {}
        self.n_writes = 0

    def written(self, prim: Any, args: tuple, params: dict) -> None:
        self.frame.log.check_write(self.n_writes, prim, args, params)
        self.n_writes += 1

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        if state.refreshing:  # a view's replay (graph.refresh_view): no op of the region
            return call_next(prim, args, params)
        frame = self.frame
        k = self.n_ops
        self.n_ops += 1
        self.ops.append(prim.name)
        if k < len(frame.log.ops):
            frame.log.check_reads(k, args)
            frame.log.check_params(k, params)
        chooser = frame.chooser
        if chooser is not None and chooser.asks_in_recompute and not prim.inplace:
            self._stop_before(k, args)
            keep = chooser.keep(prim, args, params, True, k)
            if keep and k not in frame.kept_ops:
                raise extra_save_error(prim.name, k)
        else:
            keep = k in frame.kept_ops
        if not keep:
            frame.kept.pop(k, None)
            return call_next(prim, args, params)
        entry = frame.kept.pop(k, None) if frame.forward_done else frame.kept.get(k)
        if entry is None:
            if chooser is not None and chooser.strict:
                raise CheckpointError(_BACKWARD_AGAIN)
            return call_next(prim, args, params)
        kept, version = entry
        if kept._version != version:
            # changed in place since (by the region itself, or by the caller): it no longer
            # holds this op's result
            if chooser is not None and chooser.strict:
                raise CheckpointError(_MUTATED.format(k=k, name=prim.name))
            return call_next(prim, args, params)
        # not run again: file the saves this op made in forward from its arguments
        for j, index in frame.saves_of.get(k, ()):
            if j in frame.placeholders:
                t = kept if index < 0 else args[index]
                self.rebuilt[j] = (_alias(t), t._version)
            self.n_saves += 1
        self._maybe_stop()
        return kept

    def _stop_before(self, k: int, args: tuple) -> None:
        """Stop before op ``k`` when what it would save is only its inputs and they are the
        last placeholders left: the policy is then not asked for it (its saves happen
        before it runs, as in PyTorch)."""
        frame = self.frame
        if not frame.early_stop or not frame.forward_done:
            return
        saves = frame.saves_of.get(k, ())
        missing = len(frame.placeholders) - len(self.rebuilt)
        needed = [(j, i) for j, i in saves if j in frame.placeholders and j not in self.rebuilt]
        if not needed or len(needed) != missing or any(i < 0 for _, i in needed):
            return
        for j, index in needed:
            self.rebuilt[j] = (_alias(args[index]), args[index]._version)
        raise _StopRecompute

    def pack(self, t: Tensor) -> tuple[Tensor, int]:
        frame = self.frame
        j = self.n_saves
        self.n_saves += 1
        packed = (_alias(t), t._version)
        if frame.check and frame.forward_done:
            if j >= len(frame.metas):
                raise frame.log.mismatch(
                    "trying to save more tensors during recomputation than during the "
                    f"original forward pass (which saved {len(frame.metas)})",
                    self.ops,
                )
            shape, dtype, op = frame.metas[j]
            if t.shape != shape or t.dtype != dtype:
                raise frame.log.mismatch(
                    "Recomputed values for the following tensors have different metadata "
                    f"than during the forward pass: saved tensor {j} (of {op}) has shape "
                    f"{t.shape} and dtype {t.dtype} in the recomputation but shape {shape} and "
                    f"dtype {dtype} in the forward",
                    self.ops,
                )
        if j in frame.placeholders:
            self.rebuilt[j] = packed
            self._maybe_stop()
        return packed

    def _maybe_stop(self) -> None:
        frame = self.frame
        if frame.early_stop and len(self.rebuilt) == len(frame.placeholders):
            raise _StopRecompute

    def finished(self) -> None:
        frame = self.frame
        if len(self.rebuilt) != len(frame.placeholders) or (
            frame.check and frame.forward_done and self.n_saves != len(frame.metas)
        ):
            raise frame.log.mismatch(
                "A different number of tensors was saved during the original forward and "
                f"recomputation: the recomputation saved {self.n_saves} tensors, the forward "
                f"pass saved {len(frame.metas)}",
                self.ops,
            )
