"""Adam and AdamW, with PyTorch's update rules (bias-corrected moments, optional AMSGrad;
AdamW decays the weights directly instead of adding an L2 term to the gradient)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from memgrad.optim.optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam``. Per step ``t`` (from 1), with gradient ``g``:

    ``g = g + weight_decay * p``; ``m = beta1 * m + (1 - beta1) * g``;
    ``v = beta2 * v + (1 - beta2) * g**2``;
    ``p = p - lr * (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps)``.
    With ``amsgrad=True``, ``v`` in the last formula is replaced by the running maximum of
    ``v`` (kept as ``max_exp_avg_sq``), as PyTorch does.

    Args:
        params: tensors or parameter groups (see ``Optimizer``).
        lr: learning rate.
        betas: decay rates of the first and second moment averages.
        eps: added to the denominator for numerical stability.
        weight_decay: L2 penalty (added to the gradient).
        amsgrad: use the AMSGrad variant.

    Example:
        >>> import memgrad as mg
        >>> w = mg.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = mg.optim.Adam([w], lr=0.1)
        >>> for _ in range(100):
        ...     opt.zero_grad()
        ...     (w * w).sum().backward()
        ...     opt.step()
        >>> bool(w.abs().max() < 0.1)
        True
    """

    _decoupled = False

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        name = type(self).__name__
        for key in ("lr", "eps", "weight_decay"):
            if not group[key] >= 0.0:
                raise ValueError(f"{name}: invalid {key} {group[key]!r}; it must be >= 0")
        betas = group["betas"]
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"{name}: invalid betas {betas!r}; each must be in [0, 1)")

    def _update(self, p: np.ndarray, g: np.ndarray, group: dict[str, Any],
                state: dict[str, Any]) -> None:
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = np.zeros_like(p)
            state["exp_avg_sq"] = np.zeros_like(p)
        if group["amsgrad"] and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = np.zeros_like(p)
        state["step"] += 1
        step = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        vmax = state.get("max_exp_avg_sq") if group["amsgrad"] else None
        if _fused(p, g, m, v, vmax):
            _fused_update(p, g, m, v, vmax, group, self._decoupled, step)
            return
        scratch = self._scratch
        if wd != 0:
            if self._decoupled:
                np.multiply(p, 1 - lr * wd, out=p)
            else:
                d = scratch.get(0, p)
                np.multiply(p, wd, out=d)
                np.add(d, g, out=d, casting="same_kind")
                g = d
        t = scratch.get(1, p)
        np.multiply(m, beta1, out=m)
        np.multiply(g, 1 - beta1, out=t, casting="same_kind")
        np.add(m, t, out=m)
        np.multiply(v, beta2, out=v)
        np.multiply(g, g, out=t, casting="same_kind")
        np.multiply(t, 1 - beta2, out=t)
        np.add(v, t, out=v)
        if vmax is not None:
            np.maximum(vmax, v, out=vmax)
            v = vmax
        # t = sqrt(v_hat) + eps, then the step lr * m_hat / t
        np.sqrt(v, out=t)
        np.divide(t, math.sqrt(1 - beta2**step), out=t)
        np.add(t, eps, out=t)
        np.divide(m, t, out=t)
        np.multiply(t, lr / (1 - beta1**step), out=t)
        np.subtract(p, t, out=p)


_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _fused(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
           vmax: np.ndarray | None) -> bool:
    """Whether the one-pass kernel takes this update: arrays of one dtype (float32 or
    float64), all C-contiguous (the kernel walks them flat)."""
    dtype = p.dtype
    return (
        dtype in _FUSED_DTYPES
        and g.dtype == dtype and m.dtype == dtype and v.dtype == dtype
        and p.flags.c_contiguous and g.flags.c_contiguous
        and m.flags.c_contiguous and v.flags.c_contiguous
        and (vmax is None or (vmax.dtype == dtype and vmax.flags.c_contiguous))
    )


def _fused_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
                  vmax: np.ndarray | None, group: dict[str, Any], decoupled: bool,
                  step: int) -> None:
    """The update of ``_update`` in one pass (``_kernels/optim.py``), equal bit for bit:
    each Python scalar is rounded to the parameter's dtype as NumPy's ufuncs round it."""
    from memgrad._kernels.optim import adam_update

    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    beta1, beta2 = group["betas"]
    c = p.dtype.type
    if wd == 0:
        mode, decay = 0, c(0)
    else:
        mode, decay = (1, c(1 - lr * wd)) if decoupled else (2, c(wd))
    flat = p.reshape(-1)
    adam_update(flat, g.reshape(-1), m.reshape(-1), v.reshape(-1),
                flat if vmax is None else vmax.reshape(-1), mode, decay, c(beta1),
                c(1 - beta1), c(beta2), c(1 - beta2), vmax is not None,
                c(math.sqrt(1 - beta2**step)), c(eps), c(lr / (1 - beta1**step)))


class AdamW(Adam):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``: each step first
    multiplies the parameter by ``1 - lr * weight_decay``, then takes the Adam step on the
    plain gradient.

    Args:
        params: as for ``Adam``.
        lr: as for ``Adam``.
        betas: as for ``Adam``.
        eps: as for ``Adam``.
        amsgrad: as for ``Adam``.
        weight_decay: decoupled weight decay (default 0.01).

    Example:
        >>> import memgrad as mg
        >>> w = mg.ones(3, requires_grad=True)
        >>> opt = mg.optim.AdamW([w], lr=0.1, weight_decay=0.5)
        >>> w.grad = mg.zeros(3); opt.step()
        >>> w
        tensor([0.95, 0.95, 0.95], requires_grad=True)
    """

    _decoupled = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
