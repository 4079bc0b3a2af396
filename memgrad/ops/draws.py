"""Random draws over tensors, from memgrad's global generator (``mg.manual_seed`` makes them
reproducible, and a checkpoint's recomputation replays them): ``bernoulli``,
``multinomial``, and the in-place fills ``normal_`` and ``uniform_``.

The draws are data, not differentiable functions of their inputs: their results never
require grad (the fills are recorded as an in-place copy of constants, whose gradient to the
old values is zero, as PyTorch's).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops.inplace import _copy, _inplace
from memgrad.ops.registry import public
from memgrad.random import Generator
from memgrad.random import generator as _global
from memgrad.tensor import Tensor

__all__ = ["bernoulli", "multinomial", "normal_", "uniform_"]


def _gen(generator: Any, api: str) -> np.random.Generator:
    if generator is None or isinstance(generator, Generator):
        return _global(generator)
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"{api}: generator must be None (the global generator, seeded by "
                    f"mg.manual_seed), an mg.Generator or a numpy.random.Generator, got "
                    f"{type(generator).__name__}")


def _probabilities(p: np.ndarray, api: str) -> None:
    if p.size and not (np.all(p >= 0) and np.all(p <= 1)):  # nan fails both
        raise RuntimeError(f"{api}: probabilities must be in [0, 1], got values from "
                           f"{np.nanmin(p)} to {np.nanmax(p)} (or nan)")


@public
def bernoulli(input: Tensor, p: float | None = None, *, generator: Any = None) -> Tensor:
    """0 or 1 for each element, 1 with probability ``input`` (or ``p`` if given), in
    ``input``'s shape and dtype.

    Example:
        >>> import memgrad as mg
        >>> mg.bernoulli(mg.tensor([0.0, 1.0]))
        tensor([0., 1.])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli: input must be a Tensor, got {type(input).__name__}")
    probs = input.numpy() if p is None else np.asarray(p, dtype=np.float64)
    if probs.dtype.kind != "f":
        raise TypeError(f"bernoulli: probabilities must be floating point, got {probs.dtype}")
    _probabilities(probs, "bernoulli")
    draws = _gen(generator, "bernoulli").random(input.shape) < probs
    dtype = input.dtype if input.dtype.kind == "f" else np.dtype(np.float32)
    return Tensor(draws.astype(dtype))


@public
def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Any = None) -> Tensor:
    """``num_samples`` int64 category indices drawn for each row of weights ``input`` (1-D,
    or 2-D with one distribution per row; weights >= 0, not all zero), without replacement
    unless ``replacement=True``.

    Example:
        >>> import memgrad as mg
        >>> mg.multinomial(mg.tensor([0.0, 1.0, 0.0]), 2, replacement=True)
        tensor([1, 1])
    """
    if not isinstance(input, Tensor) or input.ndim not in (1, 2):
        got = input.shape if isinstance(input, Tensor) else type(input).__name__
        raise ShapeError(f"multinomial: input must be a 1-D or 2-D tensor of weights, got {got}")
    if not isinstance(num_samples, numbers.Integral) or num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
    weights = np.atleast_2d(input.numpy()).astype(np.float64)
    if not np.all(np.isfinite(weights)) or (weights < 0).any():
        raise RuntimeError("multinomial: weights must be finite and >= 0")
    totals = weights.sum(axis=1)
    if (totals <= 0).any():
        raise RuntimeError("multinomial: each row of weights must have a positive sum")
    if not replacement and (np.count_nonzero(weights, axis=1) < num_samples).any():
        raise RuntimeError(
            f"multinomial: cannot draw {num_samples} samples without replacement from a row "
            f"with fewer nonzero weights; use replacement=True or draw fewer"
        )
    gen = _gen(generator, "multinomial")
    rows = [gen.choice(weights.shape[1], size=int(num_samples), replace=bool(replacement),
                       p=w / t) for w, t in zip(weights, totals)]
    out = np.asarray(rows, dtype=np.int64).reshape(len(rows), int(num_samples))
    return Tensor(out if input.ndim == 2 else out[0])


def _fill(self: Tensor, draws: np.ndarray, api: str) -> Tensor:
    if self.dtype.kind != "f":
        raise TypeError(f"{api}: expected a floating point tensor, got {self.dtype}")
    src = Tensor(draws.astype(self.dtype, copy=False))
    return _inplace(api, self, _copy, (src,), {}, lambda a: np.copyto(a, src.numpy()))


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *,
            generator: Any = None) -> Tensor:
    """Fill in place with draws from the normal distribution ``N(mean, std**2)``.

    Example:
        >>> import memgrad as mg
        >>> mg.zeros(3).normal_(5.0, 0.0)
        tensor([5., 5., 5.])
    """
    if not std >= 0:
        raise RuntimeError(f"normal_: std must be >= 0, got {std}")
    draws = _gen(generator, "normal_").normal(mean, std, self.shape)
    return _fill(self, draws, "normal_")


def uniform_(self: Tensor, *args: float, generator: Any = None, **bounds: float) -> Tensor:
    """Fill in place with draws from the uniform distribution on ``[from, to)``:
    ``t.uniform_()`` (``[0, 1)``), ``t.uniform_(a, b)`` or ``t.uniform_(to=b)``.

    Example:
        >>> import memgrad as mg
        >>> t = mg.zeros(100).uniform_(2.0, 3.0)
        >>> bool(((t >= 2) & (t < 3)).all())
        True
    """
    names = ("from", "to")
    if len(args) > 2 or set(bounds) - set(names):
        raise TypeError(f"uniform_: expected uniform_(from=0, to=1), got {len(args)} positional "
                        f"arguments and {sorted(bounds)}")
    given = dict(zip(names, args))
    for key, value in bounds.items():
        if key in given:
            raise TypeError(f"uniform_: {key} given twice")
        given[key] = value
    low, high = given.get("from", 0.0), given.get("to", 1.0)
    if not low <= high:
        raise RuntimeError(f"uniform_: from must be <= to, got from={low}, to={high}")
    return _fill(self, _gen(generator, "uniform_").uniform(low, high, self.shape), "uniform_")
