"""``checkpoint``: run a function without keeping its activations, recompute them in backward.

NOTE [ Recompute rules ]
Non-reentrant (the default, ``frame.py``) is built on saved-tensor hooks and an op hook:
1. Forward runs the function in grad mode. Every tensor an op saves for backward is packed
   as a placeholder numbered in save order; only the function's tensor arguments, leaves
   (parameters) and outputs the selective policy keeps are stored as themselves. The op
   hook numbers ops in call order, asks the policy (if any) before each op whether to keep
   its output, and remembers which saves each op made.
2. The first unpack of a placeholder in a backward recomputes: the function runs again on
   the same arguments in grad mode, with the forward's RNG state, under hooks that store
   each saved tensor under its number. An op whose output the policy kept is not run again:
   the hook returns the kept output and files the saves it made in forward from its
   arguments (a kept output changed in place since runs the op again, or is an error under
   PyTorch's strict selective checkpointing). With early stop on (the default,
   ``set_checkpoint_early_stop``) the recomputation stops as soon as every placeholder is
   rebuilt, before an op whose only saves are its inputs when those are the last ones;
   off, the whole function runs.
3. A recomputation serves one backward (one ``backward``/``grad`` call): each placeholder
   is handed out once to it (a second unpack in the same backward is PyTorch's "unpacked
   once" error), and the next backward recomputes again. The saved-tensor machinery
   reconnects each rebuilt tensor to the forward graph, so double backward works.
4. The determinism check compares the count, shape and dtype of what the recomputation saved
   with what the forward saved. A recomputation triggered during the forward itself (the
   function calls ``autograd.grad``) rebuilds what the forward has saved so far.
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
6. Nesting (PyTorch's "Rule 2"): under enclosing saved-tensor hooks (an outer checkpoint,
   ``save_on_disk``) a frame saves its tensor arguments through them and keeps no reference
   to them, and the saves inside it that are its arguments are placeholders too; so an inner
   checkpoint keeps nothing alive that the outer one dropped. Its recomputation unpacks the
   arguments, which may recompute the outer region first.
7. What a recomputation keeps is a graph-free alias of each saved tensor (its data and
   version counter): nothing a rebuilt value holds refers back to the recomputed graph, so
   it is freed as soon as backward is done with it, without the cyclic collector; a
   backward inside the recomputed function (``autograd.grad``) reads the same aliases.
Reentrant (``use_reentrant=True``, ``reentrant.py``) is the original design: a Function
whose forward runs the function under no-grad keeping only its inputs, and whose backward
recomputes and runs an inner backward through the recomputed graph. Its forward logs every
op (name, output shape and dtype, the versions of what it read from outside), and the
recomputation is checked against that log op by op (points 4 and 5).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from memgrad import interpreters
from memgrad.autograd.grad_mode import state
from memgrad.checkpoint.frame import Frame
from memgrad.checkpoint.oplog import OpLog
from memgrad.checkpoint.reentrant import Reentrant
from memgrad.checkpoint.selective import chooser_of
from memgrad.tensor import Tensor

__all__ = [
    "checkpoint", "is_recomputing", "set_checkpoint_early_stop", "set_checkpoint_debug_enabled",
]


class _Settings(threading.local):
    early_stop: bool | None = None  # None: each call's early_stop= decides
    debug: bool | None = None  # None: each call's debug= decides


_settings = _Settings()


@contextlib.contextmanager
def _setting(name: str, api: str, value: bool | None, none_ok: bool) -> Iterator[None]:
    if not (isinstance(value, bool) or (none_ok and value is None)):
        raise TypeError(
            f"{api}: expected a bool{' or None' if none_ok else ''}, got {type(value).__name__}"
        )
    prev = getattr(_settings, name)
    setattr(_settings, name, value)
    try:
        yield
    finally:
        setattr(_settings, name, prev)


def set_checkpoint_early_stop(enable: bool) -> contextlib.AbstractContextManager[None]:
    """Context manager: whether the checkpoints started inside it stop their recomputation
    as soon as every dropped value is rebuilt (True) or run the whole function (False).
    Inside it, this setting wins over ``checkpoint(..., early_stop=...)``, as in PyTorch;
    outside, each call's ``early_stop`` (default True) decides. It only needs to be active
    while the checkpointed forward runs. Per thread.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.checkpoint import checkpoint, set_checkpoint_early_stop
        >>> x = mg.randn(3, requires_grad=True)
        >>> with set_checkpoint_early_stop(False):
        ...     y = checkpoint(lambda a: a.tanh().exp(), x)
        >>> y.sum().backward()
    """
    return _setting("early_stop", "set_checkpoint_early_stop", enable, none_ok=False)


def set_checkpoint_debug_enabled(enabled: bool | None) -> contextlib.AbstractContextManager[None]:
    """Context manager: True or False overrides every ``checkpoint(..., debug=...)`` started
    inside it (a determinism error then lists the op sequences of both runs, or not); None
    leaves it to each call. Per thread.

    Example:
        >>> from memgrad.checkpoint import set_checkpoint_debug_enabled
        >>> with set_checkpoint_debug_enabled(True):
        ...     pass
    """
    return _setting("debug", "set_checkpoint_debug_enabled", enabled, none_ok=True)


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
    context_fn: Callable[[], tuple[Any, Any]] | None = None,
    preserve_rng_state: bool = True,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool | None = None,
    policy: Callable[[Any], bool] | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``function(*args, **kwargs)`` without keeping its activations; backward
    recomputes them in grad mode. Outputs and gradients are those of calling ``function``
    directly, dropout included (the RNG state is replayed); bit for bit, but with
    ``use_reentrant=True`` where a parameter gets gradient inside and outside the region
    (the inner backward adds into ``.grad`` first, as PyTorch's: the last bits may differ).

    Args:
        function: the region to checkpoint (a module or any callable).
        use_reentrant: False (default) uses saved-tensor hooks and works with kwargs,
            nested inputs, ``autograd.grad`` (outside and inside the function), nesting and
            double backward; True is the original autograd-Function design (no kwargs;
            ``backward()`` only).
        context_fn: returns two context managers, entered around the forward pass and
            around the recomputation; ``create_selective_checkpoint_contexts`` makes the
            pair for selective checkpointing. Non-reentrant only.
        preserve_rng_state: replay the global generator so random ops draw the same.
        determinism_check: ``"default"`` checks that the recomputation saves tensors of the
            same count, shapes and dtypes as the forward; ``"none"`` skips it.
        debug: add both runs' op sequences to a determinism error.
        early_stop: stop the recomputation once every dropped value is rebuilt (None or True,
            the default) or run the whole function (False); ``set_checkpoint_early_stop``
            wins over it.
        policy: a predicate over op records choosing outputs to keep instead of recompute
            (``memgrad.checkpoint.policy``), memgrad's spelling of ``context_fn``;
            non-reentrant only.

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
            f'memgrad.checkpoint: determinism_check must be "default" or "none", got '
            f"{determinism_check!r}"
        )
    if not callable(function):
        raise TypeError(
            f"memgrad.checkpoint: function must be callable, got {type(function).__name__}"
        )
    if early_stop is not None and not isinstance(early_stop, bool):
        raise TypeError(
            f"memgrad.checkpoint: early_stop must be a bool or None, got "
            f"{type(early_stop).__name__}"
        )
    if _settings.debug is not None:
        debug = _settings.debug
    if use_reentrant:
        _check_reentrant(args, kwargs, context_fn, policy)
        if not state.grad_enabled:
            return function(*args)
        log = OpLog(determinism_check == "default", debug)
        return Reentrant.apply(function, preserve_rng_state, log, *args)
    if debug and context_fn is not None:
        raise ValueError(
            "memgrad.checkpoint: debug=True is incompatible with non-default context_fn; "
            "pass one of them"
        )
    chooser, forward_ctx, recompute_ctx = chooser_of(context_fn, policy)
    if not state.grad_enabled:
        return function(*args, **kwargs)
    frame = Frame(
        function, args, kwargs,
        preserve_rng_state=preserve_rng_state,
        determinism_check=determinism_check,
        debug=debug,
        early_stop=_effective_early_stop(early_stop),
        chooser=chooser,
        contexts=(forward_ctx, recompute_ctx),
    )
    return frame.forward(args, kwargs)


def _effective_early_stop(early_stop: bool | None) -> bool:
    if _settings.early_stop is not None:
        return _settings.early_stop
    return True if early_stop is None else early_stop


def _check_reentrant(args: tuple, kwargs: dict, context_fn: Any, policy: Any) -> None:
    if kwargs:
        raise ValueError(
            f"memgrad.checkpoint: Unexpected keyword arguments: {','.join(kwargs)} "
            "(use_reentrant=True passes no keyword arguments to the function); pass them "
            "positionally, or use use_reentrant=False"
        )
    if context_fn is not None:
        raise ValueError(
            "memgrad.checkpoint: Passing `context_fn` is only supported when "
            "use_reentrant=False (the reentrant variant recomputes the whole function)."
        )
    if policy is not None:
        raise ValueError(
            "memgrad.checkpoint: policy needs use_reentrant=False (the reentrant variant "
            "recomputes the whole function)"
        )
    if state.grad_enabled and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn(
            "memgrad.checkpoint: None of the inputs have requires_grad=True. Gradients will be "
            "None (with use_reentrant=True the region's parameters get gradients only through "
            "an input that requires grad: make one require grad, or use use_reentrant=False)",
            stacklevel=3,
        )
