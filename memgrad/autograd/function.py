"""Custom differentiable ops written as a forward and a backward, as in PyTorch.

NOTE [ Custom Functions ]
``MyFn.apply(*args)`` makes one ``MyFnBackward`` node and passes it to ``forward`` as
``ctx``: the same object is the ``grad_fn`` of the outputs, so what ``forward`` stores on it
is what ``backward`` finds there.
1. ``forward`` runs under no-grad on the original arguments; its Tensor outputs get
   ``grad_fn=ctx`` and ``output_nr`` 0, 1, ... (non-Tensor outputs are passed through and
   are not counted in ``num_outputs``).
2. An output the forward did not create (an argument returned unchanged, a tensor that
   already requires grad, the same tensor returned twice) is returned as a new Tensor
   sharing its data and version counter, a view of it: re-parenting the caller's tensor
   would cut its own graph.
3. ``save_for_backward`` takes effect after ``forward`` returns, when the outputs are known:
   an output is saved through ``saved.save(t, is_output=True)`` (array and version only, so
   the node does not keep its own output alive); anything else as the Tensor. Both go
   through ``saved_tensors_hooks`` and the version check (NOTE [ Saved tensors ]).
4. ``backward`` runs in the engine's grad mode (on iff ``create_graph``), so a backward
   written with memgrad ops can itself be differentiated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import state
from memgrad.autograd.graph import (
    _RELEASED_MSG,
    Meta,
    Node,
    _anomaly_trace,
    _seq,
    accumulator,
    refresh_view,
)
from memgrad.autograd.saved import save
from memgrad.tensor import Tensor, wrap

__all__ = ["Function", "FunctionCtx"]

_NO_EDGE = (None, 0)


class FunctionCtx(Node):
    """The ``ctx`` of a custom :class:`Function`, and the backward node of its outputs.

    Each ``Function`` subclass ``MyFn`` gets its own subclass ``MyFnBackward`` (the name
    errors and ``grad_fn`` show). Besides the methods below, ``ctx`` takes any attribute
    (``ctx.dim = dim``) for values ``backward`` needs that are not tensors.

    Attributes:
        needs_input_grad: one bool per forward argument, True where a gradient is needed.
        num_outputs: the number of Tensor outputs of the forward.
    """

    __slots__ = (
        "needs_input_grad",
        "num_outputs",
        "_to_save",  # what forward passed to save_for_backward, until apply saves it
        "_saved",  # (SavedTensor or None, ...); None once released
        "_non_differentiable",
        "_materialize_grads",
        "_outputs",  # per Tensor output: (position in forward's result, shape, dtype)
        "_n_results",  # how many values forward returned (backward gets one grad each)
        "__dict__",
    )

    _forward_cls: type[Function]
    # as in PyTorch, a gradient of a shape the input broadcasts to is summed back to it
    broadcasts = True

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        """Keep ``tensors`` (inputs, outputs or None) for ``backward``; read them back with
        ``ctx.saved_tensors``. Call it once, inside ``forward``."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"{self._forward_cls.__name__}.forward: save_for_backward() takes Tensors "
                    f"or None; got {type(t).__name__} at position {i}. Store other values as "
                    "attributes instead: ctx.value = value"
                )
        self._to_save = tensors

    @property
    def saved_tensors(self) -> tuple[Tensor | None, ...]:
        """The tensors given to ``save_for_backward``, in order. Raises ``RuntimeError`` if
        one was changed in place since, or if backward already freed them (pass
        ``retain_graph=True`` to the first backward to keep them)."""
        saved = self._saved
        if saved is None:
            raise RuntimeError(_RELEASED_MSG)
        name = self.name()
        result = []
        for s in saved:
            result.append(None if s is None else s.unpack(self, name))
        return tuple(result)

    def mark_non_differentiable(self, *outputs: Tensor) -> None:
        """Declare outputs that get no gradient (indices, masks): they do not require grad,
        and ``backward`` receives zeros (or None, see ``set_materialize_grads``) for them."""
        self._non_differentiable = outputs

    def set_materialize_grads(self, value: bool) -> None:
        """With True (the default) ``backward`` receives zeros for outputs that got no
        gradient; with False it receives None for them."""
        self._materialize_grads = bool(value)

    def apply(self, grads: tuple) -> tuple:
        cls = self._forward_cls
        full: list[Tensor | None] = [None] * self._n_results
        materialize = self._materialize_grads
        for g, (pos, shape, dtype) in zip(grads, self._outputs):
            if g is None and materialize:
                g = Tensor(np.zeros(shape, dtype))
            full[pos] = g
        result = cls.backward(self, *full)
        result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        meta = self._inputs[2::3]
        n = len(meta)
        if len(result) != n:
            # like PyTorch, extra trailing Nones are allowed
            if len(result) < n or any(r is not None for r in result[n:]):
                raise RuntimeError(
                    f"{self.name()}: {cls.__name__}.backward returned {len(result)} gradients "
                    f"but {cls.__name__}.forward took {n} arguments (after ctx); return one "
                    "gradient per forward argument, None for non-Tensor arguments and for "
                    "inputs that need no gradient"
                )
            result = result[:n]
        for i, (r, m) in enumerate(zip(result, meta)):
            if r is not None and m is None:
                raise RuntimeError(
                    f"{self.name()}: {cls.__name__}.backward returned a gradient at position "
                    f"{i}, but forward argument {i} is not a Tensor; return None there"
                )
        return result

    def release(self) -> None:
        if self._saved:
            self._saved = None


class Function:
    """Base class of custom differentiable ops.

    Subclass it with two static methods: ``forward(ctx, *args)`` computes the outputs (a
    Tensor or a tuple of Tensors) from the arguments under no-grad; ``backward(ctx, *grads)``
    gets one gradient per output and returns one per forward argument (None for
    non-Tensors and inputs that need no gradient; a gradient of the shape an input was
    broadcast to is summed back to the input's shape). Call it as ``MyFn.apply(*args)``.
    See :class:`FunctionCtx` for what ``ctx`` offers.

    Example:
        >>> import memgrad as mg
        >>> class Cube(mg.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x ** 3
        ...     @staticmethod
        ...     def backward(ctx, g):
        ...         (x,) = ctx.saved_tensors
        ...         return g * 3 * x * x
        >>> x = mg.tensor([1.0, 2.0], requires_grad=True)
        >>> y = Cube.apply(x)
        >>> y.grad_fn.name()
        'CubeBackward'
        >>> y.sum().backward()
        >>> x.grad
        tensor([ 3., 12.])
    """

    _backward_cls: type[FunctionCtx]  # made per subclass by __init_subclass__

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(
            f"{cls.__name__}Backward", (FunctionCtx,), {"__slots__": (), "_forward_cls": cls}
        )

    @staticmethod
    def forward(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        """Compute the outputs from ``args``; override it in the subclass."""
        raise NotImplementedError(
            f"{ctx._forward_cls.__name__} must define forward(ctx, *args) as a @staticmethod"
        )

    @staticmethod
    def backward(ctx: Any, *grads: Any, **kwargs: Any) -> Any:
        """Return the gradients of the forward arguments; override it in the subclass."""
        raise NotImplementedError(
            f"{ctx._forward_cls.__name__} must define backward(ctx, *grads) as a "
            "@staticmethod to be differentiated"
        )

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run ``forward`` on ``args`` and record ``backward`` for its outputs when grad mode
        is on and a Tensor argument requires grad."""
        if cls is Function:
            raise TypeError("Function.apply: subclass Function and call MyFn.apply(*args)")
        ctx = cls._backward_cls.__new__(cls._backward_cls)
        record = False
        if state.grad_enabled:
            for a in args:
                if isinstance(a, Tensor):
                    _refresh(a)
                    record = record or a._requires_grad
        needs = []
        inputs: list = []  # NOTE [ A node's inputs ] in autograd/graph.py
        for a in args:
            if isinstance(a, Tensor):
                need = record and a._requires_grad
                needs.append(need)
                inputs += _edge(a) if need else _NO_EDGE
                inputs.append(Meta((a._data.shape, a._data.dtype)))
            else:
                needs.append(False)
                inputs += (None, 0, None)
        ctx._inputs = tuple(inputs)
        ctx._sequence_nr = next(_seq)
        ctx._hooks = None
        ctx._trace = _anomaly_trace() if record and state.anomaly else None
        ctx.needs_input_grad = tuple(needs)
        ctx._to_save = ()
        ctx._saved = ()
        ctx._non_differentiable = ()
        ctx._materialize_grads = True

        prev = state.grad_enabled
        state.grad_enabled = False
        try:
            result = cls.forward(ctx, *args)
        finally:
            state.grad_enabled = prev

        is_tuple = isinstance(result, tuple)
        results = list(result) if is_tuple else [result]
        ctx._n_results = len(results)
        ctx.num_outputs = sum(isinstance(r, Tensor) for r in results)
        if not record:
            ctx._to_save = ctx._non_differentiable = ()
            return result
        _connect_outputs(ctx, args, results)
        return tuple(results) if is_tuple else results[0]


def _refresh(a: Tensor) -> None:
    # a view whose base was changed in place with a graph since gets the base's graph
    # (NOTE [ Views and in-place ops ] in ops/inplace.py)
    if a._base is not None and a._vc.gen != a._view_gen:
        refresh_view(a)


def _edge(a: Tensor) -> tuple:
    fn = a.grad_fn
    if fn is None:
        return (accumulator(a), 0)
    return (fn, a.output_nr)


def _connect_outputs(ctx: FunctionCtx, args: tuple, results: list) -> None:
    """Make the Tensor outputs children of ``ctx`` and save what forward asked to save
    (NOTE [ Custom Functions ] points 1-3)."""
    arg_ids = {id(a) for a in args if isinstance(a, Tensor)}
    non_diff = {id(t) for t in ctx._non_differentiable}
    saved_as_output: set[int] = set()  # ids of returned tensors that became outputs
    seen: set[int] = set()
    outputs = []
    nr = 0
    for pos, r in enumerate(results):
        if not isinstance(r, Tensor):
            continue
        out = r
        if id(r) in arg_ids or id(r) in seen or r._requires_grad:
            out = _alias(r)
            results[pos] = out
        seen.add(id(r))
        if id(r) not in non_diff and out._data.dtype.kind == "f":
            out.grad_fn = ctx
            out.output_nr = nr
            out._requires_grad = True
            if out._base is not None:  # its graph is this node's now, not its base's
                out._view_gen = out._vc.gen
            if out is r:
                saved_as_output.add(id(r))
        outputs.append((pos, out._data.shape, out._data.dtype))
        nr += 1
    ctx._outputs = tuple(outputs)
    to_save = ctx._to_save
    # the raw outputs must not stay on ctx: output -> grad_fn -> output is a cycle (also
    # when a pack hook raises, as a checkpoint's recomputation does to stop early)
    ctx._to_save = ctx._non_differentiable = ()
    ctx._saved = tuple(None if t is None else save(t, id(t) in saved_as_output) for t in to_save)


def _alias(t: Tensor) -> Tensor:
    """A new Tensor viewing ``t``'s data, sharing its version counter."""
    out = wrap(t._data)
    vc = t._version_counter()
    out._vc = vc
    if t._base is not None:
        out._base = t._base
        out._view_fn = t._view_fn
    else:
        out._base = t
        out._view_fn = ()
    out._view_gen = vc.gen
    return out
