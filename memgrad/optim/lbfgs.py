"""L-BFGS, as ``torch.optim.LBFGS``: a quasi-Newton method that keeps the last
``history_size`` steps and gradient changes, and calls a closure as often as it needs.

NOTE [ L-BFGS as PyTorch runs it ]
One ``step(closure)`` runs up to ``max_iter`` iterations on all parameters seen as one flat
vector, with PyTorch's rules, so that its iterates are PyTorch's: the first direction is
the negative gradient with step ``min(1, 1 / |g|_1) * lr``, later ones come from the
two-loop recursion over the kept pairs (a pair is kept only when ``y . s > 1e-10``; the
initial Hessian guess is ``y . s / y . y`` of the newest pair), with step ``lr``. Without a
line search the step is taken as it is; with ``line_search_fn="strong_wolfe"`` it is
chosen by a bracketing and zooming search with cubic interpolation (``c1 = 1e-4``,
``c2 = 0.9``, within the closure calls ``max_eval`` leaves). Iterations stop early when the
largest gradient entry is at most ``tolerance_grad``, the directional derivative is above
``-tolerance_change``, the step or the change of the loss is below ``tolerance_change``, or
``max_eval`` closure calls were made. The history is kept between ``step`` calls.

The arithmetic is NumPy's on arrays of the parameters' dtype, in PyTorch's order of
operations; the last bits can still differ from PyTorch's (its fused multiply-adds), which
a long run without a line search on a badly conditioned problem amplifies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import enable_grad
from memgrad.optim.optimizer import Optimizer
from memgrad.tensor import Tensor

__all__ = ["LBFGS"]

_C1, _C2 = 1e-4, 0.9


def _cubic_min(x1: Any, f1: Any, g1: Any, x2: Any, f2: Any, g2: Any,
               bounds: tuple[Any, Any] | None = None) -> Any:
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2,
    clamped to ``bounds`` (the interval between x1 and x2 by default); the middle of the
    bounds when the cubic has no minimum."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 ** 2 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = np.sqrt(disc)
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)


class _Point:
    """One evaluated step along the search direction: step, loss, gradient, slope."""

    __slots__ = ("t", "f", "g", "gtd")

    def __init__(self, t: Any, f: Any, g: np.ndarray, gtd: Any) -> None:
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


_LINE_SEARCH_TOLERANCE = 1e-9  # the zoom's smallest bracket: PyTorch's, not the group's


def _strong_wolfe(evaluate: Callable[[Any], tuple[float, np.ndarray]], t: Any, d: np.ndarray,
                  f: float, g: np.ndarray, gtd: Any, tolerance_change: float, max_ls: int
                  ) -> tuple[float, np.ndarray, Any, int]:
    """A step along ``d`` that meets the strong Wolfe conditions: bracket one, then zoom
    in, with at most ``max_ls`` evaluations after the first; returns the step's loss,
    gradient and length and how many evaluations it took."""
    d_norm = np.abs(d).max()
    f_new, g_new = evaluate(t)
    evals = 1
    new = _Point(t, f_new, g_new, g_new.dot(d))
    prev = _Point(0, f, g.copy(), gtd)
    bracket: list[_Point] = []
    done = False
    tries = 0
    while tries < max_ls:
        if new.f > f + _C1 * new.t * gtd or (tries > 1 and new.f >= prev.f):
            bracket = [prev, _Point(new.t, new.f, new.g.copy(), new.gtd)]
            break
        if abs(new.gtd) <= -_C2 * gtd:
            bracket, done = [new], True
            break
        if new.gtd >= 0:
            bracket = [prev, _Point(new.t, new.f, new.g.copy(), new.gtd)]
            break
        # extrapolate: a longer step, between 1.01 and 10 times this one
        step = _cubic_min(prev.t, prev.f, prev.gtd, new.t, new.f, new.gtd,
                          bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev = _Point(new.t, new.f, new.g.copy(), new.gtd)
        f_new, g_new = evaluate(step)
        evals += 1
        new = _Point(step, f_new, g_new, g_new.dot(d))
        tries += 1
    if tries == max_ls:
        bracket = [_Point(0, f, g, None), _Point(new.t, new.f, new.g, None)]
    low, high = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
    stuck = False
    while not done and tries < max_ls:
        a, b = bracket
        if abs(b.t - a.t) * d_norm < tolerance_change:
            break
        step = _cubic_min(a.t, a.f, a.gtd, b.t, b.f, b.gtd)
        top, bottom = max(a.t, b.t), min(a.t, b.t)
        eps = 0.1 * (top - bottom)
        if min(top - step, step - bottom) < eps:  # too close to an end of the bracket
            if stuck or step >= top or step <= bottom:
                step = top - eps if abs(step - top) < abs(step - bottom) else bottom + eps
                stuck = False
            else:
                stuck = True
        else:
            stuck = False
        f_new, g_new = evaluate(step)
        evals += 1
        tries += 1
        point = _Point(step, f_new, g_new.copy(), g_new.dot(d))
        if point.f > f + _C1 * step * gtd or point.f >= bracket[low].f:
            bracket[high] = point
            low, high = (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)
        else:
            if abs(point.gtd) <= -_C2 * gtd:
                done = True
            elif point.gtd * (bracket[high].t - bracket[low].t) >= 0:
                bracket[high] = bracket[low]
            bracket[low] = point
    best = bracket[low]
    return best.f, best.g, best.t, evals


class LBFGS(Optimizer):
    """L-BFGS, as ``torch.optim.LBFGS`` (NOTE [ L-BFGS as PyTorch runs it ]): each
    ``step(closure)`` runs up to ``max_iter`` iterations, calling ``closure`` (which clears
    the gradients, computes the loss, calls ``backward()`` and returns the loss) as often as
    they need, and returns the first loss.

    Args:
        params: the tensors to optimize (one parameter group).
        lr: learning rate (the step length of every iteration after the first).
        max_iter: iterations per ``step``.
        max_eval: closure calls per ``step`` (default ``max_iter * 5 // 4``).
        tolerance_grad: stop when no gradient entry is larger in magnitude.
        tolerance_change: stop when the step, or the change of the loss, is smaller.
        history_size: how many past steps the curvature estimate keeps.
        line_search_fn: None (take the step as it is) or ``"strong_wolfe"``.

    Example:
        >>> import memgrad as mg
        >>> w = mg.tensor([1.5, -0.5], dtype=mg.float64, requires_grad=True)
        >>> opt = mg.optim.LBFGS([w], line_search_fn="strong_wolfe")
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = ((w - mg.tensor([1.0, 2.0], dtype=mg.float64)) ** 2).sum()
        ...     loss.backward()
        ...     return loss
        >>> _ = opt.step(closure)
        >>> [round(v, 6) for v in w.tolist()]
        [1.0, 2.0]
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter "
                             "groups); pass one list of tensors")
        self._params: list[Tensor] = self.param_groups[0]["params"]

    def _check_group(self, group: dict[str, Any]) -> None:
        if not group["lr"] >= 0.0:
            raise ValueError(f"LBFGS: invalid lr {group['lr']!r}; it must be >= 0")
        for key in ("max_iter", "max_eval", "history_size"):
            if not isinstance(group[key], int) or isinstance(group[key], bool) or group[key] < 1:
                raise ValueError(f"LBFGS: {key} must be a positive int, got {group[key]!r}")
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                             f"{group['line_search_fn']!r}")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Refused after construction: LBFGS has one parameter group."""
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter "
                             "groups); pass one list of tensors")
        super().add_param_group(param_group)

    def _flat_grad(self) -> np.ndarray:
        parts = [np.zeros(p._data.size, dtype=p.dtype) if p.grad is None
                 else p.grad._data.reshape(-1) for p in self._params]
        return np.concatenate(parts) if parts else np.zeros(0)

    def _move(self, t: Any, d: np.ndarray) -> None:
        """Each parameter += t * its part of ``d``, in place."""
        at = 0
        for p in self._params:
            n = p._data.size
            p._data += (d[at:at + n] * t).reshape(p.shape).astype(p.dtype, copy=False)
            p._bump_version()
            at += n

    def _restore(self, saved: list[np.ndarray]) -> None:
        for p, data in zip(self._params, saved):
            p._data[...] = data
            p._bump_version()

    def _evaluate(self, closure: Callable[[], Any]) -> float:
        with enable_grad():
            return float(closure())

    def _direction(self, state: dict[str, Any], g: np.ndarray, history_size: int) -> None:
        """The next search direction ``state["d"]`` from the gradient ``g`` and the pairs
        kept (updated first with the last step): the two-loop recursion."""
        y = g - state["prev_flat_grad"]
        s = state["d"] * state["t"]
        ys = y.dot(s)
        dirs, steps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        if ys > 1e-10:
            if len(dirs) == history_size:
                dirs.pop(0)
                steps.pop(0)
                ro.pop(0)
            dirs.append(y)
            steps.append(s)
            ro.append(1.0 / ys)
            state["H_diag"] = ys / y.dot(y)
        alpha = [None] * len(dirs)
        q = -g
        for i in range(len(dirs) - 1, -1, -1):
            alpha[i] = steps[i].dot(q) * ro[i]
            q = q - dirs[i] * alpha[i]
        r = q * state["H_diag"]
        for i in range(len(dirs)):
            beta = dirs[i].dot(r) * ro[i]
            r = r + steps[i] * (alpha[i] - beta)
        state["d"] = r

    def _search(self, closure: Callable[[], Any], t: Any, d: np.ndarray, loss: float,
                g: np.ndarray, gtd: Any, max_ls: int) -> tuple[float, np.ndarray, Any, int]:
        """The strong Wolfe line search along ``d`` from the parameters as they are (each
        trial step is evaluated and undone), with its own tolerance, 1e-9, whatever the
        group's ``tolerance_change`` (as PyTorch's)."""
        start = [p._data.copy() for p in self._params]

        def along(step: Any) -> tuple[float, np.ndarray]:
            self._move(step, d)
            f = self._evaluate(closure)
            grad = self._flat_grad()
            self._restore(start)
            return f, grad

        return _strong_wolfe(along, t, d, loss, g, gtd, _LINE_SEARCH_TOLERANCE, max_ls)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run up to ``max_iter`` iterations (NOTE [ L-BFGS as PyTorch runs it ]) and
        return the loss ``closure`` gave before the first.

        Example:
            >>> import memgrad as mg
            >>> w = mg.tensor([3.0], requires_grad=True)
            >>> opt = mg.optim.LBFGS([w])
            >>> def closure():
            ...     opt.zero_grad()
            ...     loss = (w * w).sum()
            ...     loss.backward()
            ...     return loss
            >>> opt.step(closure).item()
            9.0
        """
        if closure is None:
            raise RuntimeError("LBFGS.step: L-BFGS needs a closure that clears the gradients, "
                               "computes the loss, calls backward() and returns the loss; "
                               "pass opt.step(closure)")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            first = closure()
        loss = float(first)
        evals = 1
        state["func_evals"] += 1
        g = self._flat_grad()
        if np.abs(g).max(initial=0) <= tol_grad:
            return first
        done = 0
        while done < max_iter:
            done += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                state.update(d=-g, old_dirs=[], old_stps=[], ro=[], H_diag=1)
            else:
                self._direction(state, g, group["history_size"])
            d = state["d"]
            state["prev_flat_grad"] = g.copy()
            prev_loss = state["prev_loss"] = loss
            t = state["t"] = (min(1.0, 1.0 / np.abs(g).sum()) * lr if state["n_iter"] == 1
                              else lr)
            gtd = g.dot(d)
            if gtd > -tol_change:
                break
            if group["line_search_fn"] is not None:
                loss, g, t, ls_evals = self._search(closure, t, d, loss, g, gtd,
                                                    max_eval - evals)
                state["t"] = t
                self._move(t, d)
            else:
                self._move(t, d)
                ls_evals = 0
                if done != max_iter:
                    loss, g, ls_evals = self._evaluate(closure), self._flat_grad(), 1
            evals += ls_evals
            state["func_evals"] += ls_evals
            if (done == max_iter or evals >= max_eval or np.abs(g).max(initial=0) <= tol_grad
                    or np.abs(d * t).max(initial=0) <= tol_change
                    or abs(loss - prev_loss) < tol_change):
                break
        return first

    def state_dict(self) -> dict[str, Any]:
        """As ``Optimizer.state_dict``, with copies of the history's lists of arrays."""
        out = super().state_dict()
        out["state"] = {k: _copied(v) for k, v in out["state"].items()}
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()`` (the history is of the flat vector of all
        parameters, kept with the first parameter, as PyTorch keeps it)."""
        saved = [_copied(v) for v in state_dict.get("state", {}).values()]
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})
        if len(saved) > 1:
            raise ValueError(f"LBFGS.load_state_dict: expected the state of one parameter "
                             f"(the first), got {len(saved)}")
        self.state = {self._params[0]: saved[0]} if saved else {}


def _copied(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its arrays and lists of arrays copied."""
    out: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, list):
            v = [a.copy() if isinstance(a, np.ndarray) else a for a in v]
        elif isinstance(v, np.ndarray):
            v = v.copy()
        out[k] = v
    return out
