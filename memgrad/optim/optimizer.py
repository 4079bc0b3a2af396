"""The ``Optimizer`` base class: parameter groups, per-parameter state, ``zero_grad`` and
``state_dict``/``load_state_dict`` with PyTorch's layout.

NOTE [ In-place optimizer steps ]
A step changes each parameter's array in place with NumPy ufuncs (``out=``): no graph is
recorded and the Parameter objects (which modules and saved tensors refer to) stay the
same. The state arrays (momentum, moments) are allocated once, on a parameter's first step,
and intermediate results go to a few scratch arrays that the optimizer keeps and reuses, so
a step allocates no new parameter-sized arrays after the first (see DESIGN.md, house style
11: fresh arrays cost page faults). Each changed parameter's version counter is bumped, so
a graph that saved it before the step raises instead of using the new values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import enable_grad
from memgrad.tensor import Tensor

__all__ = ["Optimizer"]


def zero_grads(params: Iterable[Tensor], set_to_none: bool) -> None:
    """Clear the gradients of ``params``: set ``.grad`` to None, or zero it in place.

    ``Module.zero_grad`` and ``Optimizer.zero_grad`` both use this.
    """
    for p in params:
        g = p.grad
        if g is None:
            continue
        if set_to_none:
            p.grad = None
        elif g.grad_fn is not None or g.requires_grad or not g._data.flags.writeable:
            p.grad = Tensor(np.zeros_like(g._data))  # part of a graph, or read-only: replace
        else:
            g._data.fill(0)
            g._bump_version()


def _check_ordered(api: str, params: Any) -> None:
    if isinstance(params, (set, frozenset)):
        raise TypeError(
            f"{api}: parameters must be in an ordered collection (a list), not a set: a "
            "set's order changes between runs, and state_dict() refers to parameters by "
            "position"
        )


class _Scratch:
    """Work arrays reused across steps, one flat buffer per (slot, dtype) sized to the
    largest parameter seen."""

    __slots__ = ("_bufs",)

    def __init__(self) -> None:
        self._bufs: dict[tuple[int, np.dtype], np.ndarray] = {}

    def get(self, slot: int, like: np.ndarray) -> np.ndarray:
        key = (slot, like.dtype)
        buf = self._bufs.get(key)
        if buf is None or buf.size < like.size:
            buf = self._bufs[key] = np.empty(like.size, dtype=like.dtype)
        return buf[: like.size].reshape(like.shape)


class Optimizer:
    """Base class of the optimizers.

    ``params`` is an iterable of tensors, or of dicts (parameter groups) each with a
    ``"params"`` entry and any options that override the optimizer's defaults for that
    group. Subclasses declare their defaults, check a group's options in ``_check_group``
    and update one parameter in ``_update``.

    Attributes:
        param_groups: list of dicts, each with ``"params"`` and the group's options.
        state: parameter -> dict of that parameter's state (e.g. momentum buffers).
        defaults: the options a group gets when it does not set them.

    Example:
        >>> import memgrad as mg
        >>> w = mg.ones(2, requires_grad=True)
        >>> b = mg.zeros(1, requires_grad=True)
        >>> opt = mg.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
        >>> [g["lr"] for g in opt.param_groups]
        [0.1, 0.5]
    """

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        self._scratch = _Scratch()
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(
                f"{name}: params should be an iterable of Tensors or dicts, got a single "
                "Tensor; pass [t] or model.parameters()"
            )
        _check_ordered(name, params)
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (the defaults fill the rest),
        e.g. to train new layers with another learning rate.

        Example:
            >>> import memgrad as mg
            >>> opt = mg.optim.SGD([mg.ones(2, requires_grad=True)], lr=0.1)
            >>> opt.add_param_group({"params": [mg.zeros(3, requires_grad=True)], "lr": 1.0})
            >>> len(opt.param_groups)
            2
        """
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError(
                f"{name}.add_param_group: expected a dict with a 'params' entry, got "
                f"{type(param_group).__name__}"
            )
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        else:
            _check_ordered(name, params)
            params = list(params)
        seen: set[int] = set()
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{name} can only optimize Tensors, got {type(p).__name__}; pass "
                    "model.parameters() (not named_parameters())"
                )
            if not p.is_leaf:
                raise ValueError(
                    f"{name} can't optimize a non-leaf Tensor (shape {p.shape}, "
                    f"grad_fn={p.grad_fn.name()}); optimize the leaf it was computed from"
                )
            if p.dtype.kind != "f":
                raise TypeError(f"{name} can only optimize floating-point tensors, got {p.dtype}")
            if id(p) in seen:
                raise ValueError(f"{name}: a parameter group lists the same tensor twice")
            seen.add(id(p))
        for group in self.param_groups:
            if any(id(p) in seen for p in group["params"]):
                raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        group = {**self.defaults, **param_group, "params": params}
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Raise ``ValueError`` for an invalid option of ``group``."""

    def _update(self, p: np.ndarray, g: np.ndarray, group: dict[str, Any],
                state: dict[str, Any]) -> None:
        """Update the array ``p`` in place from its gradient ``g``."""
        raise NotImplementedError(f"{type(self).__name__} does not define _update")

    def _update_group(self, params: list[Tensor], group: dict[str, Any]) -> None:
        """Update ``params``, the parameters of ``group`` that have a gradient of their
        shape, in place: ``_update`` on each (an optimizer may update them all at once)."""
        for p in params:
            self._update(p._data, p.grad._data, group, self.state.setdefault(p, {}))
            p._bump_version()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every parameter: set ``.grad`` to None (the default) or
        fill it with zeros in place."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient, in place (NOTE [ In-place optimizer
        steps ]).

        Args:
            closure: optional; re-evaluates the model and returns the loss (called with
                grad enabled before the update).

        Returns:
            The closure's loss, or None.

        Example:
            >>> import memgrad as mg
            >>> w = mg.tensor([1.0, 2.0], requires_grad=True)
            >>> opt = mg.optim.SGD([w], lr=0.5)
            >>> (w * w).sum().backward()
            >>> opt.step()
            >>> w
            tensor([0., 0.], requires_grad=True)
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = []
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if grad.shape != p.shape:
                    raise RuntimeError(
                        f"{type(self).__name__}.step: a parameter of shape {p.shape} has a "
                        f"gradient of shape {grad.shape}; .grad must have the parameter's "
                        "shape"
                    )
                params.append(p)
            self._update_group(params, group)
        return loss

    def state_dict(self) -> dict[str, Any]:
        """A copy of the optimizer's state as in PyTorch: ``{"state": {index: {...}},
        "param_groups": [{options..., "params": [indices]}]}``, where a parameter's index is
        its position counting through all groups in order. Arrays are copies.

        Example:
            >>> import memgrad as mg
            >>> w = mg.ones(2, requires_grad=True)
            >>> opt = mg.optim.SGD([w], lr=0.1, momentum=0.9)
            >>> w.grad = mg.ones(2); opt.step()
            >>> sd = opt.state_dict()
            >>> list(sd["state"][0]), sd["param_groups"][0]["params"]
            (['momentum_buffer'], [0])
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {
            index[id(p)]: {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in s.items()}
            for p, s in self.state.items()
            if s
        }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()`` (of an optimizer of the same kind over
        parameters of the same shapes, in the same group layout). Options are taken from
        the saved groups; the arrays are copied and cast to each parameter's dtype.

        Example:
            >>> import memgrad as mg
            >>> w = mg.ones(2, requires_grad=True)
            >>> opt = mg.optim.Adam([w], lr=0.1)
            >>> w.grad = mg.ones(2); opt.step()
            >>> opt2 = mg.optim.Adam([w])
            >>> opt2.load_state_dict(opt.state_dict())
            >>> opt2.param_groups[0]["lr"], opt2.state[w]["step"]
            (0.1, 1)
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
            raise TypeError(
                f"{name}.load_state_dict: expected the dict returned by state_dict(), with "
                "keys 'state' and 'param_groups'"
            )
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the state has {len(saved_groups)} parameter "
                f"group(s), this optimizer has {len(self.param_groups)}"
            )
        by_index: dict[int, Tensor] = {}
        for i, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"{name}.load_state_dict: parameter group {i} has "
                    f"{len(saved['params'])} parameter(s) in the state and "
                    f"{len(group['params'])} in this optimizer"
                )
            by_index.update(zip(saved["params"], group["params"]))
        state: dict[Tensor, dict[str, Any]] = {}
        for key, saved_state in state_dict["state"].items():
            p = by_index.get(int(key))
            if p is None:
                raise ValueError(
                    f"{name}.load_state_dict: the state has an entry for parameter {key}, "
                    "which no parameter group lists"
                )
            entry = {}
            for k, v in saved_state.items():
                if isinstance(v, np.ndarray) and v.ndim:
                    if v.shape != p.shape:
                        raise ValueError(
                            f"{name}.load_state_dict: state {k!r} of parameter {key} has shape "
                            f"{v.shape}, the parameter has shape {p.shape}"
                        )
                    v = np.array(v, dtype=p.dtype if v.dtype.kind == "f" else v.dtype)
                entry[k] = v
            state[p] = entry
        self.state = state
        for saved, group in zip(saved_groups, self.param_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {group[k]}" for k in sorted(group) if k != "params")
        lines.append(")")
        return "\n".join(lines)
