"""Check analytic gradients against central finite differences, in float64.

``gradcheck`` compares every entry of the Jacobian of ``fn`` that backward computes with
``(fn(x + eps) - fn(x - eps)) / (2 eps)``; ``gradgradcheck`` does the same for the function
that maps ``(inputs, grad_outputs)`` to the first gradients, which checks second
derivatives (double backward).

Both work on float64 leaf copies of the inputs that require grad (float32 inputs are
converted; float32 differences at eps=1e-6 would be noise), so the caller's tensors are
never changed, not even for a moment. ``fn`` must compute its result from its arguments:
a tensor it reads from elsewhere (a closure, a module parameter) is a constant here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memgrad.autograd.engine import grad
from memgrad.autograd.grad_mode import enable_grad, no_grad
from memgrad.errors import GradcheckError
from memgrad.tensor import Tensor

__all__ = ["gradcheck", "gradgradcheck"]


def gradcheck(
    fn: Callable[..., Any],
    inputs: Tensor | Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check the gradients of ``fn`` at ``inputs`` against finite differences.

    Every floating-point Tensor output of ``fn`` is differentiated with respect to every
    input Tensor that requires grad (each is replaced by a float64 leaf copy first). The
    check passes iff ``|analytical - numerical| <= atol + rtol * |numerical|`` for every
    entry of every Jacobian.

    Args:
        fn: a function of ``*inputs`` returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a sequence of arguments; Tensors that do not require grad and
            non-Tensors are passed through unchanged.
        eps: the finite-difference step.
        atol: the absolute tolerance.
        rtol: the relative tolerance.
        raise_exception: on a mismatch, raise (True) or return False.

    Returns:
        True when the gradients agree (False on a mismatch with ``raise_exception=False``).

    Raises:
        GradcheckError: a Jacobian entry is off; the message names the output, the input,
            the worst element, both values and the tolerance.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([0.5, -1.0, 2.0], dtype=mg.float64, requires_grad=True)
        >>> w = mg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
        >>> mg.autograd.gradcheck(lambda x, w: (x.tanh() @ w).exp(), (x, w))
        True
    """
    args = _prepare("gradcheck", inputs)
    return _check(
        "gradcheck", fn, args, eps, atol, rtol, raise_exception, _input_label, _output_label
    )


def gradgradcheck(
    fn: Callable[..., Any],
    inputs: Tensor | Sequence[Any],
    grad_outputs: Tensor | Sequence[Tensor] | None = None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Check the second derivatives of ``fn`` at ``inputs`` against finite differences.

    Runs :func:`gradcheck` on ``(inputs..., grad_outputs...) -> autograd.grad(fn(inputs),
    inputs, grad_outputs, create_graph=True)``, dropping the gradients of unused inputs.
    That checks the double backward of every op in ``fn``, with respect to both the inputs
    and the incoming gradients. ``fn``, ``inputs``, ``eps``, ``atol``, ``rtol`` and
    ``raise_exception`` are as for :func:`gradcheck`.

    Args:
        grad_outputs: one gradient per floating-point output of ``fn`` that requires grad.
            By default random float64 tensors that require grad, drawn from a local
            generator seeded with 0 (the global generator is not touched). Given ones are
            prepared like the inputs: those that require grad are checked too.

    Returns:
        True when the second derivatives agree (False on a mismatch with
        ``raise_exception=False``).

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([0.5, -1.0, 2.0], dtype=mg.float64, requires_grad=True)
        >>> mg.autograd.gradgradcheck(lambda x: (x.tanh() * x).exp(), (x,))
        True
    """
    args = _prepare("gradgradcheck", inputs)
    wrt = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a._requires_grad]
    with enable_grad():
        outs = [o for o in _floating_outputs(fn(*args)) if o._requires_grad]
    if not outs:
        raise ValueError(
            "gradgradcheck: no floating-point output of fn requires grad, so there is no "
            "gradient to differentiate; fn must compute its outputs from the inputs"
        )
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        gs = [Tensor(rng.standard_normal(o.shape), requires_grad=True) for o in outs]
    else:
        gs = list(_prepare("gradgradcheck(grad_outputs=...)", grad_outputs))
        if len(gs) != len(outs):
            raise ValueError(
                f"gradgradcheck: got {len(gs)} grad_outputs for {len(outs)} floating-point "
                "outputs of fn that require grad; pass one per such output, or None for "
                "random ones"
            )
    n = len(args)
    kept: list[int] = []  # which inputs the first gradients belong to (unused ones dropped)

    def first_grads(*all_args: Any) -> tuple[Tensor, ...]:
        with enable_grad():
            outputs = [o for o in _floating_outputs(fn(*all_args[:n])) if o._requires_grad]
            grads = grad(
                outputs,
                [all_args[i] for i in wrt],
                list(all_args[n:]),
                create_graph=True,
                allow_unused=True,
            )
        kept[:] = [wrt[k] for k, g in enumerate(grads) if g is not None]
        return tuple(g for g in grads if g is not None)

    def input_label(i: int) -> str:
        return f"input {i}" if i < n else f"grad_outputs[{i - n}]"

    def output_label(k: int) -> str:
        return f"output {k} (the gradient of input {kept[k]})"

    return _check(
        "gradgradcheck",
        first_grads,
        args + tuple(gs),
        eps,
        atol,
        rtol,
        raise_exception,
        input_label,
        output_label,
    )


def _input_label(i: int) -> str:
    return f"input {i}"


def _output_label(k: int) -> str:
    return f"output {k}"


def _prepare(api: str, inputs: Any) -> tuple:
    """The arguments with each Tensor that requires grad replaced by a float64 leaf copy."""
    items = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    args = []
    for i, a in enumerate(items):
        if isinstance(a, Tensor) and a._requires_grad:
            if a._data.dtype.kind != "f":
                raise TypeError(
                    f"{api}: input {i} requires grad but has dtype {a.dtype}; only "
                    "floating-point inputs can be checked. Pass it with requires_grad=False "
                    "to use it as a constant, or convert it with .double()."
                )
            a = Tensor(np.array(a._data, dtype=np.float64), requires_grad=True)
        args.append(a)
    return tuple(args)


def _floating_outputs(result: Any) -> list[Tensor]:
    items = result if isinstance(result, tuple) else (result,)
    return [r for r in items if isinstance(r, Tensor) and r._data.dtype.kind == "f"]


def _check(
    api: str,
    fn: Callable[..., Any],
    args: tuple,
    eps: float,
    atol: float,
    rtol: float,
    raise_exception: bool,
    input_label: Callable[[int], str],
    output_label: Callable[[int], str],
) -> bool:
    wrt = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a._requires_grad]
    if not wrt:
        raise ValueError(
            f"{api}: no input requires grad, so there is nothing to check; set "
            "requires_grad=True on the floating-point inputs to differentiate"
        )
    shapes, analytical = _analytical(api, fn, args, wrt)
    numerical = _numerical(api, fn, args, wrt, eps, shapes)
    for k, shape in enumerate(shapes):
        for col, i in enumerate(wrt):
            a = analytical[k][col]
            num = numerical[k][col]
            tolerance = atol + rtol * np.abs(num)
            excess = np.abs(a - num) - tolerance
            if not (excess <= 0).all():  # also catches NaN
                if not raise_exception:
                    return False
                raise GradcheckError(
                    _mismatch(api, a, num, excess, tolerance, atol, rtol,
                              output_label(k), shape,
                              input_label(i), args[i].shape)
                )
    return True


def _analytical(
    api: str, fn: Callable[..., Any], args: tuple, wrt: list[int]
) -> tuple[list[tuple], list[list[np.ndarray]]]:
    """The output shapes, and ``jacobians[k][col]`` (output k numel, input numel) from
    backward: one ``grad`` call per output element."""
    with enable_grad():
        outputs = _floating_outputs(fn(*args))
    if not outputs:
        raise ValueError(
            f"{api}: fn returned no floating-point Tensor, so there is nothing to check; "
            "return the Tensor (or tuple of Tensors) whose gradients you want checked"
        )
    xs = [args[i] for i in wrt]
    jacobians = []
    for out in outputs:
        m = out._data.size
        jac = [np.zeros((m, x._data.size)) for x in xs]
        if out._requires_grad:
            for r in range(m):
                onehot = np.zeros(m, dtype=out._data.dtype)
                onehot[r] = 1
                grads = grad(
                    out, xs, Tensor(onehot.reshape(out.shape)), retain_graph=True,
                    allow_unused=True,
                )
                for col, g in enumerate(grads):
                    if g is not None:
                        jac[col][r] = g._data.ravel()
        jacobians.append(jac)
    return [o.shape for o in outputs], jacobians


def _numerical(
    api: str, fn: Callable[..., Any], args: tuple, wrt: list[int], eps: float, shapes: list
) -> list[list[np.ndarray]]:
    """``numerical[k][col]``: central differences of output k with respect to ``args[wrt[col]]``."""
    result = [[np.zeros((int(np.prod(s)), args[i]._data.size)) for i in wrt] for s in shapes]

    def evaluate() -> list[np.ndarray]:
        with no_grad():
            outs = _floating_outputs(fn(*args))
        got = [o.shape for o in outs]
        if got != shapes:
            raise RuntimeError(
                f"{api}: fn returned outputs of shapes {got} for perturbed inputs but "
                f"{shapes} for the original ones; fn must be a deterministic function of "
                "its inputs"
            )
        # copies: an output may share memory with an input that is being perturbed
        return [np.array(o._data, dtype=np.float64) for o in outs]

    for col, i in enumerate(wrt):
        flat = args[i].numpy().flat  # args[i] is gradcheck's own copy
        for j in range(args[i]._data.size):
            orig = flat[j]
            flat[j] = orig + eps
            plus = evaluate()
            flat[j] = orig - eps
            minus = evaluate()
            flat[j] = orig
            for k in range(len(shapes)):
                result[k][col][:, j] = ((plus[k] - minus[k]) / (2 * eps)).ravel()
    return result


def _mismatch(
    api: str,
    analytical: np.ndarray,
    numerical: np.ndarray,
    excess: np.ndarray,
    tolerance: np.ndarray,
    atol: float,
    rtol: float,
    out_name: str,
    out_shape: tuple,
    in_name: str,
    in_shape: tuple,
) -> str:
    bad = ~(excess <= 0)
    # NaN counts as the worst possible disagreement
    r, c = np.unravel_index(np.argmax(np.where(np.isnan(excess), np.inf, excess)), excess.shape)
    out_index = tuple(int(v) for v in np.unravel_index(r, out_shape)) if out_shape else ()
    in_index = tuple(int(v) for v in np.unravel_index(c, in_shape)) if in_shape else ()
    num, ana = float(numerical[r, c]), float(analytical[r, c])
    return (
        f"{api}: Jacobian mismatch for {out_name} with respect to {in_name} "
        f"({int(bad.sum())} of {bad.size} entries differ). Worst: element {out_index} of "
        f"{out_name} with respect to element {in_index} of {in_name}: numerical {num!r} vs "
        f"analytical {ana!r}; |difference| {abs(ana - num)!r} exceeds the tolerance "
        f"{float(tolerance[r, c])!r} (atol {atol} + rtol {rtol} * |numerical|). Either the "
        "backward of an op between them is wrong, or fn is not smooth here (relu/abs/max at "
        "a tie): then move the inputs away from the kink or loosen eps/atol/rtol."
    )
