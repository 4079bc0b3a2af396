"""Derivatives of whole functions, as ``torch.autograd.functional``: ``vjp``, ``jvp``,
``jacobian``, ``hessian``, ``vhp`` and ``hvp``.

Each takes ``func`` and its ``inputs`` (a tensor or a tuple of tensors) and returns its
results in the same structure: a tensor where ``inputs`` (or ``func``'s output) is one
tensor, a tuple where it is a tuple. Everything is reverse mode on ``autograd.grad``:
forward-mode products (``jvp``, ``hvp``) use the double-backward trick: the VJP is linear
in its cotangent ``u``, so differentiating ``u -> vjp(u)`` along ``v`` gives the JVP.

``create_graph=True`` records the results in the graph (they can be differentiated again,
and the inputs' gradients flow back to the tensors passed in); otherwise the results are
detached. An input the output does not depend on gets zeros, or with ``strict=True`` a
RuntimeError. memgrad has no ``vmap``: ``vectorize=True`` and forward-mode strategies are
refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memgrad.autograd.engine import grad as _grad
from memgrad.autograd.grad_mode import enable_grad, is_grad_enabled, set_grad_enabled
from memgrad.factories import zeros_like
from memgrad.ops.movement import stack
from memgrad.tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]

Tensors = tuple[Tensor, ...]


def _tensors(value: Any, what: str, api: str) -> tuple[bool, Tensors]:
    """``value`` as a tuple of tensors, and whether it was a tuple."""
    if isinstance(value, tuple):
        for i, t in enumerate(value):
            if not isinstance(t, Tensor):
                raise TypeError(f"{api}: {what} must be a Tensor or a tuple of Tensors, got "
                                f"{type(t).__name__} at index {i}")
        return True, value
    if not isinstance(value, Tensor):
        raise TypeError(f"{api}: {what} must be a Tensor or a tuple of Tensors, got "
                        f"{type(value).__name__}")
    return False, (value,)


def _leaves(inputs: Tensors, create_graph: bool, need_graph: bool) -> Tensors:
    """The tensors ``func`` is called with: under ``create_graph`` an input that requires
    grad stays in the graph (a view of it, so its gradient reaches the caller's tensor);
    any other becomes a fresh leaf, requiring grad when ``need_graph``."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad
                 else t.detach().requires_grad_(need_graph) for t in inputs)


def _check_vector(v: Tensors, like: Tensors, is_tuple: bool, api: str, of: str) -> None:
    if len(v) != len(like):
        raise RuntimeError(f"{api}: v must hold one tensor per {of} ({len(like)}), got "
                           f"{len(v)}")
    for i, (a, b) in enumerate(zip(v, like)):
        if a.shape != b.shape:
            where = f"v[{i}]" if is_tuple else "v"
            raise RuntimeError(f"{api}: {where} must have the shape of the {of}, "
                               f"{tuple(b.shape)}, got {tuple(a.shape)}")


def _vector(v: Any, like: Tensors, is_tuple: bool, api: str, of: str,
            create_graph: bool) -> Tensors | None:
    """``v`` checked against ``like`` (None only where ``like`` is one single element)."""
    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise RuntimeError(f"{api}: v can be left out only when the {of} is a single "
                               "tensor of one element; pass v with the shape of the "
                               f"{of}")
        return None
    _, vs = _tensors(v, "v", api)
    vs = _leaves(vs, create_graph, need_graph=False)
    _check_vector(vs, like, is_tuple, api, of)
    return vs


def _outputs(func: Callable, args: Tensors, api: str, strict: bool) -> tuple[bool, Tensors]:
    is_tuple, outs = _tensors(func(*args), "the outputs of func", api)
    if strict:
        for i, o in enumerate(outs):
            if not o.requires_grad:
                raise RuntimeError(f"{api}: output {i} of func does not require grad, which "
                                   "strict=True does not allow; compute it from the inputs "
                                   "with differentiable ops, or pass strict=False")
    return is_tuple, outs


def _single_output(func: Callable, args: Tensors, api: str, strict: bool) -> Tensor:
    is_tuple, outs = _outputs(func, args, api, strict)
    if is_tuple:
        raise RuntimeError(f"{api}: func must return a single Tensor, got a tuple of "
                           f"{len(outs)}")
    if outs[0].numel() != 1:
        raise RuntimeError(f"{api}: func must return a tensor of one element, got shape "
                           f"{tuple(outs[0].shape)}")
    return outs[0]


def _grads(outputs: Tensors, inputs: Tensors, cotangents: Tensors | None = None,
           create_graph: bool = False, retain_graph: bool | None = None
           ) -> tuple[Tensor | None, ...]:
    """``autograd.grad`` over the outputs that require grad (None for an unused input, or
    for all of them when no output requires grad)."""
    pairs = [(o, None if cotangents is None else c)
             for o, c in zip(outputs, cotangents or (None,) * len(outputs))
             if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return _grad([o for o, _ in pairs], inputs, [c for _, c in pairs],
                 retain_graph=retain_graph, create_graph=create_graph, allow_unused=True)


def _zeros_for_missing(grads: tuple[Tensor | None, ...], like: Tensors, strict: bool,
                       create_graph: bool, api: str, what: str) -> Tensors:
    """``grads`` with zeros for the None ones; with ``strict`` a None (or, under
    ``create_graph``, a result that does not require grad) is a RuntimeError."""
    out = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(f"{api}: {what} does not depend on input {i}, which "
                                   "strict=True does not allow; pass strict=False to get "
                                   "zeros there")
            g = zeros_like(like[i])
        elif strict and create_graph and not g.requires_grad:
            raise RuntimeError(f"{api}: {what} with respect to input {i} does not depend on "
                               "the inputs, which strict=True with create_graph=True does "
                               "not allow")
        out.append(g)
    return tuple(out)


def _finish(values: Any, create_graph: bool) -> Any:
    """Detached copies of (nested tuples of) tensors unless ``create_graph``."""
    if isinstance(values, tuple):
        return tuple(_finish(v, create_graph) for v in values)
    return values if create_graph else values.detach()


def _shape(values: Tensors, is_tuple: bool) -> Any:
    return values if is_tuple else values[0]


def _no_vmap(api: str, vectorize: bool, strategy: str, name: str) -> None:
    if vectorize:
        raise NotImplementedError(f"{api}: vectorize=True needs vmap, which memgrad does not "
                                  "have; pass vectorize=False (the same values, one "
                                  "backward pass per output element)")
    if strategy != "reverse-mode":
        raise ValueError(f"{api}: {name} must be 'reverse-mode' (memgrad has no forward "
                         f"mode), got {strategy!r}")


def vjp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``func(*inputs)`` and the vector-Jacobian product ``v^T J`` at ``inputs`` (one
    gradient per input). ``v`` has the shape of the output; it may be left out when the
    output is one element.

    Example:
        >>> import memgrad as mg
        >>> out, g = mg.autograd.functional.vjp(lambda x: x * x, mg.tensor([1.0, 2.0]),
        ...                                     mg.tensor([1.0, 1.0]))
        >>> out, g
        (tensor([1., 4.]), tensor([2., 4.]))
    """
    api = "autograd.functional.vjp"
    with enable_grad():
        in_tuple, ins = _tensors(inputs, "inputs", api)
        ins = _leaves(ins, create_graph, need_graph=True)
        out_tuple, outs = _outputs(func, ins, api, strict)
        vs = _vector(v, outs, out_tuple, api, "output", create_graph)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        got = _grads(outs, ins, vs, create_graph=create_graph)
        result = _zeros_for_missing(got, ins, strict, create_graph, api, "the output")
    return (_shape(_finish(outs, create_graph), out_tuple),
            _shape(_finish(result, create_graph), in_tuple))


def jvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Any, Any]:
    """``func(*inputs)`` and the Jacobian-vector product ``J v`` at ``inputs`` (one per
    output), by the double-backward trick. ``v`` has the shape of the inputs; it may be
    left out when the input is one element.

    Example:
        >>> import memgrad as mg
        >>> out, t = mg.autograd.functional.jvp(lambda x: x * x, mg.tensor([1.0, 2.0]),
        ...                                     mg.tensor([1.0, 0.5]))
        >>> t
        tensor([2., 2.])
    """
    api = "autograd.functional.jvp"
    with enable_grad():
        in_tuple, ins = _tensors(inputs, "inputs", api)
        ins = _leaves(ins, create_graph, need_graph=True)
        vs = _vector(v, ins, in_tuple, api, "input", create_graph)
        out_tuple, outs = _outputs(func, ins, api, strict)
        # u -> u^T J is linear in u; its gradient along v is J v
        us = tuple(zeros_like(o).requires_grad_(True) for o in outs)
        back = _grads(outs, ins, us, create_graph=True)
        if strict:
            for i, b in enumerate(back):
                if b is None or not b.requires_grad:
                    raise RuntimeError(f"{api}: the outputs do not depend on input {i}, "
                                       "which strict=True does not allow; pass "
                                       "strict=False to get zeros there")
    with set_grad_enabled(create_graph or is_grad_enabled()):
        got = _grads(back, us, vs, create_graph=create_graph)
        result = _zeros_for_missing(got, outs, strict, create_graph, api, "the JVP")
    return (_shape(_finish(outs, create_graph), out_tuple),
            _shape(_finish(result, create_graph), out_tuple))


def _jacobian(func: Callable, ins: Tensors, create_graph: bool, strict: bool, api: str
              ) -> tuple[bool, tuple[Tensors, ...]]:
    """The Jacobian of each output with respect to each input, one backward pass per
    output element: ``[output][input]``, each of shape ``output.shape + input.shape``."""
    out_tuple, outs = _outputs(func, ins, api, strict)
    blocks = []
    for i, out in enumerate(outs):
        rows: list[list[Tensor]] = [[] for _ in ins]
        flat = out.reshape(-1)
        for j in range(out.numel()):
            got = _grads((flat[j],), ins, retain_graph=True, create_graph=create_graph)
            for k, g in enumerate(got):
                if g is None and strict:
                    raise RuntimeError(f"{api}: output {i} does not depend on input {k}, "
                                       "which strict=True does not allow; pass "
                                       "strict=False to get zeros there")
                if g is not None and strict and create_graph and not g.requires_grad:
                    raise RuntimeError(f"{api}: the Jacobian with respect to input {k} does "
                                       "not depend on the inputs, which strict=True with "
                                       "create_graph=True does not allow")
                rows[k].append(zeros_like(ins[k]) if g is None else g)
        blocks.append(tuple(
            stack(r, 0).reshape(tuple(out.shape) + tuple(x.shape)) if r
            else zeros_like(x).reshape(tuple(out.shape) + tuple(x.shape)).detach()
            for r, x in zip(rows, ins)))
    return out_tuple, tuple(blocks)


def _nest(blocks: tuple[Tensors, ...], out_tuple: bool, in_tuple: bool) -> Any:
    rows = blocks if in_tuple else tuple(b[0] for b in blocks)
    return rows if out_tuple else rows[0]


def jacobian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode") -> Any:
    """The Jacobian of ``func`` at ``inputs``: for an output of shape ``o`` and an input of
    shape ``i``, a tensor of shape ``o + i``; a tuple over the inputs where ``inputs`` is a
    tuple, over the outputs where ``func`` returns a tuple, a tuple of tuples
    (``[output][input]``) where both are.

    Example:
        >>> import memgrad as mg
        >>> mg.autograd.functional.jacobian(lambda x: x * x, mg.tensor([1.0, 2.0]))
        tensor([[2., 0.],
                [0., 4.]])
    """
    api = "autograd.functional.jacobian"
    _no_vmap(api, vectorize, strategy, "strategy")
    with enable_grad():
        in_tuple, ins = _tensors(inputs, "inputs", api)
        ins = _leaves(ins, create_graph, need_graph=True)
        out_tuple, blocks = _jacobian(func, ins, create_graph, strict, api)
    return _nest(_finish(blocks, create_graph), out_tuple, in_tuple)


def hessian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: str = "reverse-mode") -> Any:
    """The Hessian of ``func``, which returns one element, at ``inputs``: for an input of
    shape ``i``, a tensor of shape ``i + i``; for a tuple of inputs, a tuple of tuples
    (``[input][input]``).

    Example:
        >>> import memgrad as mg
        >>> mg.autograd.functional.hessian(lambda x: (x ** 3).sum(), mg.tensor([1.0, 2.0]))
        tensor([[ 6.,  0.],
                [ 0., 12.]])
    """
    api = "autograd.functional.hessian"
    _no_vmap(api, vectorize, outer_jacobian_strategy, "outer_jacobian_strategy")
    in_tuple, _ = _tensors(inputs, "inputs", api)

    def gradient(*args: Tensor) -> Tensors:
        def scalar(*a: Tensor) -> Tensor:
            return _single_output(func, a, api, strict).reshape(())

        # strict: a gradient that does not depend on the inputs is refused in here
        _, blocks = _jacobian(scalar, args, True, strict, api)
        return blocks[0]

    with enable_grad():
        _, ins = _tensors(inputs, "inputs", api)
        ins = _leaves(ins, create_graph, need_graph=True)
        _, blocks = _jacobian(gradient, ins, create_graph, strict, api)
    return _nest(_finish(blocks, create_graph), in_tuple, in_tuple)


def _second(func: Callable, inputs: Any, v: Any, create_graph: bool, strict: bool,
            api: str, trick: bool) -> tuple[Any, Any]:
    """vhp (``trick=False``: differentiate ``v . grad``) and hvp (``trick=True``: the
    double-backward trick on the gradient's VJP)."""
    with enable_grad():
        in_tuple, ins = _tensors(inputs, "inputs", api)
        ins = _leaves(ins, create_graph, need_graph=True)
        vs = _vector(v, ins, in_tuple, api, "input", create_graph)
        out = _single_output(func, ins, api, strict)
        gradient = _grads((out,), ins, create_graph=True)
        if strict:
            for k, g in enumerate(gradient):
                if g is None or not g.requires_grad:
                    raise RuntimeError(f"{api}: the gradient with respect to input {k} does "
                                       "not depend on the inputs (func is linear in it?), "
                                       "which strict=True does not allow")
        if trick:
            us = tuple(zeros_like(x).requires_grad_(True) for x in ins)
            wrt: Tensors = us
            first = _grads(gradient, ins, us, create_graph=True)
        else:
            wrt, first = ins, gradient
    with set_grad_enabled(create_graph or is_grad_enabled()):
        got = _grads(first, wrt, vs, create_graph=create_graph)
        result = _zeros_for_missing(got, ins, strict, create_graph, api, "the gradient")
    return _finish(out, create_graph), _shape(_finish(result, create_graph), in_tuple)


def vhp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Tensor, Any]:
    """``func(*inputs)`` (one element) and the vector-Hessian product ``v^T H`` at
    ``inputs``. ``v`` has the shape of the inputs; it may be left out when the input is one
    element.

    Example:
        >>> import memgrad as mg
        >>> out, p = mg.autograd.functional.vhp(lambda x: (x ** 3).sum(),
        ...                                     mg.tensor([1.0, 2.0]), mg.tensor([1.0, 1.0]))
        >>> p
        tensor([ 6., 12.])
    """
    return _second(func, inputs, v, create_graph, strict, "autograd.functional.vhp", False)


def hvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple[Tensor, Any]:
    """``func(*inputs)`` (one element) and the Hessian-vector product ``H v`` at ``inputs``,
    by the double-backward trick (equal to ``vhp`` for a twice continuously differentiable
    ``func``, whose Hessian is symmetric).

    Example:
        >>> import memgrad as mg
        >>> out, p = mg.autograd.functional.hvp(lambda x: (x ** 3).sum(),
        ...                                     mg.tensor([1.0, 2.0]), mg.tensor([1.0, 1.0]))
        >>> p
        tensor([ 6., 12.])
    """
    return _second(func, inputs, v, create_graph, strict, "autograd.functional.hvp", True)
