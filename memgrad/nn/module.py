"""``Parameter``, ``Module`` and the containers ``Sequential`` and ``ModuleList``.

A ``Module`` keeps three ordered registries, filled by attribute assignment as in PyTorch:
``_parameters`` (``Parameter`` values), ``_buffers`` (tensors that are state but not trained,
registered with ``register_buffer``) and ``_modules`` (child modules). Every traversal
(``named_parameters``, ``state_dict``, ``train``...) walks these registries in insertion
order, so names and orders match PyTorch's for the same model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from memgrad.factories import tensor as _tensor
from memgrad.optim.optimizer import zero_grads
from memgrad.tensor import RemovableHandle, Tensor

__all__ = ["Parameter", "Module", "Sequential", "ModuleList"]


class Parameter(Tensor):
    """A tensor that is a trainable weight of a ``Module``: assigning one to a module
    attribute registers it, so ``parameters()`` and ``state_dict()`` find it.

    Args:
        data: a Tensor or NumPy array (shared, not copied) or array-like data (copied as by
            ``mg.tensor``). Defaults to an empty float32 tensor.
        requires_grad: whether the parameter receives gradients (default True).

    Example:
        >>> import memgrad as mg
        >>> p = mg.nn.Parameter(mg.zeros(2))
        >>> p
        Parameter containing:
        tensor([0., 0.], requires_grad=True)
    """

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if data is None:
            data = np.empty((0,), dtype=np.float32)
        if isinstance(data, Tensor):
            super().__init__(data._data, requires_grad=requires_grad)
            self._vc = data._version_counter()
        elif isinstance(data, np.ndarray):
            super().__init__(data, requires_grad=requires_grad)
        else:
            super().__init__(_tensor(data)._data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict[int, Any]) -> Parameter:
        # a copy of the data, requires_grad kept, no gradient: PyTorch's Parameter deep
        # copy (so that copies of a trained layer, a TransformerEncoder's, start clean)
        if id(self) not in memo:
            memo[id(self)] = type(self)(self._data.copy(), self.requires_grad)
        return memo[id(self)]


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(strict=False)`` did not load."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _check_name(api: str, name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{api}: the name must be a str, got {type(name).__name__}")
    if not name or "." in name:
        raise KeyError(f"{api}: the name must be non-empty and contain no '.', got {name!r}")


class Module:
    """Base class of every layer and model.

    Subclasses call ``super().__init__()`` first, assign their parameters, buffers and
    submodules as attributes, and define ``forward``; calling the module runs ``forward``
    (with any forward hooks).

    Example:
        >>> import memgrad as mg
        >>> class Affine(mg.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.scale = mg.nn.Parameter(mg.ones(3))
        ...     def forward(self, x):
        ...         return x * self.scale
        >>> m = Affine()
        >>> [name for name, _ in m.named_parameters()]
        ['scale']
        >>> m(mg.ones(3)).shape
        (3,)
    """

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", [])
        object.__setattr__(self, "_forward_hooks", [])

    # ---------------------------------------------------------------- calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation of the module; every subclass defines it."""
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function; '
            "define forward(self, ...) in the subclass"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pre, post = self._forward_pre_hooks, self._forward_hooks
        if not (pre or post):  # the usual call: no hooks to copy and walk
            return self.forward(*args, **kwargs)
        for hook in tuple(pre):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        out = self.forward(*args, **kwargs)
        for hook in tuple(post):
            result = hook(self, args, out)
            if result is not None:
                out = result
        return out

    def register_forward_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, args)`` before each ``forward``; a non-None result replaces
        the positional arguments (a non-tuple is wrapped in a 1-tuple).

        Example:
            >>> import memgrad as mg
            >>> m = mg.nn.ReLU()
            >>> h = m.register_forward_pre_hook(lambda mod, args: (args[0] * -1,))
            >>> m(mg.tensor([-2.0]))
            tensor([2.])
            >>> h.remove()
        """
        self._forward_pre_hooks.append(hook)
        return RemovableHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after each ``forward``; a non-None result
        replaces the output."""
        self._forward_hooks.append(hook)
        return RemovableHandle(self._forward_hooks, hook)

    # ---------------------------------------------------------------- registration
    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError(
                    f"cannot assign parameter {name!r} before Module.__init__() call; call "
                    f"super().__init__() first in {type(self).__name__}.__init__"
                )
            self._forget(name, keep=self._parameters)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__!r} as parameter {name!r} "
                    "(nn.Parameter or None expected); wrap it as nn.Parameter(value), or "
                    f"change the values in place: with mg.no_grad(): m.{name}.copy_(value)"
                )
            params[name] = None
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError(
                    f"cannot assign module {name!r} before Module.__init__() call; call "
                    f"super().__init__() first in {type(self).__name__}.__init__"
                )
            self._forget(name, keep=self._modules)
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__!r} as child module {name!r} "
                    "(nn.Module or None expected)"
                )
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign {type(value).__name__!r} as buffer {name!r} "
                    "(Tensor or None expected)"
                )
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: dict) -> None:
        # `name` changes registry: drop it from the others (`keep` keeps its position)
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: look in the registries
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = d.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add ``param`` (or None, a placeholder) to the module's parameters as ``name``.

        Example:
            >>> import memgrad as mg
            >>> m = mg.nn.Module()
            >>> m.register_parameter("w", mg.nn.Parameter(mg.ones(2)))
            >>> [n for n, _ in m.named_parameters()]
            ['w']
        """
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                "register_parameter: call super().__init__() before registering parameters"
            )
        _check_name("register_parameter", name)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"register_parameter: attribute {name!r} already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"register_parameter: cannot assign {type(param).__name__!r} object to "
                f"parameter {name!r} (nn.Parameter or None required); wrap it: "
                "nn.Parameter(t)"
            )
        if param is not None and param.grad_fn is not None:
            raise ValueError(
                f"register_parameter: cannot assign non-leaf Tensor to parameter {name!r}; "
                "model parameters must be created explicitly: nn.Parameter(t.detach())"
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a tensor that is module state but not a parameter (e.g. running statistics).

        Persistent buffers are part of ``state_dict()``; ``persistent=False`` keeps one out.

        Example:
            >>> import memgrad as mg
            >>> m = mg.nn.Module()
            >>> m.register_buffer("count", mg.zeros(1))
            >>> list(m.state_dict())
            ['count']
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError(
                "register_buffer: call super().__init__() before registering buffers"
            )
        _check_name("register_buffer", name)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"register_buffer: attribute {name!r} already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"register_buffer: cannot assign {type(tensor).__name__!r} object to buffer "
                f"{name!r} (Tensor or None required)"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add ``module`` as child ``name`` (the same as assigning the attribute)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {type(module).__name__} is not a Module subclass")
        _check_name("add_module", name)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"add_module: attribute {name!r} already exists")
        self._modules[name] = module

    # ---------------------------------------------------------------- traversal
    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first, as ``(dotted name, module)``;
        a module reachable twice is yielded once (unless ``remove_duplicate=False``).

        Example:
            >>> import memgrad as mg
            >>> net = mg.nn.Sequential(mg.nn.Linear(2, 2), mg.nn.ReLU())
            >>> [name for name, _ in net.named_modules()]
            ['', '0', '1']
        """
        if memo is None:
            memo = set()
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            child_prefix = prefix + ("." if prefix else "") + name
            yield from child.named_modules(memo, child_prefix, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        """This module and every submodule (see ``named_modules``)."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct submodules as ``(name, module)``, each module once."""
        seen = set()
        for name, child in self._modules.items():
            if child is not None and child not in seen:
                seen.add(child)
                yield name, child

    def children(self) -> Iterator[Module]:
        """The direct submodules."""
        for _, child in self.named_children():
            yield child

    def _named_members(
        self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        seen = set()
        if recurse:
            mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
        else:
            mods = iter(((prefix, self),))
        for mod_prefix, mod in mods:
            for name, t in getattr(mod, registry).items():
                if t is None or (remove_duplicate and t in seen):
                    continue
                seen.add(t)
                yield mod_prefix + ("." if mod_prefix else "") + name, t

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """Every parameter as ``(dotted name, parameter)``, in registration order; a
        parameter shared by two modules is yielded once, under its first name.

        Example:
            >>> import memgrad as mg
            >>> net = mg.nn.Sequential(mg.nn.Linear(2, 3), mg.nn.ReLU(), mg.nn.Linear(3, 1))
            >>> [name for name, _ in net.named_parameters()]
            ['0.weight', '0.bias', '2.weight', '2.bias']
        """
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter (see ``named_parameters``), e.g. for an optimizer.

        Example:
            >>> import memgrad as mg
            >>> sum(p.numel() for p in mg.nn.Linear(4, 2).parameters())
            10
        """
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """Every buffer as ``(dotted name, tensor)``."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer (see ``named_buffers``)."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ---------------------------------------------------------------- modes and grads
    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode=True``) or evaluation mode on this module and every
        submodule; returns ``self``. Layers such as ``Dropout`` behave differently in each.

        Example:
            >>> import memgrad as mg
            >>> net = mg.nn.Sequential(mg.nn.Dropout(0.5)).eval()
            >>> net[0].training
            False
        """
        if not isinstance(mode, bool):
            raise TypeError(f"train(): mode must be a bool, got {type(mode).__name__}")
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` on every parameter (False freezes them); returns ``self``."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient: set ``.grad`` to None (the default) or fill it
        with zeros in place.

        Example:
            >>> import memgrad as mg
            >>> lin = mg.nn.Linear(2, 1)
            >>> lin(mg.ones(1, 2)).sum().backward()
            >>> lin.zero_grad()
            >>> lin.weight.grad is None
            True
        """
        zero_grads(self.parameters(), set_to_none)

    # ---------------------------------------------------------------- state
    def _state_items(self, prefix: str) -> Iterator[tuple[str, Tensor]]:
        # like PyTorch: a module reachable under two names is saved under both
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                yield prefix + name, b
        for name, child in self._modules.items():
            if child is not None:
                yield from child._state_items(prefix + name + ".")

    def state_dict(self, *, keep_vars: bool = False) -> OrderedDict[str, Tensor]:
        """The module's state: dotted name -> tensor, for every parameter and persistent
        buffer, as PyTorch's: each value is ``t.detach()``, sharing storage with the module
        (a later optimizer step shows in it; ``{k: v.clone() ...}`` keeps a snapshot), or the
        parameter itself with ``keep_vars=True``. ``mg.save`` writes it, and ``np.savez``
        takes it too (a tensor is an array to NumPy).

        Example:
            >>> import memgrad as mg
            >>> lin = mg.nn.Linear(3, 2)
            >>> sd = lin.state_dict()
            >>> {k: v.shape for k, v in sd.items()}
            {'weight': (2, 3), 'bias': (2,)}
            >>> _ = lin.bias.data.fill_(1.0)
            >>> sd["bias"].tolist()
            [1.0, 1.0]
        """
        return OrderedDict((name, t if keep_vars else t.detach())
                           for name, t in self._state_items(""))

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True
    ) -> IncompatibleKeys:
        """Copy the arrays of ``state_dict`` into the parameters and buffers, in place.

        Nothing is copied unless every entry fits: a shape mismatch always raises, and with
        ``strict=True`` (the default) so do missing and unexpected keys.

        Args:
            state_dict: name -> array or Tensor, as from ``state_dict()`` or ``np.load``.
            strict: require the keys to match the module's exactly.

        Returns:
            ``IncompatibleKeys(missing_keys, unexpected_keys)``.

        Raises:
            RuntimeError: naming each missing or unexpected key and each shape mismatch.

        Example:
            >>> import memgrad as mg
            >>> a, b = mg.nn.Linear(3, 2), mg.nn.Linear(3, 2)
            >>> b.load_state_dict(a.state_dict())
            IncompatibleKeys(missing_keys=[], unexpected_keys=[])
            >>> bool((a.weight == b.weight).all())
            True
        """
        if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
            raise TypeError(
                "load_state_dict: expected a mapping of names to arrays (as returned by "
                f"state_dict() or np.load), got {type(state_dict).__name__}"
            )
        targets = OrderedDict(self._state_items(""))
        given = list(state_dict.keys())
        missing = [k for k in targets if k not in state_dict]
        unexpected = [k for k in given if k not in targets]
        errors = []
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(map(repr, unexpected)))
        if strict and missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(map(repr, missing)))
        copies = []
        for name, t in targets.items():
            if name not in state_dict:
                continue
            value = state_dict[name]
            arr = value._data if isinstance(value, Tensor) else np.asarray(value)
            if arr.shape != t.shape:
                errors.append(
                    f"size mismatch for {name!r}: copying a value of shape {arr.shape} from "
                    f"the state_dict, the shape in the current model is {t.shape}"
                )
            elif not np.can_cast(arr.dtype, t.dtype, casting="same_kind"):
                errors.append(
                    f"dtype mismatch for {name!r}: cannot copy {arr.dtype} into {t.dtype}"
                )
            else:
                copies.append((t, arr))
        if errors:
            hint = (
                "\n(nothing was loaded; pass strict=False to load the matching keys and "
                "skip missing/unexpected ones)"
                if strict and (missing or unexpected) else "\n(nothing was loaded)"
            )
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors) + hint
            )
        for t, arr in copies:
            np.copyto(t._data, arr, casting="same_kind")
            t._bump_version()
        return IncompatibleKeys(missing, unexpected)

    # ---------------------------------------------------------------- utilities
    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every submodule (children first) and then on ``self``; returns
        ``self``. Typical use: custom initialisation.

        Example:
            >>> import memgrad as mg
            >>> def init(m):
            ...     if isinstance(m, mg.nn.Linear):
            ...         mg.nn.init.zeros_(m.weight)
            >>> net = mg.nn.Sequential(mg.nn.Linear(2, 2)).apply(init)
            >>> float(net[0].weight.abs().sum())
            0.0
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, dtype: Any) -> Module:
        """Cast the floating-point parameters and buffers (and their gradients) to
        ``dtype`` in place: the Parameter objects stay the same, so an optimizer made
        before still holds them. Returns ``self``.

        Example:
            >>> import memgrad as mg
            >>> mg.nn.Linear(2, 2).to(mg.float64).weight.dtype
            dtype('float64')
        """
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind != "f":
            raise TypeError(
                f"Module.to(): expected a floating dtype such as mg.float32 or mg.float64, got "
                f"{dtype!r}; memgrad runs on the CPU, so there is no device argument"
            )
        for t in (*self.parameters(), *self.buffers()):
            if t._data.dtype.kind == "f" and t._data.dtype != dtype:
                t._data = t._data.astype(dtype)
                t._meta = None
                t._bump_version()
                if t.grad is not None:
                    t.grad = Tensor(t.grad._data.astype(dtype))
        return self

    def float(self) -> Module:
        """``to(mg.float32)``."""
        return self.to(np.float32)

    def double(self) -> Module:
        """``to(mg.float64)``."""
        return self.to(np.float64)

    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr; layers override it."""
        return ""

    def __repr__(self) -> str:
        lines = self.extra_repr().split("\n") if self.extra_repr() else []
        n_extra = len(lines)
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if n_extra == 1 and len(lines) == 1:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


class Sequential(Module):
    """Modules called in order, each on the previous one's output.

    Built from modules (named ``"0"``, ``"1"``...) or from an ``OrderedDict`` of named
    modules. Indexing gives a module, slicing a new ``Sequential`` of the same modules.

    Example:
        >>> import memgrad as mg
        >>> net = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.ReLU(), mg.nn.Linear(8, 2))
        >>> net(mg.ones(3, 4)).shape
        (3, 2)
        >>> len(net), type(net[:2]).__name__
        (3, 'Sequential')
    """

    def __init__(self, *args: Module | OrderedDict[str, Module]) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def _index(self, idx: int) -> str:
        keys = list(self._modules)
        if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
            raise TypeError(
                f"{type(self).__name__} indices must be integers or slices, got "
                f"{type(idx).__name__}"
            )
        if not -len(keys) <= idx < len(keys):
            raise IndexError(
                f"{type(self).__name__} index {idx} is out of range for length {len(keys)}"
            )
        return keys[idx]

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._index(idx), module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input: Any) -> Any:
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules whose parameters are registered (a plain Python list's are not).

    It has no ``forward``: iterate over it in the owner's ``forward``.

    Example:
        >>> import memgrad as mg
        >>> layers = mg.nn.ModuleList([mg.nn.Linear(2, 2) for _ in range(3)])
        >>> _ = layers.append(mg.nn.ReLU())
        >>> len(layers), len(list(layers.parameters()))
        (4, 6)
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, idx: int) -> int:
        if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
            raise TypeError(f"ModuleList indices must be integers or slices, got "
                            f"{type(idx).__name__}")
        n = len(self._modules)
        if not -n <= idx < n:
            raise IndexError(f"ModuleList index {idx} is out of range for length {n}")
        return int(idx) % n

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[str(self._index(idx))]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, str(self._index(idx)), module)

    def __delitem__(self, idx: int | slice) -> None:
        mods = list(self._modules.values())
        del mods[idx if isinstance(idx, slice) else self._index(idx)]
        self._renumber(mods)

    def _renumber(self, mods: list[Module]) -> None:
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end; returns ``self``."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Append every module of ``modules``; returns ``self``."""
        if isinstance(modules, Module) and not isinstance(modules, (ModuleList, Sequential)):
            raise TypeError(
                "ModuleList.extend: expected an iterable of modules, got a single "
                f"{type(modules).__name__}; use append() for one module"
            )
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index`` (as ``list.insert``)."""
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList.insert: {type(module).__name__} is not a Module")
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._renumber(mods)
