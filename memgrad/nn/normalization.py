"""Normalisation layers: ``BatchNorm1d``, ``BatchNorm2d``, ``GroupNorm`` and ``RMSNorm``,
with PyTorch's arguments, buffers and initialisation.

A batch-norm layer counts its training steps in ``num_batches_tracked`` and updates its
running statistics once per forward, never inside a checkpoint's recomputation (NOTE
[ Running statistics under checkpointing ] in memgrad/ops/norm.py), so a checkpointed model
ends a step with the same buffers as a plain one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memgrad import interpreters
from memgrad.factories import ones, tensor, zeros
from memgrad.nn import functional as F
from memgrad.nn.module import Module, Parameter
from memgrad.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "RMSNorm"]


def _check_count(api: str, name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{api}: {name} must be a positive int, got {v!r}")


class _BatchNorm(Module):
    _ndims: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        _check_count(type(self).__name__, "num_features", num_features)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features))
            self.bias = Parameter(zeros(num_features))
        else:
            self.weight = None
            self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features))
            self.register_buffer("running_var", ones(num_features))
            self.register_buffer("num_batches_tracked", tensor(0))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, no batches tracked."""
        if self.track_running_stats:
            self.running_mean._data.fill(0)
            self.running_var._data.fill(1)
            self.num_batches_tracked._data.fill(0)
            for b in (self.running_mean, self.running_var, self.num_batches_tracked):
                b._bump_version()

    def reset_parameters(self) -> None:
        """Reset the running statistics, ``weight`` to ones and ``bias`` to zeros."""
        self.reset_running_stats()
        if self.affine:
            self.weight._data.fill(1)
            self.bias._data.fill(0)
            self.weight._bump_version()
            self.bias._bump_version()

    def _check_input_dim(self, input: Tensor) -> None:
        name = type(self).__name__
        if not isinstance(input, Tensor) or input.ndim not in self._ndims:
            got = f"{input.ndim}D" if isinstance(input, Tensor) else type(input).__name__
            want = " or ".join(f"{d}D" for d in self._ndims)
            raise ValueError(f"{name}: expected {want} input, got {got} input")
        if input.shape[1] != self.num_features:
            raise ValueError(
                f"{name}: expected {self.num_features} channels in dimension 1, got input of "
                f"shape {input.shape}"
            )

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            if interpreters.phase() != "recompute":
                self.num_batches_tracked._data += 1
                self.num_batches_tracked._bump_version()
            if self.momentum is None:  # a cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked._data)
        # without running statistics (None) batch_norm normalises with the batch's
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                            self.bias, self.training, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over (N, C) or (N, C, L) input: each channel normalised with the
    batch's statistics in training mode (updating ``running_mean``/``running_var`` with
    ``momentum``; ``momentum=None`` keeps a cumulative average) and with the running ones
    in evaluation mode; then ``weight`` (ones) and ``bias`` (zeros) if ``affine``.

    Example:
        >>> import memgrad as mg
        >>> bn = mg.nn.BatchNorm1d(3)
        >>> y = bn(mg.randn(8, 3) * 5 + 2)
        >>> bool(y.mean(0).abs().max() < 1e-5), int(bn.num_batches_tracked)
        (True, 1)
    """

    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over (N, C, H, W) input, per channel (see ``BatchNorm1d``).

    Example:
        >>> import memgrad as mg
        >>> bn = mg.nn.BatchNorm2d(4).eval()
        >>> bn(mg.ones(2, 4, 3, 3)).shape
        (2, 4, 3, 3)
    """

    _ndims = (4,)


class GroupNorm(Module):
    """Group normalisation: the channels split into ``num_groups`` groups, each group of
    each sample normalised on its own (the same in training and evaluation), then a
    per-channel ``weight`` (ones) and ``bias`` (zeros) if ``affine``.

    Example:
        >>> import memgrad as mg
        >>> gn = mg.nn.GroupNorm(2, 6)
        >>> gn(mg.randn(4, 6, 5)).shape
        (4, 6, 5)
    """

    def __init__(
        self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True
    ) -> None:
        super().__init__()
        _check_count("GroupNorm", "num_groups", num_groups)
        _check_count("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise ValueError(
                f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                f"({num_groups})"
            )
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self.weight = Parameter(ones(num_channels)) if affine else None
        self.bias = Parameter(zeros(num_channels)) if affine else None

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dimensions,
    ``x / sqrt(mean(x**2) + eps) * weight`` (weight ones if ``elementwise_affine``);
    ``eps=None`` is the machine epsilon of the input's dtype.

    Example:
        >>> import memgrad as mg
        >>> norm = mg.nn.RMSNorm(4)
        >>> y = norm(mg.randn(2, 4))
        >>> bool(((y * y).mean(-1) - 1).abs().max() < 1e-4)
        True
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
    ) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) \
            else tuple(normalized_shape)
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = Parameter(ones(self.normalized_shape)) if elementwise_affine else None

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
