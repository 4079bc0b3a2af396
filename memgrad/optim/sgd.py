"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight
decay, with PyTorch's update rule."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from memgrad.ops import parts
from memgrad.optim.optimizer import Optimizer

__all__ = ["SGD"]

# an element of the step in multiply-adds, for kernel_in_parts (memory-bound, as relu's
# backward)
_STEP_COST = 40


class SGD(Optimizer):
    """Stochastic gradient descent, as ``torch.optim.SGD``. Per step, with gradient ``g``:

    ``g = g + weight_decay * p``; with momentum ``b = g`` on the first step, afterwards
    ``b = momentum * b + (1 - dampening) * g``, and then ``g = g + momentum * b``
    (``nesterov=True``) or ``g = b``; finally ``p = p - lr * g``.

    Args:
        params: tensors or parameter groups (see ``Optimizer``).
        lr: learning rate.
        momentum: momentum factor (0 disables it).
        dampening: dampening of the momentum.
        weight_decay: L2 penalty.
        nesterov: Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).

    Example:
        >>> import memgrad as mg
        >>> w = mg.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = mg.optim.SGD([w], lr=0.1, momentum=0.9)
        >>> for _ in range(50):
        ...     opt.zero_grad()
        ...     (w * w).sum().backward()
        ...     opt.step()
        >>> bool(w.abs().max() < 0.1)
        True
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
    ) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("lr", "momentum", "weight_decay"):
            if not group[key] >= 0.0:
                raise ValueError(f"SGD: invalid {key} {group[key]!r}; it must be >= 0")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(
                "SGD: Nesterov momentum requires a momentum and zero dampening; got "
                f"momentum={group['momentum']}, dampening={group['dampening']}"
            )

    def _update(self, p: np.ndarray, g: np.ndarray, group: dict[str, Any],
                state: dict[str, Any]) -> None:
        lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
        scratch = self._scratch
        if wd != 0:
            d = scratch.get(0, p)
            np.multiply(p, wd, out=d)
            np.add(d, g, out=d)
            g = d
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = np.array(g, dtype=p.dtype)
            else:
                np.multiply(buf, momentum, out=buf)
                if group["dampening"] == 0:
                    np.add(buf, g, out=buf, casting="same_kind")
                else:
                    t = scratch.get(1, p)
                    np.multiply(g, 1 - group["dampening"], out=t, casting="same_kind")
                    np.add(buf, t, out=buf)
            if group["nesterov"]:
                t = scratch.get(1, p)
                np.multiply(buf, momentum, out=t)
                np.add(g, t, out=t, casting="same_kind")
                g = t
            else:
                g = buf
        if _kernel_layout(p, g):
            _descend(p, g, lr)
            return
        t = scratch.get(1, p)
        np.multiply(g, lr, out=t, casting="same_kind")
        np.subtract(p, t, out=p)


def _kernel_layout(p: np.ndarray, g: np.ndarray) -> bool:
    """Whether ``sgd_step_into`` takes ``p`` and ``g`` as they lie: contiguous, of one float
    dtype."""
    return (p.dtype in (np.float32, np.float64) and g.dtype == p.dtype
            and p.flags.c_contiguous and g.flags.c_contiguous)


def _descend(p: np.ndarray, g: np.ndarray, lr: float) -> None:
    """``p = p - g * lr`` in one pass (``sgd_step_into``; the NumPy path's two ufuncs, the
    same bits), in parts of the elements on every BLAS thread, as jobs of the hand-off where
    it runs them (NOTE [ Kernels as jobs ] in memgrad/ops/parts.py): the step is
    memory-bound, and one thread does not saturate the memory. Each element is computed as
    by one call, so the result does not depend on the split."""
    from memgrad._kernels.optim import sgd_step_into

    parts.kernel_in_parts(sgd_step_into, p.size, 1, p.size * _STEP_COST, (g.reshape(-1),),
                          p.reshape(-1), lr)
