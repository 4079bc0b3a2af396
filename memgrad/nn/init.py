"""Weight initialisers, with PyTorch's names and formulas.

Each one fills its tensor in place, without recording a graph, from memgrad's global
generator (so ``mg.manual_seed`` makes it reproducible), and returns the tensor.
"""

from __future__ import annotations

import math

import numpy as np

from memgrad import random as _random
from memgrad.tensor import Tensor

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "constant_",
    "zeros_",
    "ones_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "trunc_normal_",
    "orthogonal_",
]

_LINEAR_LIKE = (
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "sigmoid",
)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for an activation: 1 for linear/conv/sigmoid, 5/3 for tanh,
    sqrt(2) for relu, sqrt(2 / (1 + slope**2)) for leaky_relu (slope ``param``, default
    0.01), 3/4 for selu.

    Example:
        >>> import memgrad as mg
        >>> round(mg.nn.init.calculate_gain("relu"), 4)
        1.4142
    """
    if nonlinearity in _LINEAR_LIKE:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(
        f"calculate_gain: unsupported nonlinearity {nonlinearity!r}; expected one of "
        f"{', '.join(_LINEAR_LIKE)}, tanh, relu, leaky_relu, selu"
    )


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of shape ``(out, in, *kernel)``."""
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for a tensor with fewer than 2 "
            f"dimensions (got shape {tensor.shape}); use uniform_/normal_ for biases"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _fill(tensor: Tensor, values: np.ndarray | float) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init: expected a Tensor, got {type(tensor).__name__}")
    np.copyto(tensor._data, values, casting="unsafe")
    tensor._bump_version()
    return tensor


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with draws from ``U(a, b)``.

    Example:
        >>> import memgrad as mg
        >>> w = mg.nn.init.uniform_(mg.empty(1000), -0.1, 0.1)
        >>> bool(w.abs().max() <= 0.1)
        True
    """
    return _fill(tensor, _random.generator().uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with draws from ``N(mean, std**2)``."""
    return _fill(tensor, _random.generator().normal(mean, std, tensor.shape))


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    return _fill(tensor, val)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0."""
    return _fill(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1."""
    return _fill(tensor, 1)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot normal: ``N(0, std**2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """He uniform: ``U(-bound, bound)`` with ``bound = gain * sqrt(3 / fan)``, where
    ``gain = calculate_gain(nonlinearity, a)``.

    ``Linear`` and ``Conv2d`` use ``a=sqrt(5)``, PyTorch's default, which makes the bound
    ``1 / sqrt(fan_in)``.

    Example:
        >>> import math
        >>> import memgrad as mg
        >>> w = mg.nn.init.kaiming_uniform_(mg.empty(64, 16), a=math.sqrt(5))
        >>> bool(w.abs().max() <= 1 / math.sqrt(16))
        True
    """
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor  # a zero-element weight: nothing to draw
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """He normal: ``N(0, std**2)`` with ``std = gain / sqrt(fan)``."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def trunc_normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0
) -> Tensor:
    """Fill with draws from ``N(mean, std**2)`` truncated to ``[a, b]`` (bounds in the
    values' units, as in PyTorch): draws outside are drawn again, which gives the truncated
    distribution exactly.

    Example:
        >>> import memgrad as mg
        >>> w = mg.nn.init.trunc_normal_(mg.empty(1000), std=0.02, a=-0.04, b=0.04)
        >>> bool(w.abs().max() <= 0.04)
        True
    """
    if not a < b:
        raise ValueError(f"trunc_normal_: the bounds must satisfy a < b, got a={a}, b={b}")
    if not std > 0:
        raise ValueError(f"trunc_normal_: std must be positive, got {std}")
    lo, hi = (a - mean) / std, (b - mean) / std
    if lo > 8 or hi < -8:
        raise ValueError(
            f"trunc_normal_: [a, b] = [{a}, {b}] lies more than 8 standard deviations from the "
            f"mean {mean}; almost no draw would fall inside"
        )
    rng = _random.generator()
    values = rng.standard_normal(tensor.shape)
    outside = (values < lo) | (values > hi)
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = (values < lo) | (values > hi)
    return _fill(tensor, np.clip(values * std + mean, a, b))


def orthogonal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Fill with a (semi-)orthogonal matrix times ``gain``, as in PyTorch: the weight viewed
    as ``(shape[0], rest)`` has orthonormal rows (or columns, whichever are fewer), from the
    QR decomposition of a Gaussian matrix with the signs fixed so that it is uniformly
    distributed.

    Example:
        >>> import numpy as np
        >>> import memgrad as mg
        >>> w = mg.nn.init.orthogonal_(mg.empty(3, 5)).numpy()
        >>> bool(np.allclose(w @ w.T, np.eye(3), atol=1e-6))
        True
    """
    if tensor.ndim < 2:
        raise ValueError(
            f"orthogonal_: only tensors with 2 or more dimensions are supported, got shape "
            f"{tensor.shape}"
        )
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _random.generator().standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (q * gain).reshape(tensor.shape))
