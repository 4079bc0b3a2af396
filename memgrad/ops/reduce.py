"""Reductions. ``sum``, ``amax``/``amin``, ``sum_to``, ``softmax`` and ``log_softmax`` (and the
backward of the last two) are primitives; ``mean``, ``var``, ``std`` and ``logsumexp`` are
composites of primitives."""

from __future__ import annotations

import builtins
import math

import numpy as np

from memgrad.ops import parts
from memgrad.ops.elementwise import where
from memgrad.ops.registry import primitive, public
from memgrad.tensor import Tensor

__all__ = [
    "sum", "sum_to", "amax", "amin", "mean", "var", "std", "logsumexp", "softmax",
    "log_softmax", "softmax_backward", "log_softmax_backward", "argmax",
    "argmin", "normalize_dims",
]



def normalize_dims(dim, ndim: int, api: str) -> tuple[int, ...] | None:
    """``dim`` (None, int or tuple, negatives allowed) as a sorted tuple of axes."""
    if dim is None:
        return None
    if dim.__class__ is int and -ndim <= dim < ndim:  # the usual call: one dim in range
        return (dim % ndim,)
    dims = tuple(dim) if hasattr(dim, "__iter__") else (dim,)  # (dim,): a float gets a clear error
    out = []
    span = builtins.max(ndim, 1)
    lo, hi = -span, span - 1
    for d in dims:
        if not isinstance(d, (int, np.integer)):
            raise TypeError(f"{api}: dim must be an int or a tuple of ints, got {dim!r}")
        if not lo <= d <= hi:
            raise IndexError(
                f"{api}: Dimension out of range (expected to be in range of [{lo}, {hi}], "
                f"but got {d})"
            )
        out.append(int(d) % span)
    if len(set(out)) != len(out):
        raise ValueError(f"{api}: dim {dim!r} names a dimension twice")
    return tuple(sorted(out))


def _kept_shape(shape: tuple, dims: tuple | None) -> tuple:
    if dims is None:
        return (1,) * len(shape)
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


@primitive("sum", kind="reduce")
def _sum(x, *, dim, keepdim):
    if x.ndim == 0:
        return np.array(x, copy=True)
    return x.sum(axis=dim, keepdims=keepdim)


@_sum.vjp
def _(g, out, needs, x, dim, keepdim):
    if not keepdim and x.ndim:
        g = g.reshape(_kept_shape(x.shape, dim))
    return (g.expand(x.shape),)


@public
def sum(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Sum over ``dim`` (an int, a tuple, or None for all).

    Example:
        >>> import memgrad as mg
        >>> mg.ones(2, 3).sum(dim=1)
        tensor([3., 3.])
    """
    return _sum(input, dim=normalize_dims(dim, input.ndim, "sum"), keepdim=bool(keepdim))


@primitive("sum_to", kind="reduce")
def sum_to(x, *, shape):
    lead = x.ndim - len(shape)
    if lead < 0:
        raise ValueError(f"cannot sum shape {x.shape} to the larger shape {shape}")
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and x.shape[i + lead] != 1
    )
    if not axes:
        return x.reshape(shape)
    d = math.prod(x.shape[len(axes):])
    if (axes[-1] == len(axes) - 1 and d >= _COLUMN_SUM_MIN and x.flags.c_contiguous
            and x.dtype in (np.float32, np.float64)):
        # the leading axes of a contiguous float array (the bias gradients): the kernel
        from memgrad._kernels.reduce import column_sum_into

        return column_sum_into(x.reshape(-1, d), np.empty(d, x.dtype)).reshape(shape)
    return np.sum(x, axis=axes, keepdims=True).reshape(shape)


_COLUMN_SUM_MIN = 16  # the shortest rows sum_to gives the column-sum kernel (NumPy's below)


@sum_to.vjp
def _(g, out, needs, x, shape):
    return (g.expand(x.shape),)


def _extreme(name, np_fn):
    def forward(x, *, dim, keepdim):
        return np_fn(x, axis=dim, keepdims=keepdim)

    forward.__name__ = name
    prim = primitive(name, saves={"x": (0,), "out": (0,)}, kind="reduce")(forward)

    @prim.vjp
    def _(g, out, needs, x, dim, keepdim):
        # the gradient goes to the elements equal to the result, split evenly among ties
        if not keepdim and x.ndim:
            shape = _kept_shape(x.shape, dim)
            g = g.reshape(shape)
            out = out.reshape(shape)
        hit = x == out
        count = Tensor(np.sum(hit._data, axis=dim, keepdims=True, dtype=x.dtype))
        return (where(hit, g / count, 0.0),)

    return prim


_amax = _extreme("amax", np.max)
_amin = _extreme("amin", np.min)


@public
def amax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The largest values over ``dim`` (ties share the gradient evenly)."""
    _nonempty(input, "amax")
    return _amax(input, dim=normalize_dims(dim, input.ndim, "amax"), keepdim=bool(keepdim))


@public
def amin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """The smallest values over ``dim`` (ties share the gradient evenly)."""
    _nonempty(input, "amin")
    return _amin(input, dim=normalize_dims(dim, input.ndim, "amin"), keepdim=bool(keepdim))


def _nonempty(input: Tensor, api: str) -> None:
    if input.numel() == 0:
        raise RuntimeError(f"{api}(): cannot reduce an empty tensor of shape {input.shape}")


@public
def argmax(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the largest element over ``dim`` (flattened when ``dim`` is None)."""
    return _arg(input, dim, keepdim, np.argmax, "argmax")


@public
def argmin(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the smallest element over ``dim`` (flattened when ``dim`` is None)."""
    return _arg(input, dim, keepdim, np.argmin, "argmin")


def _arg(input, dim, keepdim, fn, api):
    _nonempty(input, api)
    if dim is None:
        r = fn(input._data)
        return Tensor(np.asarray(r, dtype=np.int64).reshape((1,) * input.ndim if keepdim else ()))
    (d,) = normalize_dims(dim, input.ndim, api)
    return Tensor(np.asarray(fn(input._data, axis=d, keepdims=keepdim), dtype=np.int64))


@public
def mean(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim``.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([1.0, 2.0, 6.0]).mean().item()
        3.0
    """
    dims = normalize_dims(dim, input.ndim, "mean")
    return sum(input, dims, keepdim) / _count(input.shape, dims)


def _count(shape, dims) -> int:
    n = 1
    for i, s in enumerate(shape):
        if dims is None or i in dims:
            n *= s
    return n


@public
def var(input: Tensor, dim=None, keepdim: bool = False, *, unbiased=None, correction=None):
    """Variance over ``dim`` with Bessel's correction (``correction=1``) by default.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([1.0, 2.0, 3.0]).var().item()
        1.0
    """
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    dims = normalize_dims(dim, input.ndim, "var")
    d = input - mean(input, dims, keepdim=True)
    return sum(d * d, dims, keepdim) / builtins.max(_count(input.shape, dims) - correction, 0)



@public
def std(input: Tensor, dim=None, keepdim: bool = False, *, unbiased=None, correction=None):
    """Standard deviation over ``dim`` (the square root of ``var``). Where the variance is
    zero the gradient is zero, as in PyTorch (not the NaN of the square root's derivative).

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([1.0, 3.0]).std().item()
        1.4142135381698608
    """
    normalize_dims(dim, input.ndim, "std")
    return _std_from_var(var(input, dim, keepdim, unbiased=unbiased, correction=correction))


@primitive("std_from_var", saves={"out": (0,)}, kind="reduce")
def _std_from_var(v):
    return np.sqrt(v)


@_std_from_var.vjp
def _(g, out, needs, v):
    zero = out == 0  # where the variance is 0 the gradient is 0 (and no 1 / 0 is computed)
    return (where(zero, 0.0, g / (where(zero, 1.0, out) * 2)),)


@public
def logsumexp(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(input)))`` over ``dim``, computed without overflow.

    Example:
        >>> import memgrad as mg
        >>> round(mg.tensor([0.0, 0.0]).logsumexp(dim=0).item(), 4)
        0.6931
    """
    dims = normalize_dims(dim, input.ndim, "logsumexp")
    m = _shift(input, dims)
    r = sum((input - m).exp(), dims, keepdim=True).log() + m
    if not keepdim:
        r = r.reshape(tuple(s for i, s in enumerate(r.shape) if dims is not None and i not in dims))
    return r


def _shift(input: Tensor, dims) -> Tensor:
    # a constant shift by the max (no gradient flows through it); rows of -inf shift by 0
    m = (np.max(input._data, axis=dims, keepdims=True, initial=-np.inf) if input.ndim
         else input._data)
    return Tensor(np.where(np.isfinite(m), m, 0).astype(input.dtype, copy=False))


# ---------------------------------------------------------------------------- softmax
#
# NOTE [ Fused softmax ]
# softmax and log_softmax are primitives backed by the row-wise kernels of
# memgrad/_kernels/softmax.py (one pass per row instead of NumPy's five over the array),
# and so are their backward formulas: ``softmax_backward`` and ``log_softmax_backward``
# are primitives too, with VJPs written in memgrad ops, so that double backward works.
# Both forwards save only their output.


# an element of the softmax kernels, in multiply-adds (for kernel_in_parts): rows of at
# least 2**18 elements run in parts (NOTE [ Row parts ] in ops/nn.py)
SOFTMAX_COST = 32


def _along_rows(kernel_into, dim: int, *arrays: np.ndarray) -> np.ndarray:
    """Run a row-wise (N, D) kernel that writes into its last argument along axis ``dim``:
    that axis moved last and the others flattened into rows (a copy unless ``dim`` is
    already last and the data contiguous), in parts of the rows when there are enough
    (``parts.kernel_in_parts``: each part is one kernel call on its rows, so the result does
    not depend on the split). The result is C-contiguous, as PyTorch's is (so that ``.view``
    of it works)."""
    dtype = np.result_type(*arrays)
    if arrays[0].ndim == 0:
        out = np.empty((1, 1), dtype)
        kernel_into(*(np.asarray(a, dtype=dtype).reshape(1, 1) for a in arrays), out)
        return out.reshape(())
    moved = [np.moveaxis(a, dim, -1) for a in arrays]
    shape = moved[0].shape
    if moved[0].size == 0:  # no rows, or rows of length 0 (PyTorch returns the empty tensor)
        return np.zeros(arrays[0].shape, dtype=dtype)
    rows = tuple(np.ascontiguousarray(m, dtype=dtype).reshape(-1, shape[-1]) for m in moved)
    out = np.empty(rows[0].shape, dtype)
    parts.kernel_in_parts(kernel_into, out.shape[0], 1, out.size * SOFTMAX_COST, rows, out)
    return np.ascontiguousarray(np.moveaxis(out.reshape(shape), -1, dim))


@primitive("softmax", saves={"out": (0,)}, kind="reduce")
def _softmax(x, *, dim):
    from memgrad._kernels.softmax import softmax_forward_into

    return _along_rows(softmax_forward_into, dim, x)


@_softmax.vjp
def _(g, out, needs, x, dim):
    return (softmax_backward(g, out, dim=dim),)


@primitive("softmax_backward", saves={"g": (1,), "y": (0, 1)}, kind="reduce")
def softmax_backward(g, y, *, dim):
    """``y * (g - sum(g * y, dim))``: the VJP of ``y = softmax(x, dim)``, in one op;
    itself differentiable."""
    from memgrad._kernels.softmax import softmax_backward_into as kernel

    return _along_rows(kernel, dim, g, y)


@softmax_backward.vjp
def _(gg, out, needs, g, y, dim):
    # linear in g with a symmetric Jacobian (diag(y) - y y^T): the same op gives its VJP
    gg_g = softmax_backward(gg, y, dim=dim) if needs[0] else None
    gy = None
    if needs[1]:
        gy = gg * (g - sum(g * y, dim, keepdim=True)) - g * sum(gg * y, dim, keepdim=True)
    return gg_g, gy


@primitive("log_softmax", saves={"out": (0,)}, kind="reduce")
def _log_softmax(x, *, dim):
    from memgrad._kernels.softmax import log_softmax_forward_into

    return _along_rows(log_softmax_forward_into, dim, x)


@_log_softmax.vjp
def _(g, out, needs, x, dim):
    return (log_softmax_backward(g, out, dim=dim),)


@primitive("log_softmax_backward", saves={"g": (1,), "y": (0, 1)}, kind="reduce")
def log_softmax_backward(g, y, *, dim):
    """``g - exp(y) * sum(g, dim)``: the VJP of ``y = log_softmax(x, dim)``, in one op;
    itself differentiable."""
    from memgrad._kernels.softmax import log_softmax_backward_into as kernel

    return _along_rows(kernel, dim, g, y)


@log_softmax_backward.vjp
def _(gg, out, needs, g, y, dim):
    p = y.exp()
    gg_g = gg - sum(gg * p, dim, keepdim=True) if needs[0] else None
    gy = -gg * p * sum(g, dim, keepdim=True) if needs[1] else None
    return gg_g, gy


def _softmax_dim(input: Tensor, dim, api: str) -> int:
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{api}: dim must be an int, got {dim!r}")
    if input.dtype not in (np.float32, np.float64):
        raise TypeError(
            f"{api}: expected a float32 or float64 tensor, got dtype {input.dtype}; convert "
            "it first, e.g. with .float()"
        )
    return normalize_dims(dim, input.ndim, api)[0]


@public
def softmax(input: Tensor, dim: int) -> Tensor:
    """Softmax over ``dim``: ``exp(x) / sum(exp(x), dim)``, computed without overflow.

    A slice that is all ``-inf`` gives NaN, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([0.0, 0.0]).softmax(dim=0)
        tensor([0.5, 0.5])
    """
    return _softmax(input, dim=_softmax_dim(input, dim, "softmax"))


@public
def log_softmax(input: Tensor, dim: int) -> Tensor:
    """``log(softmax(input, dim))``, computed stably (``x - logsumexp(x, dim)``).

    Example:
        >>> import memgrad as mg
        >>> round(mg.tensor([0.0, 0.0]).log_softmax(dim=0)[0].item(), 4)
        -0.6931
    """
    return _log_softmax(input, dim=_softmax_dim(input, dim, "log_softmax"))
