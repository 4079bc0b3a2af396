"""The keyed and parameter containers: ``ModuleDict``, ``ParameterList`` and
``ParameterDict``, as in PyTorch. Each registers what it holds in its module's registries
(modules under their keys, parameters under their keys or positions), so
``parameters()``, ``state_dict()`` and ``to()`` see them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from memgrad.nn.module import Module, Parameter
from memgrad.tensor import Tensor

__all__ = ["ModuleDict", "ParameterList", "ParameterDict"]


def _pairs(api: str, items: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(items, Mapping):
        return list(items.items())
    pairs = []
    for i, pair in enumerate(items):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                f"{api}.update: expected a mapping or an iterable of (key, value) pairs; "
                f"element #{i} is {type(pair).__name__}"
            )
        pairs.append(tuple(pair))
    return pairs


def _as_parameter(value: Any) -> Any:
    # PyTorch wraps a plain tensor in a Parameter; other values are kept as they are
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


class ModuleDict(Module):
    """An ordered dict of modules whose parameters are registered; keys are strings.

    Example:
        >>> import memgrad as mg
        >>> heads = mg.nn.ModuleDict({"cls": mg.nn.Linear(4, 3), "reg": mg.nn.Linear(4, 1)})
        >>> heads["cls"](mg.ones(2, 4)).shape, list(heads.keys())
        ((2, 3), ['cls', 'reg'])
        >>> len(list(heads.parameters()))
        4
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None
                 ) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(f"ModuleDict has no module {key!r}; keys: {list(self._modules)}")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(
                f"ModuleDict: the value for {key!r} must be a Module, got {type(module).__name__}"
            )
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._modules.keys()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order."""
        return self._modules.values()

    def items(self) -> Iterable[tuple[str, Module]]:
        """``(key, module)`` pairs, in insertion order."""
        return self._modules.items()

    def pop(self, key: str) -> Module:
        """Remove the module ``key`` and return it."""
        module = self[key]
        del self._modules[key]
        return module

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace the modules of a mapping or of ``(key, module)`` pairs."""
        for key, module in _pairs("ModuleDict", modules):
            self[key] = module


class ParameterList(Module):
    """A list of parameters, registered under their positions (``"0"``, ``"1"``...); a plain
    tensor appended is wrapped in a ``Parameter``.

    Example:
        >>> import memgrad as mg
        >>> ps = mg.nn.ParameterList([mg.nn.Parameter(mg.ones(2)) for _ in range(3)])
        >>> _ = ps.append(mg.zeros(4))
        >>> len(ps), [n for n, _ in ps.named_parameters()], ps[3].requires_grad
        (4, ['0', '1', '2', '3'], True)
    """

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_size", 0)
        if values is not None:
            self.extend(values)

    def _index(self, idx: int) -> int:
        if not isinstance(idx, (int, np.integer)) or isinstance(idx, bool):
            raise TypeError(
                f"ParameterList indices must be integers or slices, got {type(idx).__name__}"
            )
        if not -self._size <= idx < self._size:
            raise IndexError(f"ParameterList index {idx} is out of range for length "
                             f"{self._size}")
        return int(idx) % self._size

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(self._size)[idx]])
        return getattr(self, str(self._index(idx)))

    def __setitem__(self, idx: int, value: Any) -> None:
        setattr(self, str(self._index(idx)), _as_parameter(value))

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._size))

    def append(self, value: Any) -> ParameterList:
        """Add ``value`` at the end; returns ``self``."""
        i = self._size
        object.__setattr__(self, "_size", i + 1)
        setattr(self, str(i), _as_parameter(value))
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        """Append every value of ``values``; returns ``self``."""
        if isinstance(values, Tensor):
            raise TypeError(
                "ParameterList.extend: expected an iterable of tensors, got a single Tensor; "
                "use append() for one"
            )
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        lines = []
        for i, p in enumerate(self):
            if isinstance(p, Tensor):
                kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
                lines.append(f"({i}): {kind} containing: [{p.dtype} of size {p.shape}]")
            else:
                lines.append(f"({i}): Object of type: {type(p).__name__}")
        return "\n".join(lines)


class ParameterDict(Module):
    """An ordered dict of parameters, registered under their (string) keys; a plain tensor
    stored is wrapped in a ``Parameter``.

    Example:
        >>> import memgrad as mg
        >>> pd = mg.nn.ParameterDict({"scale": mg.ones(3)})
        >>> pd["shift"] = mg.nn.Parameter(mg.zeros(3))
        >>> list(pd.keys()), list(pd.state_dict())
        (['scale', 'shift'], ['scale', 'shift'])
    """

    def __init__(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None
                 ) -> None:
        super().__init__()
        object.__setattr__(self, "_keys", {})
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(f"ParameterDict has no parameter {key!r}; keys: {list(self._keys)}")
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys must be strings, got {type(key).__name__}")
        self._keys[key] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        if key not in self._keys:
            raise KeyError(f"ParameterDict has no parameter {key!r}")
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._keys.keys()

    def values(self) -> list[Any]:
        """The parameters, in insertion order."""
        return [self[k] for k in self._keys]

    def items(self) -> list[tuple[str, Any]]:
        """``(key, parameter)`` pairs, in insertion order."""
        return [(k, self[k]) for k in self._keys]

    def get(self, key: str, default: Any = None) -> Any:
        """The parameter ``key``, or ``default``."""
        return self[key] if key in self._keys else default

    def pop(self, key: str) -> Any:
        """Remove the parameter ``key`` and return it."""
        value = self[key]
        del self[key]
        return value

    def update(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Add or replace the parameters of a mapping or of ``(key, value)`` pairs."""
        for key, value in _pairs("ParameterDict", parameters):
            self[key] = value
