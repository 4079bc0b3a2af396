"""Adam and AdamW, with PyTorch's update rules (bias-corrected moments, optional AMSGrad;
AdamW decays the weights directly instead of adding an L2 term to the gradient)."""

from __future__ import annotations

import functools
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
        m, v, vmax = _moments(p, group, state)
        if _fused(p, g, m, v, vmax):
            _fused_update(p, g, m, v, vmax, group, self._decoupled, state["step"])
        else:
            self._apply(p, g, m, v, vmax, group, state["step"])

    def _update_group(self, params: list[Any], group: dict[str, Any]) -> None:
        # NOTE [ One call for a group's Adam steps ]
        # The fused update of one parameter is a compiled call with some 4.5 us of Python
        # around it (its fourteen scalars, the flat views, the dispatch): half a millisecond
        # a step for a small transformer's 54 parameters, more than their arithmetic. Here
        # the parameters the fused kernel takes are updated by one compiled call
        # (memgrad/_kernels/multi_tensor.py), a row of addresses and one of scalars each,
        # the scalars made once per dtype and step count; each parameter's update is
        # adam_update's, so the values are those of one call a parameter, bit for bit.
        many = _multi_tensor()
        if many is None or len(params) < 2:
            super()._update_group(params, group)
            return
        buckets: dict[Any, tuple[list, list]] = {}
        coefs: dict[tuple, np.ndarray] = {}
        for t in params:
            p, g = t._data, t.grad._data
            state = self.state.setdefault(t, {})
            m, v, vmax = _moments(p, group, state)
            step = state["step"]
            if _fused(p, g, m, v, vmax) and p.flags.writeable:
                key = (p.dtype, step)
                row = coefs.get(key)
                if row is None:
                    row = coefs[key] = _coefs(group, self._decoupled, step, p.dtype)
                rows, scalars = buckets.setdefault(p.dtype, ([], []))
                rows.append(many.param_row(p, g, m, v, p if vmax is None else vmax))
                scalars.append(row)
            else:
                self._apply(p, g, m, v, vmax, group, step)
            t._bump_version()
        mode = _decay_mode(group, self._decoupled)
        for rows, scalars in buckets.values():
            many.adam_update_params(np.array(rows, np.int64), np.stack(scalars), mode,
                                    bool(group["amsgrad"]))

    def _apply(self, p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
               vmax: np.ndarray | None, group: dict[str, Any], step: int) -> None:
        """The update of ``p`` in NumPy operations (arrays the fused kernel does not take)."""
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
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
    """The update of ``_apply`` in one pass (``_kernels/optim.py``), equal bit for bit:
    each Python scalar is rounded to the parameter's dtype as NumPy's ufuncs round it."""
    from memgrad._kernels.optim import adam_update

    decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, bias2_sqrt, step_size = \
        _coefs(group, decoupled, step, p.dtype)
    flat = p.reshape(-1)
    adam_update(flat, g.reshape(-1), m.reshape(-1), v.reshape(-1),
                flat if vmax is None else vmax.reshape(-1), _decay_mode(group, decoupled),
                decay, beta1, one_minus_beta1, beta2, one_minus_beta2, vmax is not None,
                bias2_sqrt, eps, step_size)


def _moments(p: np.ndarray, group: dict[str, Any], state: dict[str, Any]) -> tuple:
    """``(m, v, vmax)`` of ``p``'s state (made on its first step; ``vmax`` None without
    AMSGrad), its step counted."""
    if not state:
        state["step"] = 0
        state["exp_avg"] = np.zeros_like(p)
        state["exp_avg_sq"] = np.zeros_like(p)
    if group["amsgrad"] and "max_exp_avg_sq" not in state:
        state["max_exp_avg_sq"] = np.zeros_like(p)
    state["step"] += 1
    vmax = state["max_exp_avg_sq"] if group["amsgrad"] else None
    return state["exp_avg"], state["exp_avg_sq"], vmax


def _decay_mode(group: dict[str, Any], decoupled: bool) -> int:
    """``adam_update``'s weight decay mode: 0 none, 1 decoupled (AdamW), 2 L2 (Adam)."""
    if group["weight_decay"] == 0:
        return 0
    return 1 if decoupled else 2


def _coefs(group: dict[str, Any], decoupled: bool, step: int, dtype: np.dtype) -> np.ndarray:
    """The scalars of ``adam_update`` for step ``step`` in ``dtype``, in the order of a row
    of ``multi_tensor.adam_update_params``'s coefs: each rounded once from its Python float,
    as NumPy's ufuncs round a Python scalar for an array of that dtype."""
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    beta1, beta2 = group["betas"]
    mode = _decay_mode(group, decoupled)
    decay = 0.0 if mode == 0 else (1 - lr * wd if mode == 1 else wd)
    return np.array([decay, beta1, 1 - beta1, beta2, 1 - beta2, eps,
                     math.sqrt(1 - beta2**step), lr / (1 - beta1**step)], dtype)


@functools.cache
def _multi_tensor() -> Any:
    """``memgrad._kernels.multi_tensor``, or None with ``NUMBA_DISABLE_JIT=1`` (it calls the
    kernels on raw addresses, which needs the compiler); imported on first use."""
    from numba import config

    if config.DISABLE_JIT:
        return None
    from memgrad._kernels import multi_tensor

    return multi_tensor


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
