"""Composites that PyTorch has under ``torch.nn.functional``: the losses
``binary_cross_entropy``, ``smooth_l1_loss``, ``huber_loss`` and ``kl_div``, and
``normalize`` and ``cosine_similarity``. Each is made of the op table's primitives, so its
gradient (and double backward) comes from theirs; ``memgrad.nn.functional`` re-exports them.

Example:
    >>> import memgrad as mg
    >>> from memgrad.ops.functional import huber_loss
    >>> huber_loss(mg.tensor([0.5, 3.0]), mg.zeros(2), reduction="sum").item()
    2.625
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from memgrad.ops import elementwise as ew
from memgrad.ops.linalg import vector_norm
from memgrad.ops.nn import _check_float, _difference, _reduce_elements, _reduction
from memgrad.tensor import Tensor

__all__ = ["binary_cross_entropy", "smooth_l1_loss", "huber_loss", "kl_div", "normalize",
           "cosine_similarity"]

# PyTorch clamps each log of binary_cross_entropy at -100: a certain wrong answer costs 100
_LOG_FLOOR = -100.0


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The binary cross-entropy of probabilities ``input`` against ``target``:
    ``-w * (y * log(x) + (1 - y) * log(1 - x))``, each log clamped at -100 as in PyTorch.
    For logits use ``binary_cross_entropy_with_logits``, which is exact where this loses
    precision.

    Args:
        input: probabilities in ``[0, 1]``, float32 or float64.
        target: probabilities of ``input``'s shape (floating; may require grad).
        weight: rescales each element's loss (broadcast to ``input``'s shape).
        size_average: PyTorch's deprecated spelling of ``reduction``.
        reduce: PyTorch's deprecated spelling of ``reduction``.
        reduction: ``"mean"`` (over all elements), ``"sum"`` or ``"none"``.

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> round(F.binary_cross_entropy(mg.tensor([0.5, 0.9]), mg.tensor([1.0, 1.0])).item(), 4)
        0.3993
    """
    api = "binary_cross_entropy"
    reduction = _reduction(size_average, reduce, reduction, api)
    _same_shape(input, target, api)
    data = input.numpy()
    if data.size and not ((data >= 0) & (data <= 1)).all():
        raise ValueError(f"{api}: all elements of input should be between 0 and 1, got values "
                         f"from {data.min()} to {data.max()}; for logits use "
                         "binary_cross_entropy_with_logits")
    with np.errstate(divide="ignore"):  # log(0) = -inf, clamped
        log_x = ew.clamp(ew.log(input), min=_LOG_FLOOR)
        log_not_x = ew.clamp(ew.log(1 - input), min=_LOG_FLOOR)
    losses = -(target * log_x + (1 - target) * log_not_x)
    if weight is not None:
        losses = losses * weight
    return _reduce_elements(losses, reduction)


def smooth_l1_loss(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """``0.5 * d**2 / beta`` where ``|d| < beta`` and ``|d| - 0.5 * beta`` elsewhere, for
    ``d = input - target`` (the L1 loss when ``beta`` is 0).

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> F.smooth_l1_loss(mg.tensor([0.5, 3.0]), mg.zeros(2), reduction="none")
        tensor([0.125, 2.5  ])
    """
    api = "smooth_l1_loss"
    reduction = _reduction(size_average, reduce, reduction, api)
    beta = _nonnegative(beta, "beta", api)
    d = _difference(input, target, api)
    if beta == 0.0:
        return _reduce_elements(d.abs(), reduction)
    a = d.abs()
    return _reduce_elements(ew.where(ew.lt(a, beta), d * d * (0.5 / beta), a - 0.5 * beta),
                            reduction)


def huber_loss(input: Tensor, target: Any, reduction: str = "mean",
               delta: float = 1.0) -> Tensor:
    """``0.5 * d**2`` where ``|d| < delta`` and ``delta * (|d| - 0.5 * delta)`` elsewhere,
    for ``d = input - target``: ``smooth_l1_loss`` times ``delta``.

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> F.huber_loss(mg.tensor([0.5, 3.0]), mg.zeros(2), reduction="none", delta=2.0)
        tensor([0.125, 4.   ])
    """
    api = "huber_loss"
    reduction = _reduction(None, None, reduction, api)
    delta = _nonnegative(delta, "delta", api)
    if delta == 0.0:
        raise ValueError(f"{api}: delta must be positive, got 0.0; for the L1 loss use l1_loss")
    d = _difference(input, target, api)
    a = d.abs()
    return _reduce_elements(ew.where(ew.lt(a, delta), d * d * 0.5, (a - 0.5 * delta) * delta),
                            reduction)


def kl_div(
    input: Tensor,
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """The Kullback-Leibler divergence of ``target`` from ``input`` (log-probabilities):
    ``target * (log(target) - input)`` elementwise, 0 where ``target`` is 0; with
    ``log_target`` the target is given as log-probabilities too. ``reduction="batchmean"``
    (the divergence proper) divides the sum by the batch size; ``"mean"`` divides by the
    number of elements, as PyTorch does (and warns about).

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> p = mg.tensor([[0.5, 0.5]])
        >>> F.kl_div(p.log(), p, reduction="batchmean").item()
        0.0
    """
    api = "kl_div"
    if reduction == "batchmean" and size_average is None and reduce is None:
        batchmean = True
        reduction = "sum"
    else:
        batchmean = False
        reduction = _reduction(size_average, reduce, reduction, api)
        if reduction == "mean":
            warnings.warn(f"{api}: reduction='mean' divides the total loss by both the batch "
                          "size and the support size; 'batchmean' divides only by the batch "
                          "size, which is the KL divergence. 'mean' will change to behave "
                          "the same as 'batchmean' in PyTorch's next major release.",
                          UserWarning, stacklevel=2)
    _same_shape(input, target, api)
    if log_target:
        losses = ew.exp(target) * (target - input)
    else:
        # 0 where the target is 0, with no gradient there (PyTorch's); log(1) keeps the
        # unused branch finite
        positive = ew.gt(target, 0)
        safe = ew.where(positive, target, 1.0)
        losses = ew.where(positive, target * (ew.log(safe) - input), 0.0)
    total = _reduce_elements(losses, reduction)
    if batchmean and input.ndim:
        total = total / input.shape[0]
    return total


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``input`` divided by its ``p``-norm along ``dim`` (at least ``eps``, so a zero vector
    stays zero).

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.normalize(mg.tensor([[3.0, 4.0]]))
        tensor([[0.6, 0.8]])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"normalize: input must be a Tensor, got {type(input).__name__}")
    _check_float(input, "normalize")
    norm = vector_norm(input, p, dim, keepdim=True)
    return input / ew.clamp(norm, min=float(eps))


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcasting the
    two): each is divided by its norm (at least ``eps``) and the products summed.

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> F.cosine_similarity(mg.tensor([[1.0, 0.0]]), mg.tensor([[1.0, 1.0]])).item()
        0.7071067690849304
    """
    for name, t in (("x1", x1), ("x2", x2)):
        if not isinstance(t, Tensor):
            raise TypeError(f"cosine_similarity: {name} must be a Tensor, got "
                            f"{type(t).__name__}")
        _check_float(t, "cosine_similarity")
    try:
        np.broadcast_shapes(x1.shape, x2.shape)
    except ValueError:
        raise ValueError(f"cosine_similarity: x1 of shape {x1.shape} and x2 of shape "
                         f"{x2.shape} do not broadcast") from None
    unit1 = x1 / ew.clamp(vector_norm(x1, 2, dim, keepdim=True), min=float(eps))
    unit2 = x2 / ew.clamp(vector_norm(x2, 2, dim, keepdim=True), min=float(eps))
    return (unit1 * unit2).sum(dim)


def _same_shape(input: Any, target: Any, api: str) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    _check_float(input, api)
    if not isinstance(target, Tensor) or tuple(target.shape) != tuple(input.shape):
        got = target.shape if isinstance(target, Tensor) else type(target).__name__
        raise ValueError(f"{api}: Using a target size ({got}) that is different to the input "
                         f"size ({input.shape}) is deprecated; give a target of the input's "
                         "shape")
    if target.dtype.kind != "f":
        raise TypeError(f"{api}: target must be a floating tensor, got dtype {target.dtype}; "
                        "convert it with .float()")


def _nonnegative(value: Any, name: str, api: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{api}: {name} must be a number, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{api}: {name} must be >= 0, got {value}")
    return float(value)
