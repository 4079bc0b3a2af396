"""RMSprop, Adagrad and Adadelta, with PyTorch's update rules (NOTE [ In-place optimizer
steps ])."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from memgrad.optim.optimizer import Optimizer

__all__ = ["RMSprop", "Adagrad", "Adadelta"]


def _decayed(scratch: Any, p: np.ndarray, g: np.ndarray, wd: float) -> np.ndarray:
    """``g + wd * p`` in scratch slot 0 (the L2 penalty added to the gradient), or ``g``
    itself when ``wd`` is 0."""
    if wd == 0:
        return g
    d = scratch.get(0, p)
    np.multiply(p, wd, out=d)
    np.add(d, g, out=d, casting="same_kind")
    return d


def _check_nonnegative(name: str, group: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if not group[key] >= 0.0:
            raise ValueError(f"{name}: invalid {key} {group[key]!r}; it must be >= 0")


class RMSprop(Optimizer):
    """RMSprop, as ``torch.optim.RMSprop``. Per step, with gradient ``g``:

    ``g = g + weight_decay * p``; ``v = alpha * v + (1 - alpha) * g**2``; with
    ``centered=True`` also ``a = alpha * a + (1 - alpha) * g`` and ``d = sqrt(v - a**2) +
    eps``, else ``d = sqrt(v) + eps``; with momentum ``b = momentum * b + g / d`` and
    ``p = p - lr * b``, else ``p = p - lr * g / d``.

    Args:
        params: tensors or parameter groups (see ``Optimizer``).
        lr: learning rate.
        alpha: smoothing constant of the squared-gradient average.
        eps: added to the denominator.
        weight_decay: L2 penalty (added to the gradient).
        momentum: momentum factor.
        centered: normalise by the estimated variance instead of the second moment.

    Example:
        >>> import memgrad as mg
        >>> w = mg.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = mg.optim.RMSprop([w], lr=0.05)
        >>> for _ in range(100):
        ...     opt.zero_grad()
        ...     (w * w).sum().backward()
        ...     opt.step()
        >>> bool(w.abs().max() < 0.1)
        True
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
    ) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        _check_nonnegative("RMSprop", group, ("lr", "alpha", "eps", "weight_decay", "momentum"))

    def _update(self, p: np.ndarray, g: np.ndarray, group: dict[str, Any],
                state: dict[str, Any]) -> None:
        lr, alpha, eps, wd = group["lr"], group["alpha"], group["eps"], group["weight_decay"]
        momentum = group["momentum"]
        if not state:
            state["step"] = 0
            state["square_avg"] = np.zeros_like(p)
        if momentum > 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = np.zeros_like(p)
        if group["centered"] and "grad_avg" not in state:
            state["grad_avg"] = np.zeros_like(p)
        state["step"] += 1
        scratch = self._scratch
        g = _decayed(scratch, p, g, wd)
        v = state["square_avg"]
        t = scratch.get(1, p)
        np.multiply(v, alpha, out=v)
        np.multiply(g, g, out=t, casting="same_kind")
        np.multiply(t, 1 - alpha, out=t)
        np.add(v, t, out=v)
        if group["centered"]:
            a = state["grad_avg"]
            np.multiply(a, alpha, out=a)
            np.multiply(g, 1 - alpha, out=t, casting="same_kind")
            np.add(a, t, out=a)
            np.multiply(a, a, out=t)
            np.subtract(v, t, out=t)
            np.sqrt(t, out=t)
        else:
            np.sqrt(v, out=t)
        np.add(t, eps, out=t)
        np.divide(g, t, out=t, casting="same_kind")  # t = g / d
        if momentum > 0:
            buf = state["momentum_buffer"]
            np.multiply(buf, momentum, out=buf)
            np.add(buf, t, out=buf)
            t = buf
        step = scratch.get(2, p)
        np.multiply(t, lr, out=step)
        np.subtract(p, step, out=p)


class Adagrad(Optimizer):
    """Adagrad, as ``torch.optim.Adagrad``. Per step ``t`` (from 1), with gradient ``g``:

    ``g = g + weight_decay * p``; ``s = s + g**2`` (``s`` starts at
    ``initial_accumulator_value``); ``p = p - clr * g / (sqrt(s) + eps)`` with
    ``clr = lr / (1 + (t - 1) * lr_decay)``.

    Args:
        params: tensors or parameter groups (see ``Optimizer``).
        lr: learning rate.
        lr_decay: learning-rate decay per step.
        weight_decay: L2 penalty (added to the gradient).
        initial_accumulator_value: the starting value of the sum of squares.
        eps: added to the denominator.

    Example:
        >>> import memgrad as mg
        >>> w = mg.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = mg.optim.Adagrad([w], lr=0.5)
        >>> for _ in range(100):
        ...     opt.zero_grad()
        ...     (w * w).sum().backward()
        ...     opt.step()
        >>> bool(w.abs().max() < 0.1)
        True
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
    ) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        _check_nonnegative("Adagrad", group, ("lr", "lr_decay", "weight_decay",
                                              "initial_accumulator_value", "eps"))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """As ``Optimizer.add_param_group``; the state of each parameter (``step`` 0 and the
        accumulator) is made here, as in PyTorch, so it is in ``state_dict()`` at once."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self.state[p] = {"step": 0, "sum": np.full_like(
                p._data, group["initial_accumulator_value"])}

    def _update(self, p: np.ndarray, g: np.ndarray, group: dict[str, Any],
                state: dict[str, Any]) -> None:
        state["step"] += 1
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        scratch = self._scratch
        wd = group["weight_decay"]
        g = _decayed(scratch, p, g, wd)
        s = state["sum"]
        t = scratch.get(1, p)
        np.multiply(g, g, out=t, casting="same_kind")
        np.add(s, t, out=s)
        np.sqrt(s, out=t)
        np.add(t, group["eps"], out=t)
        np.divide(g, t, out=t, casting="same_kind")
        np.multiply(t, clr, out=t)
        np.subtract(p, t, out=p)


class Adadelta(Optimizer):
    """Adadelta, as ``torch.optim.Adadelta``. Per step, with gradient ``g``:

    ``g = g + weight_decay * p``; ``v = rho * v + (1 - rho) * g**2``;
    ``d = sqrt(u + eps) / sqrt(v + eps) * g``; ``u = rho * u + (1 - rho) * d**2``;
    ``p = p - lr * d`` (``v`` and ``u`` start at zero).

    Args:
        params: tensors or parameter groups (see ``Optimizer``).
        lr: scales the step (1.0, as in PyTorch and the method's paper).
        rho: smoothing constant of both running averages.
        eps: added inside both square roots.
        weight_decay: L2 penalty (added to the gradient).

    Example:
        >>> import memgrad as mg
        >>> w = mg.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = mg.optim.Adadelta([w], lr=10.0)
        >>> for _ in range(200):
        ...     opt.zero_grad()
        ...     (w * w).sum().backward()
        ...     opt.step()
        >>> bool(w.abs().max() < 0.1)
        True
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        _check_nonnegative("Adadelta", group, ("lr", "eps", "weight_decay"))
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Adadelta: invalid rho {group['rho']!r}; it must be in [0, 1]")

    def _update(self, p: np.ndarray, g: np.ndarray, group: dict[str, Any],
                state: dict[str, Any]) -> None:
        lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            state["square_avg"] = np.zeros_like(p)
            state["acc_delta"] = np.zeros_like(p)
        state["step"] += 1
        scratch = self._scratch
        g = _decayed(scratch, p, g, wd)
        v, u = state["square_avg"], state["acc_delta"]
        t = scratch.get(1, p)
        np.multiply(v, rho, out=v)
        np.multiply(g, g, out=t, casting="same_kind")
        np.multiply(t, 1 - rho, out=t)
        np.add(v, t, out=v)
        delta = scratch.get(2, p)
        np.add(u, eps, out=delta)
        np.sqrt(delta, out=delta)
        np.add(v, eps, out=t)
        np.sqrt(t, out=t)
        np.divide(delta, t, out=delta)
        np.multiply(delta, g, out=delta, casting="same_kind")  # sqrt(u + eps) / sqrt(v + eps) * g
        np.multiply(u, rho, out=u)
        np.multiply(delta, delta, out=t)
        np.multiply(t, 1 - rho, out=t)
        np.add(u, t, out=u)
        np.multiply(delta, lr, out=delta)
        np.subtract(p, delta, out=p)
