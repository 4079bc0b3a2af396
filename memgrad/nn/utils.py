"""Gradient and parameter utilities, as in ``torch.nn.utils``: ``clip_grad_norm_``,
``clip_grad_value_``, ``parameters_to_vector`` and ``vector_to_parameters``.

The clipping functions change each ``.grad`` in place (NumPy, no graph), as an optimizer
step does (NOTE [ In-place optimizer steps ] in memgrad/optim/optimizer.py), and bump its
version counter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from memgrad.ops.movement import cat
from memgrad.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _tensors(parameters: Any, api: str) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(
                f"{api}: expected Tensors (e.g. model.parameters()), got {type(p).__name__}"
            )
    return params


def _norm(a: np.ndarray, norm_type: float) -> float:
    a = np.abs(a.astype(np.float64, copy=False))
    if norm_type == math.inf:
        return float(a.max()) if a.size else 0.0
    if norm_type == -math.inf:
        return float(a.min()) if a.size else math.inf
    if norm_type == 0:
        return float(np.count_nonzero(a))
    if norm_type == 2:
        return float(np.sqrt(np.vdot(a, a)))
    return float((a**norm_type).sum() ** (1.0 / norm_type))


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> Tensor:
    """Scale the gradients of ``parameters`` together so that their total norm is at most
    ``max_norm``: the norm of the vector of per-gradient norms, each of order
    ``norm_type`` (``math.inf`` for the largest absolute value). Each gradient is
    multiplied by ``min(1, max_norm / (total + 1e-6))``, as in PyTorch.

    Args:
        parameters: a tensor or an iterable of tensors; those without ``.grad`` are skipped.
        max_norm: the largest total norm kept.
        norm_type: the order of the norms (any positive number, or ``inf``).
        error_if_nonfinite: raise instead of scaling when the total norm is NaN or inf.

    Returns:
        The total norm before clipping, a 0-d tensor of the gradients' dtype.

    Example:
        >>> import memgrad as mg
        >>> w = mg.zeros(2, requires_grad=True)
        >>> w.grad = mg.tensor([3.0, 4.0])
        >>> mg.nn.utils.clip_grad_norm_([w], max_norm=1.0).item()
        5.0
        >>> [round(v, 4) for v in w.grad.tolist()]
        [0.6, 0.8]
    """
    api = "clip_grad_norm_"
    norm_type = float(norm_type)
    max_norm = float(max_norm)
    grads = [p.grad for p in _tensors(parameters, api) if p.grad is not None]
    if not grads:
        return Tensor(np.array(0.0, dtype=np.float32))
    norms = [_norm(g._data, norm_type) for g in grads]
    total = _norm(np.array(norms), norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(
            f"{api}: the total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    coef = min(1.0, max_norm / (total + 1e-6)) if not math.isnan(total) else math.nan
    with np.errstate(invalid="ignore"):  # inf * 0 where the norm is inf: NaN, as in PyTorch
        for g in grads:
            np.multiply(g._data, coef, out=g._data, casting="unsafe")
            g._bump_version()
    return Tensor(np.array(total, dtype=grads[0].dtype))


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient of ``parameters`` to ``[-clip_value, clip_value]`` in place.

    Example:
        >>> import memgrad as mg
        >>> w = mg.zeros(3, requires_grad=True)
        >>> w.grad = mg.tensor([-5.0, 0.5, 2.0])
        >>> mg.nn.utils.clip_grad_value_(w, 1.0)
        >>> w.grad
        tensor([-1. ,  0.5,  1. ])
    """
    clip_value = float(clip_value)
    for p in _tensors(parameters, "clip_grad_value_"):
        if p.grad is not None:
            np.clip(p.grad._data, -clip_value, clip_value, out=p.grad._data)
            p.grad._bump_version()


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated into one vector (differentiable: its
    gradient flows back to each parameter).

    Example:
        >>> import memgrad as mg
        >>> lin = mg.nn.Linear(3, 2)
        >>> mg.nn.utils.parameters_to_vector(lin.parameters()).shape
        (8,)
    """
    params = _tensors(parameters, "parameters_to_vector")
    if not params:
        raise ValueError("parameters_to_vector: got no parameters")
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the vector ``vec`` into the parameters, in place (the
    Parameter objects stay the same), reversing ``parameters_to_vector``.

    Example:
        >>> import memgrad as mg
        >>> lin = mg.nn.Linear(2, 1)
        >>> mg.nn.utils.vector_to_parameters(mg.arange(3.0), lin.parameters())
        >>> lin.weight.tolist(), lin.bias.tolist()
        ([[0.0, 1.0]], [2.0])
    """
    api = "vector_to_parameters"
    if not isinstance(vec, Tensor):
        raise TypeError(f"{api}: expected a Tensor as the vector, got {type(vec).__name__}")
    params = _tensors(parameters, api)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.numel() != total:
        raise ValueError(
            f"{api}: the vector must be 1-D with one element per parameter element "
            f"({total}), got shape {vec.shape}"
        )
    start = 0
    data = vec.numpy()
    for p in params:
        n = p.numel()
        np.copyto(p._data, data[start : start + n].reshape(p.shape), casting="same_kind")
        p._bump_version()
        start += n
