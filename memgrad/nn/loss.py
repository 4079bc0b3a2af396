"""Loss modules: ``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``L1Loss``,
``SmoothL1Loss``, ``HuberLoss``, ``BCELoss``, ``BCEWithLogitsLoss`` and ``KLDivLoss``, each
holding its options (and its ``weight``/``pos_weight`` as buffers, as in PyTorch) and calling
one function of ``memgrad.nn.functional``.
"""

from __future__ import annotations

from typing import Any

from memgrad.nn import functional as F
from memgrad.nn.module import Module
from memgrad.ops.nn import _reduction as legacy_reduction
from memgrad.tensor import Tensor

__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
           "BCELoss", "BCEWithLogitsLoss", "KLDivLoss"]


class _Loss(Module):
    def __init__(self, size_average: bool | None, reduce: bool | None, reduction: str) -> None:
        super().__init__()
        # checked here, so that a bad value fails when the loss is made, not when it is used
        self.reduction = legacy_reduction(size_average, reduce, reduction, type(self).__name__)

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class _WeightedLoss(_Loss):
    def __init__(self, weight: Tensor | None, size_average: bool | None, reduce: bool | None,
                 reduction: str) -> None:
        super().__init__(size_average, reduce, reduction)
        if weight is not None and not isinstance(weight, Tensor):
            raise TypeError(
                f"{type(self).__name__}: weight must be a Tensor or None, got "
                f"{type(weight).__name__}"
            )
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """The cross-entropy of logits against class indices or class probabilities, as
    ``F.cross_entropy`` (class ``weight``, ``ignore_index``, ``reduction``,
    ``label_smoothing``).

    Example:
        >>> import memgrad as mg
        >>> loss = mg.nn.CrossEntropyLoss(label_smoothing=0.1)
        >>> round(loss(mg.zeros(2, 4), mg.tensor([1, 3])).item(), 4)
        1.3863
    """

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """The negative log-likelihood of log-probabilities, as ``F.nll_loss``.

    Example:
        >>> import memgrad as mg
        >>> logp = mg.tensor([[-0.5, -1.0], [-2.0, -0.1]])
        >>> round(mg.nn.NLLLoss(reduction="sum")(logp, mg.tensor([0, 1])).item(), 4)
        0.6
    """

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        ignore_index: int = -100,
        reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_Loss):
    """The squared error, as ``F.mse_loss``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.MSELoss()(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 4.0])).item()
        2.0
    """

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """The absolute error, as ``F.l1_loss``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.L1Loss(reduction="sum")(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 5.0])).item()
        3.0
    """

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """The squared error below ``beta``, the absolute error above, as ``F.smooth_l1_loss``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.SmoothL1Loss(reduction="sum")(mg.tensor([0.5, 3.0]), mg.zeros(2)).item()
        2.625
    """

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """The Huber loss with threshold ``delta``, as ``F.huber_loss``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.HuberLoss(reduction="sum", delta=2.0)(mg.tensor([0.5, 3.0]), mg.zeros(2)).item()
        4.125
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(None, None, reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_Loss):
    """The binary cross-entropy of probabilities, as ``F.binary_cross_entropy``
    (``weight`` per element, kept as a buffer).

    Example:
        >>> import memgrad as mg
        >>> round(mg.nn.BCELoss()(mg.tensor([0.5]), mg.tensor([1.0])).item(), 4)
        0.6931
    """

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        if weight is not None and not isinstance(weight, Tensor):
            raise TypeError(f"BCELoss: weight must be a Tensor or None, got "
                            f"{type(weight).__name__}")
        self.register_buffer("weight", weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class KLDivLoss(Module):
    """The Kullback-Leibler divergence of ``target`` from log-probabilities ``input``, as
    ``F.kl_div`` (``reduction`` also ``"batchmean"``; ``log_target``).

    Example:
        >>> import memgrad as mg
        >>> p = mg.tensor([[0.25, 0.75]])
        >>> mg.nn.KLDivLoss(reduction="batchmean")(p.log(), p).item()
        0.0
    """

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__()
        if size_average is None and reduce is None and reduction == "batchmean":
            self.reduction = reduction
        else:
            self.reduction = legacy_reduction(size_average, reduce, reduction, "KLDivLoss")
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class BCEWithLogitsLoss(_Loss):
    """The binary cross-entropy of logits, as ``F.binary_cross_entropy_with_logits``
    (``weight`` per element, ``pos_weight`` per class).

    Example:
        >>> import memgrad as mg
        >>> loss = mg.nn.BCEWithLogitsLoss(pos_weight=mg.tensor([2.0]))
        >>> round(loss(mg.zeros(3, 1), mg.ones(3, 1)).item(), 4)
        1.3863
    """

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: bool | None = None,
        reduce: bool | None = None,
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        for name, t in (("weight", weight), ("pos_weight", pos_weight)):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"BCEWithLogitsLoss: {name} must be a Tensor or None, got "
                                f"{type(t).__name__}")
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)
