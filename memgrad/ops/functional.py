"""Composites that PyTorch has under ``torch.nn.functional``: the losses
``binary_cross_entropy``, ``smooth_l1_loss``, ``huber_loss`` and ``kl_div``,
``normalize``, ``cosine_similarity`` and ``embedding_bag``. Each is made of the op table's
primitives, so its gradient (and double backward) comes from theirs;
``memgrad.nn.functional`` re-exports them.

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

from memgrad.errors import ShapeError
from memgrad.ops import elementwise as ew
from memgrad.ops.indexing import max as _max
from memgrad.ops.linalg import vector_norm
from memgrad.ops.nn import _check_float, _difference, _reduce_elements, _reduction, embedding
from memgrad.tensor import Tensor

__all__ = ["binary_cross_entropy", "smooth_l1_loss", "huber_loss", "kl_div", "normalize",
           "cosine_similarity", "embedding_bag"]

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


_BAG_MODES = ("sum", "mean", "max")


def _integers(value: Any, api: str, what: str) -> np.ndarray:
    data = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if data.dtype.kind not in "iu":
        raise TypeError(f"{api}: {what} must hold integers (e.g. dtype mg.int64), got dtype "
                        f"{data.dtype}")
    return data.astype(np.int64, copy=False)


def _bag_bounds(idx: np.ndarray, offsets: Any, include_last_offset: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flat indices and each bag's start and end in them."""
    api = "embedding_bag"
    if idx.ndim == 2:
        if offsets is not None:
            raise ValueError(f"{api}: a 2-D input is a batch of bags of equal length, so "
                             "offsets must be None; pass a 1-D input to give offsets")
        bags, length = idx.shape
        starts = np.arange(bags, dtype=np.int64) * length
        return idx.reshape(-1), starts, starts + length
    if idx.ndim != 1:
        raise ShapeError(f"{api}: input must be 1-D (with offsets) or 2-D (bags of equal "
                         f"length), got shape {idx.shape}")
    if offsets is None:
        raise ValueError(f"{api}: a 1-D input needs offsets, the start of each bag in it "
                         "(a 1-D integer tensor starting with 0)")
    off = _integers(offsets, api, "offsets")
    if off.ndim != 1:
        raise ValueError(f"{api}: offsets must be 1-D, got shape {off.shape}")
    n = idx.shape[0]
    if off.size and off[0] != 0:
        raise ValueError(f"{api}: offsets[0] must be 0 (the first bag starts the input), "
                         f"got {int(off[0])}")
    if (np.diff(off) < 0).any() or (off.size and off[-1] > n):
        raise ValueError(f"{api}: offsets must be non-decreasing and at most the input's "
                         f"length {n}, got {off.tolist()}")
    if include_last_offset:
        if off.size == 0 or off[-1] != n:
            raise ValueError(f"{api}: with include_last_offset=True the last offset ends the "
                             f"last bag and must be the input's length {n}, got "
                             f"{off.tolist()}")
        return idx, off[:-1], off[1:]
    return idx, off, np.append(off[1:], n)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2.0,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """The sum, mean or max (``mode``) of the rows of ``weight`` over each bag of indices,
    without making the ``(indices, embedding_dim)`` lookup first in PyTorch; here a
    composite of ``embedding`` and reductions, so the gradients are theirs.

    The bags: the rows of a 2-D ``input``, or for a 1-D ``input`` the runs that ``offsets``
    starts (``offsets[0]`` is 0; with ``include_last_offset=True`` the last offset is the
    input's length, as in CSR). ``per_sample_weights`` (``input``'s shape, ``mode="sum"``
    only) scales each row before the sum. Indices equal to ``padding_idx`` are left out of
    their bag (and of a mean's count); an empty bag gives zeros. In ``"max"`` mode each
    element's gradient goes to the first row holding the maximum. ``max_norm``,
    ``scale_grad_by_freq`` and ``sparse`` gradients are not supported.

    Example:
        >>> import memgrad as mg
        >>> w = mg.arange(12.0).reshape(4, 3)
        >>> mg.nn.functional.embedding_bag(mg.tensor([1, 2, 3]), w, mg.tensor([0, 1]),
        ...                                mode="sum")
        tensor([[ 3.,  4.,  5.],
                [15., 17., 19.]])
    """
    api = "embedding_bag"
    if mode not in _BAG_MODES:
        raise ValueError(f"{api}: mode must be one of {_BAG_MODES}, got {mode!r}")
    for name, value, off in (("max_norm", max_norm, None), ("scale_grad_by_freq",
                             scale_grad_by_freq, False), ("sparse", sparse, False)):
        if value is not off and value != off:
            raise NotImplementedError(f"{api}: {name}={value!r} is not supported by memgrad; "
                                      f"leave {name} at its default")
    if weight.ndim != 2:
        raise ShapeError(f"{api}: weight must be 2-D (num_embeddings, embedding_dim), got "
                         f"shape {weight.shape}")
    _check_float(weight, api)
    idx = _integers(input, api, "input")
    flat, starts, ends = _bag_bounds(idx, offsets, include_last_offset)
    length = int((ends - starts).max(initial=0))
    at = starts[:, None] + np.arange(length)  # (bags, length): where each slot reads
    valid = at < ends[:, None]
    picked = np.where(valid, flat[np.minimum(at, flat.size - 1)] if flat.size else 0, 0)
    if padding_idx is not None:
        rows = weight.shape[0]
        if not -rows <= padding_idx < rows:
            raise ValueError(f"{api}: padding_idx must be within [-{rows}, {rows}), got "
                             f"{padding_idx}")
        valid &= picked != padding_idx % rows
    gathered = embedding(Tensor(picked), weight)  # (bags, length, embedding_dim)
    keep = Tensor(valid[:, :, None])
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"{api}: per_sample_weights is supported with "
                                      f"mode='sum' only, got mode={mode!r}")
        if not isinstance(per_sample_weights, Tensor) or per_sample_weights.shape != idx.shape:
            got = getattr(per_sample_weights, "shape", type(per_sample_weights).__name__)
            raise ValueError(f"{api}: per_sample_weights must be a tensor of the input's "
                             f"shape {idx.shape}, got {got}")
        if per_sample_weights.dtype != weight.dtype:
            raise TypeError(f"{api}: per_sample_weights must have weight's dtype "
                            f"{weight.dtype}, got {per_sample_weights.dtype}")
        if length:  # (no bag holds anything otherwise: the sum is zeros)
            scale = per_sample_weights.reshape(-1)[Tensor(np.minimum(at, flat.size - 1))]
            gathered = gathered * scale.unsqueeze(-1)
    if mode == "max" and length:
        top = _max(ew.where(keep, gathered, -np.inf), 1)[0]
        return ew.where(Tensor(valid.any(1)[:, None]), top, 0.0)
    total = ew.where(keep, gathered, 0.0).sum(1)
    if mode == "mean":
        count = np.maximum(valid.sum(1, keepdims=True), 1).astype(weight.dtype)
        return total / Tensor(count)
    return total
