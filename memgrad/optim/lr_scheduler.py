"""Learning-rate schedulers, as in ``torch.optim.lr_scheduler``: ``LambdaLR``, ``StepLR``,
``MultiStepLR``, ``ExponentialLR``, ``CosineAnnealingLR``, ``LinearLR``, ``SequentialLR``,
``OneCycleLR``, and ``ReduceLROnPlateau``, which follows a metric instead of a schedule.

NOTE [ Chainable schedules ]
As in PyTorch, each ``step()`` computes the new rate of every parameter group from the
rate the group has now (``get_lr``, the recursive form), not from a formula of the step
number alone, so that two schedulers on one optimizer compose (their factors multiply). The
closed forms (``_get_closed_form_lr``) give the same values when one scheduler acts alone;
``SequentialLR`` uses them to restart a scheduler at step 0. Rates are per parameter group:
each group starts from its own ``initial_lr`` (set once, from its ``lr``, by the first
scheduler made on the optimizer).
"""

from __future__ import annotations

import math
import types
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from memgrad.optim.optimizer import Optimizer

__all__ = [
    "LRScheduler",
    "LambdaLR",
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "LinearLR",
    "SequentialLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
]


class LRScheduler:
    """Base class of the schedulers: sets each group's ``lr`` on every ``step()``.

    Making a scheduler takes its first step (epoch 0), so the optimizer's rates are the
    schedule's first values right away; call ``scheduler.step()`` after each
    ``optimizer.step()``.

    Args:
        optimizer: the optimizer whose ``param_groups`` get the rates.
        last_epoch: the index of the last step taken; -1 starts a new schedule (other
            values resume one and need ``initial_lr`` in every group).

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        >>> for _ in range(4):
        ...     opt.step(); sched.step()
        >>> sched.get_last_lr()
        [0.25]
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"{type(self).__name__}: {type(optimizer).__name__} is not an Optimizer"
            )
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                        f"an optimizer (last_epoch={last_epoch}); load the optimizer's "
                        "state_dict first, or start with last_epoch=-1"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        # the constructor's step: a schedule resumed with last_epoch=k keeps the rates it
        # finds rather than moving one step past them (``_is_initial``, as in PyTorch)
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The rates of the step ``last_epoch`` (see NOTE [ Chainable schedules ])."""
        raise NotImplementedError(f"{type(self).__name__} does not define get_lr")

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step()`` set, one per parameter group."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule one step and set the groups' rates. Passing ``epoch`` jumps
        to that step (deprecated, as in PyTorch: it uses the closed form where there is
        one)."""
        if epoch is not None:
            warnings.warn(
                f"{type(self).__name__}.step(epoch) is deprecated, as in PyTorch; call step() "
                "once per optimizer step",
                UserWarning,
                stacklevel=2,
            )
        self._step(epoch)

    def _step(self, epoch: int | None) -> None:
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state (every attribute but the optimizer), for
        ``load_state_dict``.

        Example:
            >>> import memgrad as mg
            >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
            >>> sched = mg.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
            >>> sched.step()
            >>> again = mg.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
            >>> again.load_state_dict(sched.state_dict())
            >>> again.last_epoch, again.gamma
            (1, 0.5)
        """
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()``."""
        if not isinstance(state_dict, dict):
            raise TypeError(
                f"{type(self).__name__}.load_state_dict: expected the dict returned by "
                f"state_dict(), got {type(state_dict).__name__}"
            )
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(step)``; ``lr_lambda`` is one function or one per
    parameter group.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=0.1)
        >>> sched = mg.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (step + 1))
        >>> sched.step(); sched.step()
        >>> round(sched.get_last_lr()[0], 6)
        0.033333
    """

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: expected {n} lr_lambdas (one per parameter group), "
                                 f"got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        """As ``LRScheduler.state_dict``; of the lambdas only callable objects' attributes
        are kept (functions are not state), as in PyTorch."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(f, types.FunctionType) else dict(vars(f))
            if hasattr(f, "__dict__") else None
            for f in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()``; the lambdas stay this scheduler's own."""
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas", [None] * len(self.lr_lambdas))
        super().load_state_dict(state)
        for f, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                vars(f).update(saved)


class StepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (step // step_size)``.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
        >>> lrs = []
        >>> for _ in range(7):
        ...     lrs.append(round(sched.get_last_lr()[0], 6)); sched.step()
        >>> lrs
        [1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.01]
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive int, got {step_size!r}")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (number of milestones <= step)``.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.MultiStepLR(opt, milestones=[1, 3], gamma=0.5)
        >>> lrs = []
        >>> for _ in range(4):
        ...     lrs.append(sched.get_last_lr()[0]); sched.step()
        >>> lrs
        [1.0, 0.5, 0.5, 0.25]
    """

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        ms = list(milestones)
        if any(isinstance(m, bool) or not isinstance(m, int) for m in ms):
            raise TypeError(f"MultiStepLR: milestones must be ints, got {milestones!r}")
        self.milestones = Counter(ms)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch not in self.milestones:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch] for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        ms = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect_right(ms, self.last_epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``lr = initial_lr * gamma ** step``.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
        >>> sched.step(); sched.step()
        >>> sched.get_last_lr()
        [0.25]
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2``
    (continuing as a cosine past ``T_max``, as PyTorch's recursive form does).

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
        >>> sched.step(); sched.step()
        >>> round(sched.get_last_lr()[0], 6)
        0.5
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        if isinstance(T_max, bool) or not isinstance(T_max, int) or T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be a positive int, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        t, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return [group["lr"] for group in groups]
        if self._step_count == 1 and t > 0:
            return [lo + (base - lo) * (1 + math.cos(t * math.pi / T)) / 2
                    for base in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [group["lr"] + (base - lo) * (1 - math.cos(math.pi / T)) / 2
                    for base, group in zip(self.base_lrs, groups)]
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [ratio * (group["lr"] - lo) + lo for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        t, T, lo = self.last_epoch, self.T_max, self.eta_min
        return [lo + (base - lo) * (1 + math.cos(math.pi * t / T)) / 2 for base in self.base_lrs]


class LinearLR(LRScheduler):
    """The factor goes linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` steps, then stays: ``lr = initial_lr * (start_factor + (end_factor -
    start_factor) * min(step, total_iters) / total_iters)``.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3)
        >>> lrs = []
        >>> for _ in range(5):
        ...     lrs.append(round(sched.get_last_lr()[0], 6)); sched.step()
        >>> lrs
        [0.25, 0.5, 0.75, 1.0, 1.0]
    """

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 < start_factor <= 1:
            raise ValueError(
                f"LinearLR: start_factor must be greater than 0 and at most 1, got {start_factor}"
            )
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: end_factor must be between 0 and 1, got {end_factor}")
        if isinstance(total_iters, bool) or not isinstance(total_iters, int) or total_iters <= 0:
            raise ValueError(f"LinearLR: total_iters must be a positive int, got {total_iters!r}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        t, a, b = self.last_epoch, self.start_factor, self.end_factor
        if t == 0:
            return [group["lr"] * a for group in groups]
        if self._is_initial or t > self.total_iters:
            return [group["lr"] for group in groups]
        factor = 1.0 + (b - a) / (self.total_iters * a + (t - 1) * (b - a))
        return [group["lr"] * factor for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        a, b = self.start_factor, self.end_factor
        frac = min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * (a + (b - a) * frac) for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another: the i-th from step ``milestones[i - 1]`` on,
    restarted at its step 0 there.

    Example:
        >>> import memgrad as mg
        >>> sched_mod = mg.optim.lr_scheduler
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> warm = sched_mod.LinearLR(opt, start_factor=0.5, total_iters=2)
        >>> decay = sched_mod.ExponentialLR(opt, gamma=0.5)
        >>> sched = sched_mod.SequentialLR(opt, [warm, decay], milestones=[2])
        >>> lrs = []
        >>> for _ in range(5):
        ...     lrs.append(sched.get_last_lr()[0]); sched.step()
        >>> lrs
        [0.5, 0.75, 1.0, 0.5, 0.25]
    """

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1) -> None:
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("SequentialLR: expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler) or isinstance(s, SequentialLR):
                raise TypeError(f"SequentialLR: schedulers[{i}] must be a scheduler (not a "
                                f"SequentialLR), got {type(s).__name__}")
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"SequentialLR: schedulers[{i}] is a ReduceLROnPlateau, whose "
                                 "step() needs the metric; step it on its own instead")
            if s.optimizer is not optimizer:
                raise ValueError(
                    f"SequentialLR: schedulers[{i}] belongs to another optimizer than the one "
                    "given; every scheduler must act on the same optimizer"
                )
        milestones = list(milestones)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: expects one milestone fewer than schedulers, got "
                f"{len(schedulers)} schedulers and {len(milestones)} milestones"
            )
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for s in schedulers:  # undo the step each took when it was made
            s.last_epoch -= 1
        first = schedulers[bisect_right(milestones, 0)]  # the one that runs at step 0
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self, epoch: int | None = None) -> None:
        """Advance one step, switching schedulers at the milestones."""
        if epoch is not None:
            raise TypeError("SequentialLR.step() takes no epoch")
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._step(0)
        else:
            scheduler._step(None)
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """This scheduler's state, with each inner scheduler's ``state_dict()``."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()``, the inner schedulers' too."""
        state = dict(state_dict)
        inner = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, saved in zip(self._schedulers, inner):
            s.load_state_dict(saved)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the rate rises from ``max_lr / div_factor`` to ``max_lr`` over the
    first ``pct_start`` of ``total_steps``, then falls to ``initial_lr / final_div_factor``
    (``three_phase=True``: back to the initial rate first, then down); with
    ``cycle_momentum`` the momentum (or Adam's beta1) moves inversely between
    ``max_momentum`` and ``base_momentum``. ``anneal_strategy`` is ``"cos"`` or
    ``"linear"``; ``max_lr`` may be one value per group.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
        >>> sched = mg.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10)
        >>> round(sched.get_last_lr()[0], 6), opt.param_groups[0]["momentum"]
        (0.04, 0.95)
        >>> for _ in range(2):
        ...     opt.step(); sched.step()
        >>> round(sched.get_last_lr()[0], 6), round(opt.param_groups[0]["momentum"], 6)
        (1.0, 0.85)
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        self.optimizer = optimizer
        self.total_steps = self._total_steps(total_steps, epochs, steps_per_epoch)
        if not 0 <= pct_start <= 1 or isinstance(pct_start, bool):
            raise ValueError(f"OneCycleLR: pct_start must be a float in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.anneal_strategy = anneal_strategy
        p = float(pct_start * self.total_steps)
        if three_phase:
            self._schedule_phases = [
                dict(end_step=p - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=2 * p - 2, start_lr="max_lr", end_lr="initial_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
                dict(end_step=self.total_steps - 1, start_lr="initial_lr", end_lr="min_lr",
                     start_momentum="max_momentum", end_momentum="max_momentum"),
            ]
        else:
            self._schedule_phases = [
                dict(end_step=p - 1, start_lr="initial_lr", end_lr="max_lr",
                     start_momentum="max_momentum", end_momentum="base_momentum"),
                dict(end_step=self.total_steps - 1, start_lr="max_lr", end_lr="min_lr",
                     start_momentum="base_momentum", end_momentum="max_momentum"),
            ]
        groups = optimizer.param_groups
        max_lrs = self._per_group("max_lr", max_lr)
        if last_epoch == -1:
            for lr, group in zip(max_lrs, groups):
                group["initial_lr"] = lr / div_factor
                group["max_lr"] = lr
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(
                    "OneCycleLR: optimizer must support momentum or betas with "
                    "`cycle_momentum` enabled; pass cycle_momentum=False"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                pairs = zip(self._per_group("max_momentum", max_momentum),
                            self._per_group("base_momentum", base_momentum), groups)
                for m_hi, m_lo, group in pairs:
                    self._set_momentum(group, m_hi)
                    group["max_momentum"] = m_hi
                    group["base_momentum"] = m_lo
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _total_steps(total_steps: Any, epochs: Any, steps_per_epoch: Any) -> int:
        def positive(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v > 0

        if total_steps is not None:
            if not positive(total_steps):
                raise ValueError(
                    f"OneCycleLR: expected a positive int total_steps, got {total_steps!r}"
                )
            return total_steps
        if epochs is None or steps_per_epoch is None:
            raise ValueError(
                "OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)"
            )
        if not positive(epochs) or not positive(steps_per_epoch):
            raise ValueError(
                f"OneCycleLR: epochs and steps_per_epoch must be positive ints, got {epochs!r} "
                f"and {steps_per_epoch!r}"
            )
        return epochs * steps_per_epoch

    def _per_group(self, name: str, value: Any) -> list[float]:
        n = len(self.optimizer.param_groups)
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(f"OneCycleLR: expected {n} values for {name}, got {len(value)}")
            return list(value)
        return [value] * n

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"OneCycleLR: tried to step {step} times; the specified number of total steps "
                f"is {self.total_steps}"
            )
        lrs = []
        last = len(self._schedule_phases) - 1
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step <= end_step or i == last:
                    pct = (step - start_step) / (end_step - start_step)
                    lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]],
                                            pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(
                            group[phase["start_momentum"]], group[phase["end_momentum"]], pct))
                    break
                start_step = end_step
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply every group's rate by ``factor`` when a metric has stopped improving for
    more than ``patience`` steps, as PyTorch's: ``step(metric)`` once per evaluation.

    Args:
        optimizer: the optimizer whose rates are reduced.
        mode: ``"min"`` (lower is better, e.g. a loss) or ``"max"``.
        factor: the multiplier of a reduction, in ``[0, 1)``.
        patience: the number of steps without improvement that are tolerated.
        threshold: the least change that counts as an improvement.
        threshold_mode: ``"rel"`` (relative to the best value) or ``"abs"``.
        cooldown: steps after a reduction during which no further one happens.
        min_lr: the lowest rate, one number or one per parameter group.
        eps: a reduction smaller than this is skipped.

    Example:
        >>> import memgrad as mg
        >>> opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
        >>> sched = mg.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
        >>> for loss in [3.0, 2.0, 2.0, 2.0]:
        ...     sched.step(loss)
        >>> sched.get_last_lr()
        [0.5]
    """

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | Sequence[float] = 0.0,
        eps: float = 1e-8,
    ) -> None:
        api = "ReduceLROnPlateau"
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{api}: {type(optimizer).__name__} is not an Optimizer")
        if not 0.0 <= factor < 1.0:
            raise ValueError(f"{api}: factor must be in [0, 1), got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"{api}: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"{api}: threshold_mode must be 'rel' or 'abs', got "
                             f"{threshold_mode!r}")
        groups = optimizer.param_groups
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise ValueError(f"{api}: expected {len(groups)} min_lr values (one per "
                                 f"parameter group), got {len(min_lr)}")
            self.min_lrs = [float(v) for v in min_lr]
            self.default_min_lr: float | None = None
        else:
            self.min_lrs = [float(min_lr)] * len(groups)
            self.default_min_lr = float(min_lr)
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, float(factor), int(patience)
        self.threshold, self.threshold_mode = float(threshold), threshold_mode
        self.cooldown, self.eps = int(cooldown), float(eps)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in groups]

    def step(self, metrics: float, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record the metric of one evaluation and reduce the rates if it has not improved
        for more than ``patience`` steps."""
        if epoch is not None:
            warnings.warn("ReduceLROnPlateau.step(metrics, epoch) is deprecated, as in "
                          "PyTorch; call step(metrics)", UserWarning, stacklevel=2)
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self._better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _better(self, current: float) -> bool:
        if self.threshold_mode == "rel":
            scale = 1.0 - self.threshold if self.mode == "min" else 1.0 + self.threshold
            bound = self.best * scale
        else:
            bound = self.best - self.threshold if self.mode == "min" else self.best + self.threshold
        return current < bound if self.mode == "min" else current > bound

    def _reduce(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):  # a group added since (add_param_group)
            if self.default_min_lr is None:
                raise RuntimeError(
                    f"ReduceLROnPlateau: the optimizer has {len(groups)} parameter groups, "
                    f"{len(self.min_lrs)} when the scheduler was made with a min_lr per group; "
                    "set min_lrs to one value per group"
                )
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, floor in zip(groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, floor)
            if old - new > self.eps:
                group["lr"] = new
