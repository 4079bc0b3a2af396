"""Normalisation composites: ``batch_norm``, ``group_norm`` and ``rms_norm``, written with
the primitives of the op table (mean, sub, mul, sqrt...), so their gradients of every order
come from those primitives' VJPs.

NOTE [ Running statistics under checkpointing ]
``batch_norm`` in training mode normalises with the batch's own mean and (biased) variance,
made by the same ops in a checkpoint's forward and in its recomputation, so both runs give
the same values and the gradients equal those of plain training. Its running statistics are
state, not ops: they are blended in with NumPy (no op is recorded, so the recomputation sees
the same op sequence) and only when ``interpreters.phase()`` is not ``"recompute"``, so a
checkpointed step updates them once, as a plain step does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memgrad import interpreters
from memgrad.errors import ShapeError
from memgrad.tensor import Tensor

__all__ = ["batch_norm", "group_norm", "rms_norm"]


def _check_input(input: Any, api: str, min_ndim: int) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    if input.dtype.kind != "f":
        raise TypeError(
            f"{api}: expected a floating tensor, got dtype {input.dtype}; convert it first, "
            "e.g. with .float()"
        )
    if input.ndim < min_ndim:
        raise ShapeError(
            f"{api}: expected an input with at least {min_ndim} dimensions, got shape "
            f"{input.shape}"
        )


def _per_channel(t: Any, name: str, channels: int, ndim: int, api: str) -> Any:
    """``t`` (shape (C,)) shaped to broadcast over (N, C, d1, ...); None stays None."""
    if t is None:
        return None
    if not isinstance(t, Tensor) or tuple(t.shape) != (channels,):
        got = t.shape if isinstance(t, Tensor) else type(t).__name__
        raise ShapeError(f"{api}: {name} must be a tensor of shape ({channels},), got {got}")
    return t.reshape((channels,) + (1,) * (ndim - 2))


def _affine(y: Tensor, weight: Any, bias: Any) -> Tensor:
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _update_running(running: Tensor, batch: np.ndarray, factor: float) -> None:
    """``running = (1 - factor) * running + factor * batch``, in place, in NumPy."""
    r = running._data
    np.multiply(r, 1.0 - factor, out=r)
    np.add(r, factor * batch.reshape(r.shape), out=r, casting="same_kind")
    running._bump_version()


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dimension 1) of ``input`` (N, C, d1, ...) to zero mean and
    unit variance, then scale by ``weight`` and shift by ``bias``.

    In training mode (or without running statistics) the statistics are the batch's: the
    mean and the biased variance over every dimension but 1; the running ones, when given,
    are updated in place as ``running = (1 - momentum) * running + momentum * batch`` with
    the unbiased variance, as in PyTorch, except inside a checkpoint's recomputation (NOTE
    [ Running statistics under checkpointing ]). In evaluation mode the running statistics
    normalise.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([[1.0, 2.0], [3.0, 6.0]])
        >>> rm, rv = mg.zeros(2), mg.ones(2)
        >>> y = mg.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.5)
        >>> [round(v, 3) for v in y[:, 0].tolist()]
        [-1.0, 1.0]
        >>> rm.tolist(), rv.tolist()
        ([1.0, 2.0], [1.5, 4.5])
    """
    api = "batch_norm"
    _check_input(input, api, 2)
    channels = input.shape[1]
    shape = dict(channels=channels, ndim=input.ndim, api=api)
    w = _per_channel(weight, "weight", **shape)
    b = _per_channel(bias, "bias", **shape)
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None and (not isinstance(t, Tensor) or tuple(t.shape) != (channels,)):
            got = t.shape if isinstance(t, Tensor) else type(t).__name__
            raise ShapeError(f"{api}: {name} must be a tensor of shape ({channels},), got {got}")
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{api}: give both running_mean and running_var, or neither")
    # in training mode the running statistics are written, never read by an op (NOTE
    # [ Running statistics under checkpointing ])
    if training or running_mean is None:
        dims = (0,) + tuple(range(2, input.ndim))
        n = input.numel() // max(channels, 1)
        if training and n <= 1:
            raise ValueError(
                f"{api}: expected more than 1 value per channel when training, got input "
                f"of shape {input.shape}"
            )
        mean = input.mean(dims, keepdim=True)
        d = input - mean
        var = (d * d).mean(dims, keepdim=True)
        if training and running_mean is not None and interpreters.phase() != "recompute":
            _update_running(running_mean, mean.numpy(), momentum)
            _update_running(running_var, var.numpy() * (n / (n - 1)), momentum)
    else:
        d = input - _per_channel(running_mean, "running_mean", **shape)
        var = _per_channel(running_var, "running_var", **shape)
    return _affine(d / (var + eps).sqrt(), w, b)


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Split the channels (dimension 1) of ``input`` (N, C, d1, ...) into ``num_groups``
    groups, normalise each group of each sample to zero mean and unit (biased) variance,
    then apply the per-channel ``weight`` and ``bias``.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([[1.0, 3.0, 10.0, 30.0]])
        >>> [round(v, 3) for v in mg.nn.functional.group_norm(x, 2).tolist()[0]]
        [-1.0, 1.0, -1.0, 1.0]
    """
    api = "group_norm"
    _check_input(input, api, 2)
    channels = input.shape[1]
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) \
            or num_groups <= 0 or channels % num_groups:
        raise ValueError(
            f"{api}: num_groups must be a positive int that divides the {channels} channels, "
            f"got {num_groups!r}"
        )
    shape = dict(channels=channels, ndim=input.ndim, api=api)
    w = _per_channel(weight, "weight", **shape)
    b = _per_channel(bias, "bias", **shape)
    groups = input.reshape(input.shape[0], int(num_groups), -1)
    mean = groups.mean(2, keepdim=True)
    d = groups - mean
    var = (d * d).mean(2, keepdim=True)
    return _affine((d / (var + eps).sqrt()).reshape(input.shape), w, b)


def rms_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """Divide by the root mean square over the trailing ``normalized_shape`` dimensions,
    ``x / sqrt(mean(x**2) + eps)``, then scale by ``weight``; ``eps=None`` is the machine
    epsilon of ``input``'s dtype, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> y = mg.nn.functional.rms_norm(mg.tensor([[3.0, 4.0]]), 2)
        >>> [round(v, 4) for v in y.tolist()[0]]
        [0.8485, 1.1314]
    """
    api = "rms_norm"
    _check_input(input, api, 0)
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or k > input.ndim or tuple(input.shape[input.ndim - k:]) != tuple(shape):
        raise ShapeError(
            f"{api}: normalized_shape {tuple(shape)} must be the trailing dimensions of the "
            f"input, got input of shape {input.shape}"
        )
    if weight is not None and (not isinstance(weight, Tensor)
                               or tuple(weight.shape) != tuple(shape)):
        got = weight.shape if isinstance(weight, Tensor) else type(weight).__name__
        raise ShapeError(f"{api}: weight must have shape {tuple(shape)}, got {got}")
    if eps is None:
        eps = float(np.finfo(input.dtype).eps)
    dims = tuple(range(input.ndim - k, input.ndim))
    y = input / ((input * input).mean(dims, keepdim=True) + eps).sqrt()
    return y if weight is None else y * weight
