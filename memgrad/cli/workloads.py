"""What ``memgrad tune`` and ``memgrad plan`` take as MODEL: a built-in name (``mlp``,
``transformer``, ``convnet``) or ``package.module:factory``, a function of no arguments that
returns ``(model, example_input, loss_fn)`` with ``model`` an ``nn.Module``.

Example:
    >>> w = load_workload("mlp")
    >>> w.name, len(w.stages)
    ('mlp', 16)
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import memgrad as mg
from memgrad import nn
from memgrad.cli.output import CliError, first_line
from memgrad.models import BUILTIN

__all__ = ["Workload", "SIZES", "load_workload"]

# "small" keeps a tune of every configuration well under a minute on two cores; "bench" is
# the benchmark workloads W1-W3 as they are defined in memgrad.models
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "small": {
        "mlp": dict(depth=16, width=256, batch=512),
        "transformer": dict(blocks=4, d_model=64, heads=4, seq=32, batch=8),
        "convnet": dict(layers=8, channels=16, size=16, batch=8),
        "gpt": dict(blocks=4, d_model=64, heads=4, seq=32, batch=8),
    },
    "bench": {name: {} for name in BUILTIN},
}

_FORM = (f"MODEL is one of {', '.join(BUILTIN)} or package.module:factory (a function "
         "returning (model, example_input, loss_fn))")


@dataclass
class Workload:
    """A model cut into stages, an example input, and the loss of the model's output."""

    name: str
    model: nn.Module
    input: mg.Tensor
    loss_fn: Callable[[mg.Tensor], mg.Tensor]
    size: str | None = None  # the SIZES entry of a built-in model; None for a factory

    @property
    def title(self) -> str:
        """The name, with the size of a built-in model: ``mlp (small)``."""
        return self.name if self.size is None else f"{self.name} ({self.size})"

    @property
    def sequential(self) -> bool:
        """Whether the model is an ``nn.Sequential`` (equal segment counts apply to it)."""
        return isinstance(self.model, nn.Sequential)

    @property
    def stages(self) -> list[nn.Module]:
        """The entries of an ``nn.Sequential``; the model itself for any other Module."""
        return list(self.model) if self.sequential else [self.model]


def load_workload(spec: str, size: str = "small") -> Workload:
    """Build the workload MODEL names. Built-in names take their ``SIZES[size]`` arguments;
    a ``package.module:factory`` is imported (the current directory is searched first) and
    called with no arguments.

    Raises:
        CliError: an unknown name, a module that does not import, a missing or failing
            factory, or one that does not return ``(nn.Module, Tensor, callable)``;
            each message names the fix.

    Example:
        >>> load_workload("transformer").input.shape
        (8, 32)
    """
    if ":" not in spec:
        if spec not in BUILTIN:
            raise CliError(f"unknown model {spec!r}: {_FORM}")
        return _checked(spec, BUILTIN[spec](**SIZES[size][spec]), size)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CliError(f"cannot read the model {spec!r}: {_FORM}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, so local modules import
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not (module_name == e.name or module_name.startswith(e.name + ".")):
            raise CliError(
                f"importing {module_name!r} for the model {spec!r} failed: {e}; install what "
                "it needs"
            ) from None
        raise CliError(
            f"cannot import {module_name!r} for the model {spec!r} ({e}); run from the "
            "directory that holds it, or add that directory to PYTHONPATH"
        ) from None
    except Exception as e:
        raise CliError(
            f"importing {module_name!r} for the model {spec!r} failed: "
            f"{type(e).__name__}: {first_line(e)}; fix the module"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        what = "has no attribute" if factory is None else "has a non-callable"
        raise CliError(f"module {module_name!r} {what} {attr!r}: {_FORM}")
    try:
        result = factory()
    except Exception as e:
        raise CliError(
            f"{spec}() failed: {type(e).__name__}: {first_line(e)}; it must run with no "
            "arguments"
        ) from None
    return _checked(spec, result)


def _checked(name: str, result: Any, size: str | None = None) -> Workload:
    expected = "(model, example_input, loss_fn) with model an nn.Module"
    if not isinstance(result, tuple) or len(result) != 3:
        got = (f"a tuple of {len(result)}" if isinstance(result, tuple)
               else type(result).__name__)
        raise CliError(f"{name} returned {got}; a factory must return {expected}")
    model, x, loss_fn = result
    if not isinstance(model, nn.Module):
        raise CliError(
            f"{name} returned a model of type {type(model).__name__}; a factory must return "
            f"{expected} (wrap a function's parameters and code in an nn.Module)"
        )
    if isinstance(model, nn.Sequential) and len(model) == 0:
        raise CliError(f"{name} returned an empty nn.Sequential; give it at least one stage")
    if not isinstance(x, mg.Tensor):
        raise CliError(
            f"{name} returned an example input of type {type(x).__name__}; a factory must "
            f"return {expected}, the input a memgrad Tensor"
        )
    if not callable(loss_fn):
        raise CliError(
            f"{name} returned a loss_fn of type {type(loss_fn).__name__}; a factory must "
            f"return {expected}, loss_fn mapping the model's output to a scalar Tensor"
        )
    return Workload(name, model, x, loss_fn, size)
