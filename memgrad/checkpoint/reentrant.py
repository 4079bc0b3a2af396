"""The reentrant checkpoint (``use_reentrant=True``): a Function whose forward runs the
region under no-grad keeping only its inputs, and whose backward recomputes the region and
runs an inner backward through it (NOTE [ Recompute rules ] in checkpoint.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from memgrad import interpreters
from memgrad.autograd.engine import backward_recomputed, current_backward
from memgrad.autograd.function import Function
from memgrad.autograd.grad_mode import enable_grad, state
from memgrad.autograd.graph import refresh_view, sequence_mark
from memgrad.checkpoint.oplog import OpLog
from memgrad.errors import CheckpointError
from memgrad.interpreters import Interpreter
from memgrad.ops.movement import view_write
from memgrad.random import get_rng_state, set_rng_state
from memgrad.tensor import Tensor

__all__ = ["Reentrant"]

class ReentrantRun(Interpreter):
    """A reentrant region's interpreter: logs the forward, checks the recomputation."""

    def __init__(self, log: OpLog, recompute: bool) -> None:
        self.log = log
        self.recompute = recompute
        self.phase = "recompute" if recompute else None
        self.ops: list[str] = []
        self.n_writes = 0

    def written(self, prim: Any, args: tuple, params: dict) -> None:
        if self.recompute:
            self.log.check_write(self.n_writes, prim, args, params)
            self.n_writes += 1
        else:
            self.log.forward_written(prim, args, params)

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        if state.refreshing:  # a view's replay (graph.refresh_view): no op of the region
            return call_next(prim, args, params)
        if prim.inplace or prim is view_write:
            # recorded only in grad mode: in the forward, under no-grad, it was a write (a
            # write through a view records the in-place op, then view_write into its base)
            if self.recompute and prim.inplace:
                self.written(prim, args, params)
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


class Reentrant(Function):
    """The original design: recompute and backpropagate inside this node's backward."""

    @staticmethod
    def forward(ctx: Any, function: Callable, preserve_rng_state: bool, log: OpLog,
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
        with interpreters.push(ReentrantRun(log, recompute=False)):
            out = function(*args)
        ctx.out_versions = [
            (t._version_counter(), t._version) if isinstance(t, Tensor) else None
            for t in (out if isinstance(out, tuple) else (out,))
        ]
        return out

    @staticmethod
    def _view_inplace_error(api: str, output_nr: int) -> CheckpointError:
        """The error of an in-place change of an output that is a view (of a tensor the
        region made, or of an input it returned as it is): the write would give the output
        its base's graph, and the region's backward would not run for it."""
        return CheckpointError(
            f"{api}: output {output_nr} of a checkpointed region (use_reentrant=True) is a "
            "view and is being modified in place; its gradient would no longer flow through "
            "the region. Return a clone from the region (return out.clone()), change a clone "
            "of the output instead, or use use_reentrant=False."
        )

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        running = current_backward()
        if running is None or not running.into_leaves:
            raise CheckpointError(
                "memgrad.checkpoint: when use_reentrant=True, memgrad.checkpoint is "
                "incompatible with .grad() or passing an `inputs` parameter to .backward() "
                "(its backward runs an inner backward that accumulates into every .grad). To "
                "resolve this error, set use_reentrant=False, or call .backward() without "
                "passing the `inputs` argument."
            )
        if running.create_graph:
            raise CheckpointError(
                "memgrad.checkpoint: when use_reentrant=True, the region's backward runs an "
                "inner backward that builds no graph, so backward(create_graph=True) (double "
                "backward) would give second derivatives without the region's part. Use "
                "use_reentrant=False, which supports double backward."
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
        run = ReentrantRun(ctx.log, recompute=True)
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
        if not roots:
            raise CheckpointError(
                "memgrad.checkpoint: none of output has requires_grad=True, this checkpoint() "
                "is not necessary (with use_reentrant=True an output requires grad only if an "
                "input does: make an input require grad, or use use_reentrant=False)"
            )
        backward_recomputed(roots, root_grads, first_node)
        return (None, None, None) + tuple(
            a.grad if isinstance(a, Tensor) and a.requires_grad else None for a in inputs
        )
