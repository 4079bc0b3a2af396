"""``checkpoint``: run a function without keeping its activations, recompute them in backward.

NOTE [ Recompute rules ]
Non-reentrant (the default) is built on saved-tensor hooks and an op hook:
1. Forward runs the function in grad mode. Every tensor an op saves for backward is packed
   as a placeholder numbered in save order; only the function's tensor arguments, leaves
   (parameters) and outputs the policy keeps are stored as themselves. The op hook numbers
   ops in call order and remembers which saves each op made.
2. The first unpack of a placeholder recomputes: the function runs again on the same
   arguments in grad mode, with the forward's RNG state, under hooks that store each saved
   tensor under its number. An op whose output the policy kept is not run again: the hook
   returns the kept output and files the saves it made in forward from its arguments (unless
   the kept output was changed in place since: then the op runs again). As
   soon as every placeholder is rebuilt the recomputation stops (the rest of the function
   does not run).
3. Each unpack hands out its rebuilt tensor once (a second backward recomputes again), and
   the saved-tensor machinery reconnects it to the forward graph, so double backward works.
4. The determinism check compares the count, shape and dtype of what the recomputation saved
   with what the forward saved.
5. Checkpointed code raises wherever eager code raises, and never gives a gradient eager
   code would not. Every value backward reads is version-checked, as an eager saved tensor
   is: a tensor kept as itself (an argument, a parameter, an output the policy keeps) must
   be at the version it was saved at, and so must the forward tensor a placeholder stands
   for (both raise eager's "modified by an inplace operation" error); a rebuilt tensor is
   handed out only if nothing changed it since it was rebuilt. The recomputation reads what
   the forward read: each op it runs again checks that the tensors it takes from outside the
   region (arguments, closures, parameters, buffers) are at the versions they had in the
   forward, and the index arrays among its params (``x[idx]``) hold what they held then,
   else a CheckpointError (the one place where
   checkpointed code raises and eager code may not: eager code had already used the value).
Reentrant (``use_reentrant=True``) is the original design: a Function whose forward runs the
function under no-grad keeping only its inputs, and whose backward recomputes and runs an
inner backward through the recomputed graph. Its forward logs every op (name, output shape
and dtype, the versions of what it read from outside), and the recomputation is checked
against that log op by op (points 4 and 5).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from memgrad import interpreters
from memgrad.autograd.engine import backward_recomputed, current_backward
from memgrad.autograd.function import Function
from memgrad.autograd.grad_mode import enable_grad, state
from memgrad.autograd.graph import (
    refresh_view,
    saved_tensors_hooks,
    saved_tensors_hooks_with_op,
    sequence_mark,
)
from memgrad.autograd.saved import raise_modified
from memgrad.errors import CheckpointError
from memgrad.interpreters import Interpreter
from memgrad.random import get_rng_state, set_rng_state
from memgrad.tensor import Tensor

__all__ = ["checkpoint", "is_recomputing"]


def is_recomputing() -> bool:
    """Whether this thread is inside a checkpoint's recomputation. Layers with running state
    read it so that the recomputation does not update that state a second time.

    Example:
        >>> from memgrad.checkpoint import is_recomputing
        >>> is_recomputing()
        False
    """
    return interpreters.phase() == "recompute"


def checkpoint(
    function: Callable[..., Any],
    *args: Any,
    use_reentrant: bool = False,
    preserve_rng_state: bool = True,
    determinism_check: str = "default",
    debug: bool = False,
    policy: Callable[[Any], bool] | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``function(*args, **kwargs)`` without keeping its activations; backward
    recomputes them in grad mode. Outputs and gradients are those of calling ``function``
    directly, dropout included (the RNG state is replayed).

    Args:
        function: the region to checkpoint (a module or any callable).
        use_reentrant: False (default) uses saved-tensor hooks and works with kwargs,
            nested inputs, ``autograd.grad``, nesting and double backward; True is the
            original autograd-Function design (no kwargs; ``backward()`` only).
        preserve_rng_state: replay the global generator so random ops draw the same.
        determinism_check: ``"default"`` checks that the recomputation saves tensors of the
            same count, shapes and dtypes as the forward; ``"none"`` skips it.
        debug: add both runs' op sequences to a determinism error.
        policy: a predicate over op records choosing outputs to keep instead of recompute
            (``memgrad.checkpoint.policy``); non-reentrant only.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import checkpoint
        >>> w = mg.randn(4, 4, requires_grad=True)
        >>> x = mg.randn(2, 4)
        >>> y = checkpoint(lambda h: (h @ w).tanh() @ w, x)
        >>> y.sum().backward()
        >>> w.grad.shape
        (4, 4)
    """
    if determinism_check not in ("default", "none"):
        raise ValueError(
            f'checkpoint: determinism_check must be "default" or "none", got '
            f"{determinism_check!r}"
        )
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if not state.grad_enabled:
        return function(*args, **kwargs)
    if use_reentrant:
        if kwargs:
            raise ValueError(
                "checkpoint(use_reentrant=True) does not take keyword arguments for the "
                f"function (got {sorted(kwargs)}); pass them positionally, or use "
                "use_reentrant=False"
            )
        if policy is not None:
            raise ValueError(
                "checkpoint: policy needs use_reentrant=False (the reentrant variant "
                "recomputes the whole function)"
            )
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn(
                "checkpoint(use_reentrant=True): none of the inputs requires grad, so the "
                "gradients of the checkpointed parameters will be None; make an input "
                "require grad or use use_reentrant=False",
                stacklevel=2,
            )
        log = _OpLog(determinism_check == "default", debug)
        return _Reentrant.apply(function, preserve_rng_state, log, *args)
    frame = _Frame(function, args, kwargs, preserve_rng_state, determinism_check, debug, policy)
    return frame.forward()


# ---------------------------------------------------------------------------- non-reentrant


class _StopRecompute(Exception):
    """Raised inside the recomputation once every placeholder is rebuilt."""


class _Placeholder:
    """A saved tensor the region dropped: rebuilt by recomputation when backward needs it.
    ``vc`` and ``version`` are those of the forward tensor it stands for."""

    __slots__ = ("frame", "index", "vc", "version")
    recomputed = True  # what the saved-tensor report reads (NOTE [ Interpreters ])

    def __init__(self, frame: _Frame, index: int, t: Tensor) -> None:
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


class _OpLog:
    """The ops a region ran in forward, for its recomputation to be checked against (NOTE
    [ Recompute rules ] points 4 and 5): each op's name and output type, and for each tensor
    it read from outside the region its version counter and version then."""

    def __init__(self, check_types: bool, debug: bool) -> None:
        self.check_types = check_types
        self.debug = debug
        self.ops: list[str] = []
        self.outputs: list[tuple] = []  # per op: (shape, dtype) of its output
        self.reads: dict[int, list[tuple]] = {}  # op -> [(argument position, vc, version)]
        self.params: dict[int, dict] = {}  # op -> its params, for ops with index arrays
        self._made: set[int] = set()  # ids of the outputs of the region's ops

    def forward_op(self, prim: Any, args: tuple, params: dict) -> int:
        """Log the reads of the op about to run; returns its number."""
        k = len(self.ops)
        self.ops.append(prim.name)
        if prim.array_params:
            self.params[k] = prim.own_params(params)
        made = self._made
        reads = None
        for pos, a in enumerate(args):
            if isinstance(a, Tensor) and id(a) not in made:
                vc = a._version_counter()
                if reads is None:
                    reads = self.reads[k] = []
                reads.append((pos, vc, vc.v))
        return k

    def forward_out(self, out: Tensor) -> None:
        self._made.add(id(out))
        self.outputs.append((out.shape, out.dtype))

    def check_params(self, k: int, params: dict) -> None:
        """Before op ``k`` of a recomputation: its index arrays (``x[idx]`` with an index
        tensor) hold what they held in the forward pass."""
        logged = self.params.get(k)
        if logged is not None and not _same_arrays(logged, params):
            raise CheckpointError(
                f"memgrad.checkpoint: op {k} ({self.ops[k]}) of the checkpointed function "
                "indexes with an index tensor that was changed in place since the forward "
                "pass, so recomputing would give other activations than the forward pass did. "
                "Change it after backward, or index with a copy (.clone())."
            )

    def check_reads(self, k: int, args: tuple) -> None:
        """Before op ``k`` of a recomputation: what it reads from outside is as it was."""
        for pos, vc, version in self.reads.get(k, ()):
            a = args[pos] if pos < len(args) else None
            if isinstance(a, Tensor) and a._vc is vc and vc.v != version:
                raise CheckpointError(
                    f"memgrad.checkpoint: op {k} ({self.ops[k]}) of the checkpointed function "
                    f"reads a tensor of shape {a.shape} that was changed in place since the "
                    f"forward pass (version {version} -> {vc.v}), so recomputing would give "
                    "other activations than the forward pass did. Change it after backward, "
                    "or pass the function a copy (.clone())."
                )

    def mismatch(self, what: str, run_ops: list[str]) -> CheckpointError:
        text = (
            f"memgrad.checkpoint: {what}. The checkpointed function must compute the same "
            "ops on tensors of the same shapes when it is recomputed (no data-dependent "
            "control flow on values that change, no state changed between the two runs)."
        )
        if self.debug:
            text += f"\nforward ops:    {self.ops}\nrecompute ops:  {run_ops}"
        else:
            text += " Pass debug=True to see the op sequences of both runs."
        return CheckpointError(text)


def _same_arrays(a: Any, b: Any) -> bool:
    """Whether the arrays in params ``a`` and ``b`` are equal, where both have one at the
    same place (other differences are the determinism check's business)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape != b.shape or np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_same_arrays(a[key], b[key]) for key in a.keys() & b.keys())
    if isinstance(a, tuple) and isinstance(b, tuple):
        return all(_same_arrays(x, y) for x, y in zip(a, b))
    return True


class _Frame:
    """One non-reentrant checkpointed call (NOTE [ Recompute rules ])."""

    def __init__(
        self,
        function: Callable,
        args: tuple,
        kwargs: dict,
        preserve_rng_state: bool,
        determinism_check: str,
        debug: bool,
        policy: Callable | None,
    ) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.rng = get_rng_state() if preserve_rng_state else None
        self.check = determinism_check == "default"
        self.log = _OpLog(self.check, debug)
        self.policy = policy
        self.input_ids = {id(t) for t in _tensors((args, kwargs))}
        self.metas: list[tuple] = []  # per save: (shape, dtype, op name)
        self.placeholders: set[int] = set()
        self.saves_of: dict[int, list[tuple[int, int]]] = {}  # op -> [(save, input index)]
        self.kept: dict[int, tuple[Tensor, int]] = {}  # op -> (output kept by the policy, version)
        self.kept_ids: set[int] = set()
        self.current_op: int | None = None
        self.rebuilt: dict[int, tuple[Tensor, int]] = {}  # save -> (tensor, version when rebuilt)
        self.recomputations = 0
        self.recomputed_ops = 0  # ops run by the last recomputation

    @property
    def ops(self) -> list[str]:
        return self.log.ops

    # -- forward
    def forward(self) -> Any:
        with interpreters.region(self.function), saved_tensors_hooks_with_op(
            self._pack, _unpack
        ), interpreters.push(_FrameForward(self)):
            return self.function(*self.args, **self.kwargs)

    def forward_op(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Tensor:
        k = self.log.forward_op(prim, args, params)
        self.current_op = k
        try:
            out = call_next(prim, args, params)  # enclosing interpreters see the op too
        finally:
            self.current_op = None
        self.log.forward_out(out)
        if self.policy is not None and self.policy(prim):
            self.kept[k] = (out, out._version)
            self.kept_ids.add(id(out))
        return out

    def _pack(self, t: Tensor, op: Any, index: int) -> Any:
        j = len(self.metas)
        name = getattr(op, "name", type(op).__name__)
        self.metas.append((t.shape, t.dtype, name))
        if self.current_op is not None:
            self.saves_of.setdefault(self.current_op, []).append((j, index))
        keep = (
            id(t) in self.input_ids
            or id(t) in self.kept_ids
            or (t.grad_fn is None and t.requires_grad)
            or (index < 0 and self.policy is not None and op is not None and self.policy(op))
        )
        if keep:
            return _Kept(t, name)  # alive anyway (an argument or a parameter) or kept by policy
        self.placeholders.add(j)
        return _Placeholder(self, j, t)

    # -- backward
    def rebuilt_tensor(self, j: int) -> Tensor:
        entry = self.rebuilt.pop(j, None)
        if entry is None:
            self._recompute()
            entry = self.rebuilt.pop(j)
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

    def _recompute(self) -> None:
        run = _Recomputation(self)
        self.recomputations += 1
        with contextlib.ExitStack() as stack:
            if self.rng is not None:
                saved_rng = get_rng_state()
                stack.callback(set_rng_state, saved_rng)
                set_rng_state(self.rng)
            stack.enter_context(enable_grad())
            stack.enter_context(saved_tensors_hooks(run.pack, _no_unpack))
            stack.enter_context(interpreters.push(run))
            try:
                self.function(*self.args, **self.kwargs)
            except _StopRecompute:
                pass
            else:
                run.finished()
        self.recomputed_ops = run.n_ops
        self.rebuilt = run.rebuilt


def _no_unpack(packed: Any) -> Tensor:
    raise RuntimeError("memgrad.checkpoint: the recomputed graph is not differentiated")


class _FrameForward(Interpreter):
    """A frame's forward: numbers the ops and logs what they read (NOTE [ Recompute rules ])."""

    def __init__(self, frame: _Frame) -> None:
        self.frame = frame

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        return self.frame.forward_op(prim, args, params, call_next)


class _Recomputation(Interpreter):
    """The state of one recomputation of a frame."""

    phase = "recompute"

    def __init__(self, frame: _Frame) -> None:
        self.frame = frame
        self.n_saves = 0
        self.n_ops = 0
        self.ops: list[str] = []
        self.rebuilt: dict[int, tuple[Tensor, int]] = {}

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        frame = self.frame
        k = self.n_ops
        self.n_ops += 1
        self.ops.append(prim.name)
        if k < len(frame.log.ops):
            frame.log.check_reads(k, args)
            frame.log.check_params(k, params)
        entry = frame.kept.get(k)
        # a kept output changed in place since (by the region itself, or by the caller) no
        # longer holds this op's result: the op runs again instead
        if entry is not None and entry[0]._version == entry[1]:
            kept = entry[0]
            # not run again: file the saves this op made in forward from its arguments
            for j, index in frame.saves_of.get(k, ()):
                if j in frame.placeholders:
                    t = kept if index < 0 else args[index]
                    self.rebuilt[j] = (t, t._version)
                self.n_saves += 1
            self._maybe_stop()
            return kept
        return call_next(prim, args, params)

    def pack(self, t: Tensor) -> None:
        frame = self.frame
        j = self.n_saves
        self.n_saves += 1
        if frame.check:
            if j >= len(frame.metas):
                raise frame.log.mismatch(
                    f"the recomputation saved more tensors than the {len(frame.metas)} the "
                    "forward pass saved",
                    self.ops,
                )
            shape, dtype, op = frame.metas[j]
            if t.shape != shape or t.dtype != dtype:
                raise frame.log.mismatch(
                    f"saved tensor {j} (of {op}) has shape {t.shape} and dtype {t.dtype} in "
                    f"the recomputation but shape {shape} and dtype {dtype} in the forward",
                    self.ops,
                )
        if j in frame.placeholders:
            self.rebuilt[j] = (t, t._version)
            self._maybe_stop()

    def _maybe_stop(self) -> None:
        if len(self.rebuilt) == len(self.frame.placeholders):
            raise _StopRecompute

    def finished(self) -> None:
        frame = self.frame
        if len(self.rebuilt) != len(frame.placeholders) or (
            frame.check and self.n_saves != len(frame.metas)
        ):
            raise frame.log.mismatch(
                f"the recomputation saved {self.n_saves} tensors, the forward pass saved "
                f"{len(frame.metas)}",
                self.ops,
            )


# ---------------------------------------------------------------------------- reentrant


class _ReentrantRun(Interpreter):
    """A reentrant region's interpreter: logs the forward, checks the recomputation."""

    def __init__(self, log: _OpLog, recompute: bool) -> None:
        self.log = log
        self.recompute = recompute
        self.phase = "recompute" if recompute else None
        self.ops: list[str] = []

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        if prim.inplace:  # recorded only in grad mode: the forward, under no-grad, had none
            return call_next(prim, args, params)
        log = self.log
        k = len(self.ops)
        if self.recompute:
            self.ops.append(prim.name)
            if log.check_types and (k >= len(log.ops) or prim.name != log.ops[k]):
                theirs = f"op {k} is {log.ops[k]}" if k < len(log.ops) else "it ran no more ops"
                raise log.mismatch(
                    f"op {k} of the recomputation is {prim.name}, but in the forward pass "
                    f"{theirs}",
                    self.ops,
                )
            if k < len(log.ops):
                log.check_reads(k, args)
                log.check_params(k, params)
        else:
            log.forward_op(prim, args, params)
        out = call_next(prim, args, params)
        if not self.recompute:
            log.forward_out(out)
        elif log.check_types:
            if (out.shape, out.dtype) != log.outputs[k]:
                shape, dtype = log.outputs[k]
                raise log.mismatch(
                    f"op {k} ({prim.name}) has an output of shape {out.shape} and dtype "
                    f"{out.dtype} in the recomputation but shape {shape} and dtype {dtype} in "
                    "the forward pass",
                    self.ops,
                )
        return out

    def finished(self) -> None:
        if self.log.check_types and len(self.ops) != len(self.log.ops):
            raise self.log.mismatch(
                f"the recomputation ran {len(self.ops)} ops, the forward pass ran "
                f"{len(self.log.ops)}",
                self.ops,
            )


def _carry_changes(out: Tensor, before: tuple) -> None:
    """Give recomputed output ``out`` the in-place changes its forward twin got after the
    forward (NOTE [ Recompute rules ] point 5): its version counter moves on by as many, so
    that a node of the recomputed graph that saved it raises eager's error when it runs, as
    the same node of an eager graph would, and no other node does."""
    vc, version = before
    if vc.v != version:
        out._version_counter().v += vc.v - version


class _Reentrant(Function):
    """The original design: recompute and backpropagate inside this node's backward."""

    @staticmethod
    def forward(ctx: Any, function: Callable, preserve_rng_state: bool, log: _OpLog,
                *args: Any) -> Any:
        ctx.function = function
        ctx.rng = get_rng_state() if preserve_rng_state else None
        ctx.log = log
        ctx.layout = [isinstance(a, Tensor) for a in args]
        ctx.constants = [None if isinstance(a, Tensor) else a for a in args]
        tensors = [a for a in args if isinstance(a, Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.arg_versions = [(t._version_counter(), t._version) for t in tensors]
        ctx.set_materialize_grads(False)  # outputs the loss does not reach are not differentiated
        with interpreters.push(_ReentrantRun(log, recompute=False)):
            out = function(*args)
        ctx.out_versions = [
            (t._version_counter(), t._version) if isinstance(t, Tensor) else None
            for t in (out if isinstance(out, tuple) else (out,))
        ]
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        running = current_backward()
        if running is None or not running.into_leaves:
            raise CheckpointError(
                "memgrad.checkpoint(use_reentrant=True) works with .backward() only: its "
                "backward runs an inner backward that accumulates into .grad, which "
                "autograd.grad() and backward(inputs=...) must not touch. Use "
                "use_reentrant=False."
            )
        for i, (vc, version) in enumerate(ctx.arg_versions):
            if vc.v != version:
                raise CheckpointError(
                    f"memgrad.checkpoint: tensor argument {i} of the checkpointed function was "
                    f"changed in place after the forward pass (version {version} -> {vc.v}), "
                    "so recomputing would give other activations than the forward pass did. "
                    "Change it after backward, or pass the function a copy (.clone())."
                )
        saved = iter(ctx.saved_tensors)
        inputs = []
        for is_tensor, constant in zip(ctx.layout, ctx.constants):
            if is_tensor:
                t = next(saved)
                inputs.append(t.detach().requires_grad_(t.requires_grad))
            else:
                inputs.append(constant)
        run = _ReentrantRun(ctx.log, recompute=True)
        first_node = sequence_mark()
        with contextlib.ExitStack() as stack:
            if ctx.rng is not None:
                stack.callback(set_rng_state, get_rng_state())
                set_rng_state(ctx.rng)
            stack.enter_context(enable_grad())
            stack.enter_context(interpreters.push(run))
            outputs = ctx.function(*inputs)
        run.finished()
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        roots, root_grads = [], []
        for out, g, before in zip(outputs, grads, ctx.out_versions):
            if isinstance(out, Tensor) and out._base is not None and out._vc.gen != out._view_gen:
                refresh_view(out)  # a view whose base the function changed in place
            if isinstance(out, Tensor):
                _carry_changes(out, before)
            if isinstance(out, Tensor) and out.requires_grad and g is not None:
                roots.append(out)
                root_grads.append(g)
        if roots:
            backward_recomputed(roots, root_grads, first_node)
        return (None, None, None) + tuple(
            a.grad if isinstance(a, Tensor) and a.requires_grad else None for a in inputs
        )
