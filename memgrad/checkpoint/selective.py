"""Selective checkpointing: which op outputs a checkpointed region keeps.

Two spellings of one mechanism. PyTorch's: ``context_fn=`` on ``checkpoint`` with
``create_selective_checkpoint_contexts(policy_fn_or_ops)``, where ``policy_fn(ctx, op, *args,
**params)`` answers a :class:`CheckpointPolicy` for each op the region runs, ``ctx.is_recompute``
telling the forward from the recomputation and ``op`` the op's public handle (``mg.ops.matmul``;
the table is ``memgrad.ops.HANDLES``). memgrad's: ``policy=`` with a predicate over op records
(``memgrad.checkpoint.policy``). Both end in a :class:`Chooser` the region's frame asks before
each op runs; a kept output is held from forward to backward, and the recomputation takes it
instead of running the op again.

Example:
    >>> import functools
    >>> import memgrad as mg
    >>> from memgrad.checkpoint import checkpoint, create_selective_checkpoint_contexts
    >>> w = mg.randn(4, 4, requires_grad=True)
    >>> keep_matmuls = functools.partial(create_selective_checkpoint_contexts, [mg.ops.matmul])
    >>> y = checkpoint(lambda h: (h @ w).tanh(), mg.randn(2, 4), context_fn=keep_matmuls)
    >>> y.sum().backward()
    >>> w.grad.shape
    (4, 4)
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from memgrad.errors import CheckpointError

__all__ = [
    "CheckpointPolicy",
    "SelectiveCheckpointContext",
    "create_selective_checkpoint_contexts",
]


class CheckpointPolicy(enum.Enum):
    """What a selective-checkpoint policy answers for one op: save its output from the
    forward pass (``MUST_SAVE``, ``PREFER_SAVE``) or recompute it in backward
    (``MUST_RECOMPUTE``, ``PREFER_RECOMPUTE``). memgrad honours every answer, so the MUST and
    PREFER forms act alike; a policy may also answer True (``MUST_SAVE``) or False
    (``PREFER_RECOMPUTE``)."""

    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3


_SAVE = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


class SelectiveCheckpointContext:
    """The ``ctx`` a policy function receives: ``ctx.is_recompute`` is False in the forward
    pass and True in the recomputation."""

    __slots__ = ("is_recompute",)

    def __init__(self, *, is_recompute: bool) -> None:
        self.is_recompute = is_recompute


class Chooser:
    """What a frame asks before each op: keep its output? ``strict`` (PyTorch's selective
    checkpoint without ``allow_cache_entry_mutation``) makes a kept output that was changed
    in place, or that an earlier recomputation used up, an error; otherwise the op runs
    again. ``asks_in_recompute``: the answer is asked again in the recomputation (a policy
    function may count its calls)."""

    strict = False
    asks_in_recompute = False

    def keep(self, prim: Any, args: tuple, params: dict, is_recompute: bool, k: int) -> bool:
        """Whether to keep the output of op ``k`` (``prim`` on ``args``) of the region."""
        raise NotImplementedError


class PredicateChooser(Chooser):
    """``policy=``: a predicate over primitive records (``memgrad.checkpoint.policy``)."""

    def __init__(self, predicate: Callable[[Any], bool]) -> None:
        if not callable(predicate):
            raise TypeError(
                "checkpoint: policy must be a predicate over op records (see "
                f"memgrad.checkpoint.policy), got {type(predicate).__name__}"
            )
        self.predicate = predicate

    def keep(self, prim: Any, args: tuple, params: dict, is_recompute: bool, k: int) -> bool:
        return bool(self.predicate(prim))


class PolicyChooser(Chooser):
    """``create_selective_checkpoint_contexts``: a policy function over op handles."""

    asks_in_recompute = True

    def __init__(self, policy_fn: Callable[..., Any], strict: bool) -> None:
        self.policy_fn = policy_fn
        self.strict = strict
        self.contexts = (
            SelectiveCheckpointContext(is_recompute=False),
            SelectiveCheckpointContext(is_recompute=True),
        )

    def keep(self, prim: Any, args: tuple, params: dict, is_recompute: bool, k: int) -> bool:
        answer = self.policy_fn(self.contexts[is_recompute], _handle(prim.name), *args, **params)
        if isinstance(answer, bool):
            return answer
        if not isinstance(answer, CheckpointPolicy):
            raise TypeError(
                "memgrad.checkpoint: a selective-checkpoint policy function must return a "
                f"CheckpointPolicy (or a bool); for op {prim.name} it returned "
                f"{answer!r} of type {type(answer).__name__}. Return, e.g., "
                "CheckpointPolicy.MUST_SAVE or CheckpointPolicy.PREFER_RECOMPUTE."
            )
        return answer in _SAVE


class IndexChooser(Chooser):
    """A decision per op number: ``keeps(k)`` for op ``k`` of the region (a ``Plan``'s)."""

    def __init__(self, keeps: Callable[[int], bool], ops: int) -> None:
        self.keeps = keeps
        self.ops = ops

    def keep(self, prim: Any, args: tuple, params: dict, is_recompute: bool, k: int) -> bool:
        return k < self.ops and self.keeps(k)


def contexts_of(chooser: Chooser) -> tuple[_SelectiveContext, _SelectiveContext]:
    """The ``context_fn`` pair that makes a frame ask ``chooser``."""
    return _SelectiveContext(chooser), _SelectiveContext(chooser)


class _SelectiveContext:
    """One of the two contexts ``create_selective_checkpoint_contexts`` returns; a frame
    recognises it and asks its chooser (entering it does nothing else)."""

    def __init__(self, chooser: Chooser) -> None:
        self.chooser = chooser

    def __enter__(self) -> _SelectiveContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _handle(name: str) -> Any:
    """The public handle of primitive ``name`` (NOTE [ Op handles ] in ops/__init__.py), also
    for a primitive declared after ``memgrad.ops`` was imported."""
    from memgrad.ops import HANDLES, REGISTRY
    from memgrad.ops.registry import PUBLIC

    h = HANDLES.get(name)
    if h is None:
        h = HANDLES[name] = PUBLIC.get(name, REGISTRY[name])
    return h


def _ops_policy(ops: list) -> Callable[..., CheckpointPolicy]:
    from memgrad.ops import HANDLES, REGISTRY

    by_handle = {id(h): name for name, h in HANDLES.items()}
    chosen = set()
    for op in ops:
        name = by_handle.get(id(op))
        if name is None and getattr(op, "name", None) in REGISTRY and REGISTRY[op.name] is op:
            name = op.name
        if name is None:
            hint = getattr(op, "__name__", None)
            hint = (f" (for {hint}, pass mg.ops.{hint})" if hint in HANDLES else "")
            raise ValueError(
                "memgrad.checkpoint: Expected op in `op_list` to be an op handle (an entry of "
                f"memgrad.ops.HANDLES, e.g. mg.ops.matmul) or an op record, but got {op!r} of "
                f"type {type(op).__name__}{hint}. Pass the handles of the ops to save."
            )
        chosen.add(id(_handle(name)))

    def policy(ctx: SelectiveCheckpointContext, op: Any, *args: Any, **params: Any) -> Any:
        return (CheckpointPolicy.MUST_SAVE if id(op) in chosen
                else CheckpointPolicy.PREFER_RECOMPUTE)

    return policy


def create_selective_checkpoint_contexts(
    policy_fn_or_list: Callable[..., Any] | list,
    allow_cache_entry_mutation: bool = False,
) -> tuple[_SelectiveContext, _SelectiveContext]:
    """The pair of contexts that ``checkpoint(..., context_fn=...)`` wants for selective
    checkpointing: ``context_fn`` returns them, as
    ``functools.partial(create_selective_checkpoint_contexts, policy)``.

    Args:
        policy_fn_or_list: a function ``policy_fn(ctx, op, *args, **params)`` returning a
            :class:`CheckpointPolicy` (or a bool) for each op the region runs, in the forward
            pass and again in the recomputation (``ctx.is_recompute``); or a list of op
            handles (``[mg.ops.matmul, mg.ops.linear]``) whose outputs to save.
        allow_cache_entry_mutation: False makes a saved output changed in place before the
            recomputation uses it an error; True lets the op run again instead.

    Example:
        >>> import functools
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import CheckpointPolicy, checkpoint
        >>> from memgrad.checkpoint import create_selective_checkpoint_contexts
        >>> def policy(ctx, op, *args, **params):
        ...     return (CheckpointPolicy.MUST_SAVE if op is mg.ops.matmul
        ...             else CheckpointPolicy.PREFER_RECOMPUTE)
        >>> x = mg.randn(3, 3, requires_grad=True)
        >>> context_fn = functools.partial(create_selective_checkpoint_contexts, policy)
        >>> y = checkpoint(lambda a: (a @ a).tanh(), x, context_fn=context_fn)
        >>> y.sum().backward()
    """
    if isinstance(policy_fn_or_list, list):
        policy_fn = _ops_policy(policy_fn_or_list)
    elif callable(policy_fn_or_list):
        policy_fn = policy_fn_or_list
    else:
        raise TypeError(
            "memgrad.checkpoint: policy_fn_or_list must be either a function or a list of ops, "
            f"got {type(policy_fn_or_list).__name__}; pass policy_fn(ctx, op, *args, **params) "
            "or a list such as [mg.ops.matmul]"
        )
    return contexts_of(PolicyChooser(policy_fn, strict=not allow_cache_entry_mutation))


def chooser_of(context_fn: Callable[[], Any] | None, policy: Callable | None
               ) -> tuple[Chooser | None, Any, Any]:
    """The chooser and the two context managers a frame runs its forward and its
    recomputation in, from ``checkpoint``'s ``context_fn`` and ``policy``."""
    if context_fn is None:
        chooser = PredicateChooser(policy) if policy is not None else None
        return chooser, None, None
    if policy is not None:
        raise ValueError(
            "checkpoint: pass either policy= or context_fn=, not both (they are two spellings "
            "of selective checkpointing)"
        )
    if not callable(context_fn):
        raise TypeError(
            f"checkpoint: context_fn must be a callable returning two context managers, got "
            f"{type(context_fn).__name__}"
        )
    contexts = context_fn()
    if not (isinstance(contexts, tuple) and len(contexts) == 2):
        raise TypeError(
            "checkpoint: context_fn must return a tuple of two context managers (one for the "
            f"forward pass, one for the recomputation), got {type(contexts).__name__}"
        )
    forward_ctx, recompute_ctx = contexts
    chooser = None
    for ctx in contexts:
        if isinstance(ctx, _SelectiveContext):
            if chooser is not None and chooser is not ctx.chooser:
                raise ValueError(
                    "checkpoint: context_fn returned contexts of two different "
                    "create_selective_checkpoint_contexts calls; return the pair of one call"
                )
            chooser = ctx.chooser
    return chooser, forward_ctx, recompute_ctx


def extra_save_error(name: str, k: int) -> CheckpointError:
    return CheckpointError(
        f"memgrad.checkpoint: in the recomputation the selective-checkpoint policy chose to "
        f"save the output of op {k} ({name}), which it did not save in the forward pass; a "
        "policy must answer the same in both (use ctx.is_recompute only for side effects)"
    )
