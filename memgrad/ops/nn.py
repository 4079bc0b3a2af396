"""Neural-network ops: ``linear``, ``gelu``, ``dropout``, ``layer_norm``, ``embedding``, the
losses (``cross_entropy``, ``nll_loss``, ``mse_loss``, ``l1_loss``,
``binary_cross_entropy_with_logits``), ``scaled_dot_product_attention`` and the activations
``relu`` (with its ``inplace`` form), ``silu``, ``leaky_relu``, ``elu``, ``softplus`` and
``mish`` (NOTE [ Activation primitives ]);
``softmax`` and ``log_softmax`` (primitives of ops/reduce.py) are re-exported here.

``linear``, ``gelu``, ``dropout``, ``layer_norm``, ``embedding`` and ``nll_loss`` are
primitives of the op table. Where a fused kernel computes a backward (``gelu``,
``layer_norm``, ``nll_loss``), that backward is a primitive too, whose VJP is written in
memgrad ops, so that double backward works (see NOTE [ One op, one place ] in
ops/registry.py). ``cross_entropy`` is ``nll_loss`` after ``log_softmax``; ``mse_loss`` and
attention are composites: no fused kernel pays for itself there.

An optional tensor argument that is absent (``bias=None``) reaches a primitive as
``None``, a constant like a Python scalar. The numba kernels are imported on first use, so
that ``import memgrad`` does not import numba.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops import parts
from memgrad.ops.elementwise import (
    clamp,
    exp,
    flat_kernel_in_parts,
    sigmoid,
    tanh,
    where,
)
from memgrad.ops.elementwise import relu as _relu
from memgrad.ops.inplace import _inplace, relu_
from memgrad.ops.movement import cat, index_scatter
from memgrad.ops.reduce import SOFTMAX_COST, log_softmax, mean, softmax, sum_to
from memgrad.ops.registry import primitive
from memgrad.random import generator
from memgrad.tensor import Tensor

__all__ = [
    "linear",
    "gelu",
    "softmax",
    "log_softmax",
    "dropout",
    "layer_norm",
    "embedding",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "scaled_dot_product_attention",
    "relu",
    "silu",
    "leaky_relu",
    "elu",
    "softplus",
    "mish",
    "l1_loss",
    "binary_cross_entropy_with_logits",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_REDUCTIONS = ("mean", "sum", "none")


def _check_float(input: Tensor, api: str) -> None:
    if input.dtype not in _FLOATS:
        raise TypeError(
            f"{api}: expected a float32 or float64 tensor, got dtype {input.dtype}; convert "
            "it first, e.g. with .float()"
        )


# NOTE [ Row parts ]
# The kernels stay serial (NOTE [ Serial kernels ] in ops/conv.py); the transformer's
# kernel-backed primitives (gelu and gelu_backward, layer_norm and its two backward
# primitives, attention_softmax and its backward, softmax and log_softmax and their
# backward primitives in ops/reduce.py) and relu_backward run them on contiguous
# parts of their rows or elements instead, one part per BLAS thread with the helper
# threads of ``in_parts`` (NOTE [ Batch parts ] in ops/parts.py), each kernel writing its
# part of one output (``*_into`` kernels): PyTorch runs these ops on every core, and at
# W2's sizes they are several milliseconds each, long against the hand-off. Parts hold
# whole rows, whole attention matrices (the causal mask counts rows within a matrix) and
# whole 64-row chunks of the layer norm weight gradient, whose chunk sums are added in
# order after, so every result is bitwise that of one kernel call. Where the hand-off is set
# up, the GELU, relu and softmax kernels' parts (the row softmax and log_softmax too) run
# as compiled jobs without the GIL instead (NOTE [ Kernels as jobs ] in ops/parts.py), and
# the layer norm kernels' as jobs of their own (NOTE [ Layer norm as jobs ]).


def _rows_in_parts(blocks: int, rows_per_block: int, cost: int, work: Any) -> None:
    """``work(lo, hi)`` over the rows of ``blocks`` blocks of ``rows_per_block`` rows, in
    contiguous parts of whole blocks, one part per BLAS thread (NOTE [ Batch parts ] in
    ops/parts.py); ``cost`` is the whole op's work in multiply-adds. Row kernels that write
    their part of one output, so the result does not depend on the split."""
    parts.in_parts(blocks, cost,
                   lambda lo, hi: work(lo * rows_per_block, hi * rows_per_block))


# ---------------------------------------------------------------------------- linear


ADD_BLOCK_BYTES = 1 << 20  # the temporary of one row block of _add_product
# multiply-adds from which a product that adds into its output goes to BLAS through
# parts.Gemm (NOTE [ Accumulating GEMM ]): below, its ctypes call and checks cost more than
# the pass they save
GEMM_MIN_MACS = parts.PARTS_MIN_MACS

# NOTE [ A linear layer's bias first ]
# A linear layer with a bias computes as PyTorch's addmm does: the bias broadcast into the
# output, then the product added to it by one ``cblas_?gemm`` with beta 1 (``parts.addmm``),
# where the bias is written and the BLAS called from one compiled function
# (``memgrad/_kernels/blas.py``). The product first and the bias added after it took a
# second pass over an output that the two BLAS threads had just written, each half in its
# own core's cache: at nanoGPT's smallest sizes (256 rows, 64 inputs, 64 to 256 outputs) the
# add cost 10-30 us of a 25-90 us layer. Each element is the product's sum and the bias
# with one rounding either way; where OpenBLAS adds a long inner dimension into the output
# block by block (inner dimensions above 256), the bias comes first rather than last and
# the last bit may differ. Large products of more rows than columns run in parts of their
# rows as jobs (NOTE [ A linear layer's bias in parts of its rows ] in ops/parts.py).
# Without numba's compiler, for large products before the hand-off is set up (NOTE
# [ Products in parts of their rows ] in ops/parts.py) and for operands BLAS cannot take,
# ``parts.addmm`` fills the output with NumPy and calls ``Gemm``, or declines.


@primitive("linear", saves={"x": (1,), "weight": (0,)}, kind="matmul", accumulates=(1,),
           sink_block_bytes=ADD_BLOCK_BYTES)
def _linear(x, weight, bias):
    # one GEMM over the flattened leading dimensions
    x2 = x.reshape(-1, x.shape[-1])
    if bias is not None:  # NOTE [ A linear layer's bias first ]
        out = parts.addmm(x2, weight.T, bias)
        if out is not None:
            return out.reshape(x.shape[:-1] + (weight.shape[0],))
    out = parts.rows_product(x2, weight.T)
    if bias is not None:
        if bias.dtype == out.dtype:
            out += bias
        else:
            out = out + bias
    return out.reshape(x.shape[:-1] + (weight.shape[0],))


@_linear.vjp
def _(g, out, needs, x, weight, bias, sinks=None):
    # one op per gradient (NOTE [ Linear gradients ])
    gx = linear_input_grad(g, weight) if needs[0] else None
    gw = None
    if needs[1]:
        if sinks:  # added into weight.grad in row blocks (NOTE [ Accumulate in place ])
            gd, xd = g.numpy(), x.numpy()
            _add_product(sinks[1].numpy(), gd.reshape(-1, gd.shape[-1]).T,
                         xd.reshape(-1, xd.shape[-1]))
        else:
            gw = linear_weight_grad(g, x)
    gb = _bias_grad(g, bias.shape) if needs[2] else None
    return gx, gw, gb


def _bias_grad(g: Tensor, shape: tuple) -> Tensor:
    """The sum of ``g`` over its rows; a contiguous ``g`` in one op, ``sum_to`` over its
    leading dims (the column-sum kernel for float rows)."""
    if len(g.shape) > 1 and g._data.flags.c_contiguous:
        return sum_to(g, shape=shape)
    return g.reshape(-1, g.shape[-1]).sum(0)


# NOTE [ Linear gradients ]
# linear's input and weight gradients are primitives of one op each, ``linear_input_grad``
# (g @ weight over the last dim) and ``linear_weight_grad`` (g^T x over the flattened
# leading dims), rather than reshapes, a transpose and matmuls: at a small model's sizes
# the step is mostly the cost of its ops, and these are the same NumPy products. Each one's
# VJP is the other one or ``linear`` itself, so double backward works.


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1])


@primitive("linear_input_grad", saves={"g": (1,), "weight": (0,)}, kind="matmul")
def linear_input_grad(g, weight):
    """``g @ weight`` over the last dim of ``g``: the input gradient of ``linear``; itself
    differentiable (NOTE [ Linear gradients ] in ops/nn.py).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import linear_input_grad
        >>> linear_input_grad(mg.ones(2, 3), mg.ones(3, 4)).shape
        (2, 4)
    """
    if weight.ndim != 2 or g.ndim == 0 or g.shape[-1] != weight.shape[0]:
        raise ValueError(f"expected g (..., {weight.shape[0] if weight.ndim == 2 else 'n'}) and "
                         f"a 2-D weight, got shapes {g.shape} and {weight.shape}")
    return parts.rows_product(_flat(g), weight).reshape(g.shape[:-1] + weight.shape[1:])


@linear_input_grad.vjp
def _(u, out, needs, g, weight):
    return (_linear(u, weight, None) if needs[0] else None,
            linear_weight_grad(g, u) if needs[1] else None)


@primitive("linear_weight_grad", saves={"g": (1,), "x": (0,)}, kind="matmul")
def linear_weight_grad(g, x):
    """``g^T x`` over the flattened leading dims of ``g`` (..., out) and ``x`` (..., in): the
    weight gradient of ``linear``, (out, in); itself differentiable (NOTE [ Linear
    gradients ] in ops/nn.py).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import linear_weight_grad
        >>> linear_weight_grad(mg.ones(5, 2, 3), mg.ones(5, 2, 4)).shape
        (3, 4)
    """
    if g.ndim == 0 or x.ndim == 0 or g.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"expected g (..., out) and x (..., in) with the same leading dims, "
                         f"got shapes {g.shape} and {x.shape}")
    return parts.rows_product(_flat(g).T, _flat(x))


@linear_weight_grad.vjp
def _(u, out, needs, g, x):
    return (_linear(x, u, None) if needs[0] else None,
            linear_input_grad(g, u) if needs[1] else None)


def _add_product(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``c += a @ b``: in BLAS straight into ``c`` for large products, else in row blocks, so
    that the temporary is at most about 1 MiB."""
    if c.size * a.shape[1] >= GEMM_MIN_MACS and a.dtype == b.dtype == c.dtype:
        product = parts.Gemm(a, b, c)
        if product.blas:
            product(0, 0, 0, 1.0)
            return
    rows = max(1, ADD_BLOCK_BYTES // max(1, b.shape[1] * c.itemsize))
    for r in range(0, c.shape[0], rows):
        c[r : r + rows] += a[r : r + rows] @ b


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``: an affine map of the last dimension.

    Args:
        input: (..., in_features).
        weight: (out_features, in_features).
        bias: (out_features,) or None.

    Returns:
        (..., out_features).

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.linear(mg.ones(4, 3), mg.ones(2, 3), mg.zeros(2)).shape
        (4, 2)
    """
    if weight.ndim != 2:
        raise ShapeError(
            f"linear: weight must be 2-D (out_features, in_features), got shape {weight.shape}"
        )
    if input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        raise ShapeError(
            f"linear: input of shape {input.shape} does not fit weight of shape "
            f"{weight.shape}: the last dimension of input must be in_features = "
            f"{weight.shape[1]} (weight is (out_features, in_features))"
        )
    if bias is not None and not isinstance(bias, Tensor):
        raise TypeError(
            f"linear: bias must be a Tensor of shape ({weight.shape[0]},) (out_features) or "
            f"None, got {type(bias).__name__}; make one with mg.full(({weight.shape[0]},), value)"
        )
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ShapeError(
            f"linear: bias must have shape ({weight.shape[0]},) (out_features), got "
            f"{bias.shape}"
        )
    return _linear(input, weight, bias)


@primitive("linear_rows", saves={"x": (1,), "weight": (0,)}, kind="matmul")
def linear_rows(x, weight, bias, *, lo, hi):
    """``linear(x, weight[lo:hi], bias[lo:hi])`` in one op: one of several projections whose
    weights are stacked in one parameter (attention's queries, keys and values), without
    slicing ops of its own; itself differentiable.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import linear_rows
        >>> linear_rows(mg.ones(2, 3), mg.ones(6, 3), None, lo=2, hi=4).shape
        (2, 2)
    """
    if weight.ndim != 2 or not 0 <= lo < hi <= weight.shape[0]:
        raise ValueError(f"expected a 2-D weight and 0 <= lo < hi <= its rows, got shape "
                         f"{weight.shape}, lo={lo}, hi={hi}")
    return _linear.forward(x, weight[lo:hi], None if bias is None else bias[lo:hi])


@linear_rows.vjp
def _(g, out, needs, x, weight, bias, lo, hi):
    rows = (slice(lo, hi, None), Ellipsis)  # the index of weight[lo:hi]
    gx = linear_input_grad(g, weight[lo:hi]) if needs[0] else None
    gw = index_scatter(linear_weight_grad(g, x), shape=weight.shape, index=rows) \
        if needs[1] else None
    gb = None
    if needs[2]:
        part = _bias_grad(g, (hi - lo,))
        gb = index_scatter(part, shape=bias.shape, index=rows)
    return gx, gw, gb


# ---------------------------------------------------------------------------- gelu

_K = math.sqrt(2 / math.pi)
_C = 0.044715
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_GELU_COST = 64  # an element of the GELU kernels, in multiply-adds (for flat_kernel_in_parts)


@primitive("gelu", saves={"x": (0,)})
def _gelu(x, *, approximate):
    from memgrad._kernels import activation

    kernel = activation.gelu_tanh_into if approximate == "tanh" else activation.gelu_into
    return flat_kernel_in_parts(kernel, _GELU_COST, x)


@_gelu.vjp
def _(g, out, needs, x, approximate):
    return (gelu_backward(g, x, approximate=approximate),)


@primitive("gelu_backward", saves={"g": (1,), "x": (0, 1)})
def gelu_backward(g, x, *, approximate):
    """``g * gelu'(x)`` in one op; itself differentiable."""
    from memgrad._kernels import activation

    kernel = (activation.gelu_tanh_backward_into if approximate == "tanh"
              else activation.gelu_backward_into)
    return flat_kernel_in_parts(kernel, _GELU_COST, g, x)


@gelu_backward.vjp
def _(gg, out, needs, g, x, approximate):
    return (
        gelu_backward(gg, x, approximate=approximate) if needs[0] else None,
        gg * g * _gelu_second_derivative(x, approximate) if needs[1] else None,
    )


def _gelu_second_derivative(x: Tensor, approximate: str) -> Tensor:
    if approximate == "tanh":
        # gelu = x (1 + tanh(u)) / 2, u = k (x + c x^3):
        # gelu'' = (1 - t^2) (u' - x t u'^2 + x u'' / 2), u'' = 6 k c x
        x2 = x * x
        t = tanh((x + x2 * x * _C) * _K)
        du = (x2 * (3 * _C) + 1.0) * _K
        return (1.0 - t * t) * (du - x * t * du * du + x2 * (3 * _C * _K))
    # gelu = x Phi(x): gelu'' = phi(x) (2 - x^2)
    x2 = x * x
    return exp(x2 * -0.5) * (2.0 - x2) * _INV_SQRT_2PI


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """The Gaussian error linear unit ``x * Phi(x)`` (``Phi`` the standard normal CDF).

    Args:
        input: a float32 or float64 tensor.
        approximate: ``"none"`` for the exact (erf) form, ``"tanh"`` for
            ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    Example:
        >>> import memgrad as mg
        >>> round(mg.nn.functional.gelu(mg.tensor([1.0])).item(), 4)
        0.8413
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    _check_float(input, "gelu")
    return _gelu(input, approximate=approximate)


# ---------------------------------------------------------------------------- dropout


@primitive("dropout", saves={"mask": (0,)})
def _dropout(x, mask, *, scale):
    out = np.multiply(x, x.dtype.type(scale))
    np.multiply(out, mask, out=out)
    return out


@_dropout.vjp
def _(g, out, needs, x, mask, scale):
    return _dropout(g, mask, scale=scale), None


def dropout(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``, so
    that the expectation is unchanged.

    The mask is drawn from memgrad's global generator (``mg.manual_seed`` makes it
    reproducible; restoring a state from ``mg.get_rng_state`` replays it) and kept for
    backward as a bool tensor. With ``training=False`` or ``p=0`` the input itself is
    returned; with ``p=1`` the result is zeros.

    Example:
        >>> import memgrad as mg
        >>> mg.manual_seed(0)
        >>> y = mg.nn.functional.dropout(mg.ones(1000), p=0.5)
        >>> sorted(set(y.tolist()))
        [0.0, 2.0]
    """
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) or not (
        0.0 <= p <= 1.0
    ):
        raise ValueError(f"dropout: probability p has to be between 0 and 1, but got {p!r}")
    if not training or p == 0:
        return input
    _check_float(input, "dropout")
    if p == 1:
        return _dropout(input, Tensor(np.zeros(input.shape, dtype=bool)), scale=1.0)
    keep = generator().random(input.shape, dtype=np.float32) >= np.float32(p)
    return _dropout(input, Tensor(keep), scale=1.0 / (1.0 - p))


# ---------------------------------------------------------------------------- layer_norm
#
# NOTE [ Fused layer norm ]
# layer_norm saves its input (and weight), never the normalized tensor: the backward
# kernels recompute each row's mean and rstd, which costs one extra read of a row that is
# in cache. Its VJP is three primitives: ``layer_norm_backward`` (input gradient, the
# weight folded in), ``layer_norm_weight_grad`` (sum over rows of g * normalized x) and
# sum_to (bias). The Jacobian J of the normalization is symmetric, so the VJPs of these
# primitives are again layer_norm_backward and layer_norm_weight_grad calls, plus a
# composite term for the second derivative with respect to x. When all three gradients are
# needed, they come from one primitive instead, ``layer_norm_grads``, one kernel pass over
# g and x (the separate kernels read both twice and g a third time for the bias): its
# result stacks them as rows of one array, which the VJP hands on as views, and its own
# VJP is the sum of the three separate ones.


_NORM_COST = 16  # an element of the layer norm kernels, in multiply-adds (for in_parts)


def _rows(x: np.ndarray, ndim: int, dtype: np.dtype) -> np.ndarray:
    d = math.prod(x.shape[x.ndim - ndim:])
    n = math.prod(x.shape[:x.ndim - ndim])
    return np.ascontiguousarray(x, dtype=dtype).reshape(n, d)


def _affine(t: np.ndarray | None, d: int, default: float, dtype: np.dtype) -> np.ndarray:
    if t is None:
        return np.full(d, default, dtype=dtype)
    return np.ascontiguousarray(t, dtype=dtype).reshape(d)


# NOTE [ Layer norm as jobs ]
# Where the hand-off is set up, the layer norm kernels' parts (NOTE [ Row parts ]) run as
# one compiled job, ``NORM_JOB`` (memgrad/_kernels/norm_jobs.py), rather than as Python
# parts: each part is the same kernel call on the same rows (whole chunks of rows for the
# weight gradient's sums, added in order after), so the results are those of the Python
# parts, bit for bit. A Python part is handed over with the GIL, some 50 us before the
# helper starts (a (2048, 256) forward took longer in two Python parts than on one thread);
# a job starts in some 10. Without the hand-off (or with ``NUMBA_DISABLE_JIT=1``), or for
# arrays the job cannot take as they lie, the kernels run as Python parts.


# multiply-adds (an element _NORM_COST) from which the layer norm kernels run as jobs
NORM_JOB_MIN_MACS = parts.PARTS_MIN_MACS


@functools.cache
def _norm_jobs() -> Any:
    from memgrad._kernels import norm_jobs

    return norm_jobs


def _norm_as_jobs(kind: str, blocks: int, rows_per_block: int, x: np.ndarray,
                  g: np.ndarray | None, w: np.ndarray | None, b: np.ndarray | None,
                  out: np.ndarray | None, partial: np.ndarray | None, eps: float) -> bool:
    """The layer norm kernel ``kind`` ("forward", "backward", "weight_grad" or "grads") on
    the rows of ``x`` (N, D), in parts of ``blocks`` blocks of ``rows_per_block`` rows, as
    jobs on the helpers (NOTE [ Layer norm as jobs ]); False, with nothing written, where
    that does not run: as ``parts.batch_as_jobs``, or arrays the job cannot take as they lie
    (checked here: the job reads and writes where the addresses point)."""
    n, d = x.shape
    if n * d * _NORM_COST < NORM_JOB_MIN_MACS:  # too small: before the checks below
        return False
    dtype = x.dtype
    sums = {"weight_grad": blocks * d, "grads": 2 * blocks * d}.get(kind)  # a block a chunk
    if dtype not in _FLOATS or n == 0 or d == 0 or not x.flags.c_contiguous \
            or not (blocks - 1) * rows_per_block < n <= blocks * rows_per_block:
        return False
    for a, shape in ((g, x.shape), (w, (d,)), (b, (d,)), (out, x.shape)):
        if a is not None and (a.dtype != dtype or a.shape != shape or not a.flags.c_contiguous):
            return False
    if out is not None and (not out.flags.writeable or np.may_share_memory(out, x)
                            or (g is not None and np.may_share_memory(out, g))):
        return False
    if sums is not None and (partial is None or partial.dtype != np.float64
                             or partial.size != sums or not partial.flags.c_contiguous
                             or not partial.flags.writeable):
        return False

    def words_of(ends: list) -> np.ndarray:
        jobs = _norm_jobs()
        words = np.zeros((len(ends) - 1, jobs.NORM_WORDS), np.int64)
        for j, row in enumerate(words):
            row[jobs.N_KIND] = getattr(jobs, kind.upper())
            row[jobs.N_DOUBLE] = dtype == np.float64
            row[jobs.N_LO] = ends[j] * rows_per_block
            row[jobs.N_HI] = min(ends[j + 1] * rows_per_block, n)
            row[jobs.N_ROWS], row[jobs.N_D] = n, d
            row[jobs.N_EPS] = np.float64(eps).view(np.int64)
            for word, a in ((jobs.N_X, x), (jobs.N_G, g), (jobs.N_W, w), (jobs.N_B, b),
                            (jobs.N_OUT, out), (jobs.N_PARTIAL, partial)):
                row[word] = (x if a is None else a).ctypes.data  # x where it is not read
        return words

    return parts.batch_as_jobs(blocks, n * d * _NORM_COST, lambda: _norm_jobs().NORM_JOB,
                               words_of, min_macs=NORM_JOB_MIN_MACS)


def _norm_in_parts(kind: str, blocks: int, rows_per_block: int, work: Any, x: np.ndarray,
                   g: np.ndarray | None, w: np.ndarray | None, b: np.ndarray | None,
                   out: np.ndarray | None, partial: np.ndarray | None, eps: float) -> None:
    """The layer norm kernel ``kind`` over the rows of ``x``: as jobs where
    ``_norm_as_jobs`` runs it, else ``work(lo, hi)`` over the blocks in Python parts."""
    if not _norm_as_jobs(kind, blocks, rows_per_block, x, g, w, b, out, partial, eps):
        _rows_in_parts(blocks, rows_per_block, x.size * _NORM_COST, work)


@primitive("layer_norm", saves={"x": (0, 1), "weight": (0,)}, kind="norm")
def _layer_norm(x, weight, bias, *, ndim, eps):
    from memgrad._kernels.norm import layer_norm_forward_into

    rows = _rows(x, ndim, x.dtype)
    n, d = rows.shape
    if rows.size == 0:  # nothing to normalize: the empty result, as in PyTorch
        return np.zeros(x.shape, dtype=x.dtype)
    w, b = _affine(weight, d, 1.0, x.dtype), _affine(bias, d, 0.0, x.dtype)
    out = np.empty_like(rows)
    _norm_in_parts("forward", n, 1,
                   lambda lo, hi: layer_norm_forward_into(rows[lo:hi], w, b, eps, out[lo:hi]),
                   rows, None, w, b, out, None, eps)
    return out.reshape(x.shape)


@_layer_norm.vjp
def _(g, out, needs, x, weight, bias, ndim, eps):
    if needs[0] and needs[1] and needs[2]:
        # all three from one pass over g and x (NOTE [ Fused layer norm ])
        packed = layer_norm_grads(g, x, weight, ndim=ndim, eps=eps)
        n = packed.shape[0] - 2
        gw, gb = packed[n], packed[n + 1]  # (d,): for one normalized dim, their shape
        return (packed[:n].reshape(x.shape),
                gw if gw.shape == weight.shape else gw.reshape(weight.shape),
                gb if gb.shape == bias.shape else gb.reshape(bias.shape))
    return (
        layer_norm_backward(g, x, weight, ndim=ndim, eps=eps) if needs[0] else None,
        layer_norm_weight_grad(g, x, ndim=ndim, eps=eps) if needs[1] else None,
        sum_to(g, shape=bias.shape) if needs[2] else None,
    )


@primitive("layer_norm_backward", saves={"g": (1, 2), "x": (0, 1, 2), "weight": (0, 1),
                                          "out": (1,)}, kind="norm")
def layer_norm_backward(g, x, weight, *, ndim, eps):
    """``J(x) (g * weight)``: the input gradient of ``layer_norm`` (J the Jacobian of the
    normalization over the last ``ndim`` dims), in one op; itself differentiable."""
    from memgrad._kernels.norm import layer_norm_backward_into

    dtype = np.result_type(g, x)
    rows, gr = _rows(x, ndim, dtype), _rows(g, ndim, dtype)
    n, d = rows.shape
    w = _affine(weight, d, 1.0, dtype)
    out = np.empty_like(rows)
    if rows.size:
        _norm_in_parts("backward", n, 1,
                       lambda lo, hi: layer_norm_backward_into(gr[lo:hi], rows[lo:hi], w, eps,
                                                               out[lo:hi]),
                       rows, gr, w, None, out, None, eps)
    return out.reshape(x.shape)


@layer_norm_backward.vjp
def _(u, out, needs, g, x, weight, ndim, eps):
    ju = layer_norm_backward(u, x, None, ndim=ndim, eps=eps)  # J u (J is symmetric)
    gg = None
    if needs[0]:
        gg = ju * weight if weight is not None else ju
    gx = None
    if needs[1]:
        # d/dx of r (a - mean(a) - h mean(a h)), a = g * weight, h = (x - mean) r, taken
        # along u: -r (h mean(u out) + out mean(u h) + mean(a h) J u)
        dims = tuple(range(len(x.shape) - ndim, len(x.shape)))
        xc = x - mean(x, dims, keepdim=True)
        rstd = (mean(xc * xc, dims, keepdim=True) + eps) ** -0.5
        h = xc * rstd
        a = g * weight if weight is not None else g
        gx = -rstd * (
            h * mean(u * out, dims, keepdim=True)
            + out * mean(u * h, dims, keepdim=True)
            + mean(a * h, dims, keepdim=True) * ju
        )
    gw = sum_to(g * ju, shape=weight.shape) if needs[2] else None
    return gg, gx, gw


@primitive("layer_norm_grads", saves={"g": (1, 2), "x": (0, 1, 2), "weight": (0, 1),
                                       "out": (1,)}, kind="norm")
def layer_norm_grads(g, x, weight, *, ndim, eps):
    """The three gradients of ``layer_norm`` in one op, stacked as rows of one (n + 2, d)
    array: the input gradient ``J(x) (g * weight)`` as n rows (of d, the normalized size),
    then the weight gradient (``layer_norm_weight_grad``) and the bias gradient (the sum
    of ``g`` over rows); itself differentiable (NOTE [ Fused layer norm ])."""
    from memgrad._kernels.norm import ROWS_PER_CHUNK, layer_norm_grads_chunks, sum_chunks_into

    dtype = np.result_type(g, x)
    rows, gr = _rows(x, ndim, dtype), _rows(g, ndim, dtype)
    n, d = rows.shape
    w = _affine(weight, d, 1.0, dtype)
    packed = np.empty((n + 2, d), dtype)
    partial = np.zeros(((n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK, 2, d))

    def work(lo: int, hi: int) -> None:  # whole chunks, summed in order after
        hi = min(hi, n)
        c0, c1 = lo // ROWS_PER_CHUNK, (hi + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK
        layer_norm_grads_chunks(gr[lo:hi], rows[lo:hi], w, eps, packed[lo:hi],
                                partial[c0:c1])

    if rows.size:
        _norm_in_parts("grads", partial.shape[0], ROWS_PER_CHUNK, work, rows, gr, w, None,
                       packed[:n], partial, eps)
    sum_chunks_into(partial.reshape(partial.shape[0], 2 * d), packed[n:].reshape(2 * d))
    return packed


@layer_norm_grads.vjp
def _(u, out, needs, g, x, weight, ndim, eps):
    # the VJPs of the three separate gradients (layer_norm_backward, layer_norm_weight_grad
    # and sum_to), each on its rows of u, added
    n = u.shape[0] - 2
    tail = x.shape[len(x.shape) - ndim:]
    ux, uw, ub = u[:n].reshape(x.shape), u[n].reshape(tail), u[n + 1].reshape(tail)
    gx_out = None if out is None else out[:n].reshape(x.shape)
    a = layer_norm_backward.vjp_fn(ux, gx_out, needs, g, x, weight, ndim=ndim, eps=eps)
    b = layer_norm_weight_grad.vjp_fn(uw, None, needs[:2], g, x, ndim=ndim, eps=eps)
    gg = a[0] + b[0] + ub if needs[0] else None
    gx = a[1] + b[1] if needs[1] else None
    return gg, gx, a[2]


@primitive("layer_norm_weight_grad", saves={"g": (1,), "x": (0, 1)}, kind="norm")
def layer_norm_weight_grad(g, x, *, ndim, eps):
    """``sum over leading dims of g * normalized(x)``: the weight gradient of
    ``layer_norm``, in one op; itself differentiable."""
    from memgrad._kernels.norm import ROWS_PER_CHUNK, layer_norm_weight_grad_chunks, sum_chunks_into

    dtype = np.result_type(g, x)
    rows, gr = _rows(x, ndim, dtype), _rows(g, ndim, dtype)
    n, d = rows.shape
    # sums of chunks of rows, in parts of whole chunks, then the chunks in order (as one
    # call of the kernels' layer_norm_weight_grad sums them: the split changes nothing)
    partial = np.zeros(((n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK, d))

    def work(lo: int, hi: int) -> None:
        c0, c1 = lo // ROWS_PER_CHUNK, (hi + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK
        layer_norm_weight_grad_chunks(gr[lo:hi], rows[lo:hi], eps, partial[c0:c1])

    if rows.size:
        _norm_in_parts("weight_grad", partial.shape[0], ROWS_PER_CHUNK, work, rows, gr, None,
                       None, None, partial, eps)
    total = np.empty(d, dtype)
    sum_chunks_into(partial, total)
    return total.reshape(x.shape[x.ndim - ndim:])


@layer_norm_weight_grad.vjp
def _(v, out, needs, g, x, ndim, eps):
    return (
        v * _layer_norm(x, None, None, ndim=ndim, eps=eps) if needs[0] else None,
        layer_norm_backward(g, x, v, ndim=ndim, eps=eps) if needs[1] else None,
    )


def layer_norm(
    input: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the trailing ``normalized_shape`` dims to mean 0 and variance 1
    (biased variance), then scale by ``weight`` and shift by ``bias``.

    Args:
        input: (*, *normalized_shape), float32 or float64.
        normalized_shape: the trailing shape to normalize over (an int for one dim).
        weight: a tensor of ``normalized_shape``, or None.
        bias: a tensor of ``normalized_shape``, or None.
        eps: added to the variance.

    Example:
        >>> import memgrad as mg
        >>> y = mg.nn.functional.layer_norm(mg.tensor([[1.0, 3.0]]), 2)
        >>> [round(v, 3) for v in y.tolist()[0]]
        [-1.0, 1.0]
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(
        normalized_shape
    )
    k = len(shape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k:]) != shape:
        raise ShapeError(
            f"layer_norm: normalized_shape={list(shape)} needs an input of shape "
            f"(*, {', '.join(map(str, shape))}), got input of shape {input.shape}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise ShapeError(
                f"layer_norm: {name} must have normalized_shape {shape}, got {t.shape}"
            )
    _check_float(input, "layer_norm")
    return _layer_norm(input, weight, bias, ndim=k, eps=float(eps))


# ---------------------------------------------------------------------------- embedding


@primitive("embedding", saves={"indices": (1,)}, kind="movement")
def _embedding(indices, weight, *, padding_idx):
    return np.take(weight, indices, axis=0)


@_embedding.vjp
def _(g, out, needs, indices, weight, padding_idx):
    idx = indices.numpy().reshape(-1)
    g2 = g.reshape(-1, weight.shape[1])
    if padding_idx is not None:
        g2 = where(Tensor((idx != padding_idx)[:, None]), g2, 0.0)
    # scatter-add of the rows (index_add_rows), repeated indices summed
    return None, index_scatter(g2, shape=weight.shape, index=(idx, Ellipsis))


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Look up rows of ``weight`` (num_embeddings, embedding_dim) at the integer indices
    ``input`` (any shape); the result has shape ``(*input.shape, embedding_dim)``.

    The gradient of ``weight`` sums the gradients of repeated indices; the row
    ``padding_idx`` (negative counts from the end) gets no gradient.

    Example:
        >>> import memgrad as mg
        >>> w = mg.arange(6.0).reshape(3, 2)
        >>> mg.nn.functional.embedding(mg.tensor([2, 0]), w)
        tensor([[4., 5.],
                [0., 1.]])
    """
    if weight.ndim != 2:
        raise ShapeError(
            f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape "
            f"{weight.shape}"
        )
    indices = input if isinstance(input, Tensor) else Tensor(np.array(input))
    idx = indices.numpy()
    if idx.dtype.kind not in "iu":
        raise TypeError(
            f"embedding: input must hold integer indices (e.g. dtype mg.int64), got dtype "
            f"{idx.dtype}"
        )
    n = weight.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx.min() if idx.min() < 0 else idx.max()
        raise IndexError(
            f"embedding: index {int(bad)} is out of range for a weight with {n} rows "
            f"(valid: 0 to {n - 1})"
        )
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(
                f"embedding: padding_idx must be within num_embeddings ({n}), got {padding_idx}"
            )
        padding_idx = int(padding_idx) % n
    return _embedding(indices, weight, padding_idx=padding_idx)


# ---------------------------------------------------------------------------- losses


@primitive("nll_loss", saves={"target": (0,)}, kind="loss")
def _nll(logp, target, *, ignore_index, label_smoothing):
    from memgrad._kernels.loss import nll_forward

    return nll_forward(np.ascontiguousarray(logp), target, ignore_index, label_smoothing)


@_nll.vjp
def _(g, out, needs, logp, target, ignore_index, label_smoothing):
    gl = nll_backward(g, target, classes=logp.shape[1], ignore_index=ignore_index,
                      label_smoothing=label_smoothing)
    return gl, None


@primitive("nll_loss_backward", saves={"target": (0,)}, kind="loss")
def nll_backward(g, target, *, classes, ignore_index, label_smoothing):
    """``-g[:, None] * q`` (``q`` the smoothed one-hot target, rows of ``ignore_index``
    zero), the gradient of ``nll_loss`` per row; linear in ``g`` and itself differentiable.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import nll_backward
        >>> nll_backward(mg.ones(2), mg.tensor([1, -100]), classes=3, ignore_index=-100,
        ...              label_smoothing=0.0)
        tensor([[ 0., -1.,  0.],
                [ 0.,  0.,  0.]])
    """
    from memgrad._kernels.loss import nll_backward as kernel

    return kernel(np.ascontiguousarray(g), target, classes, ignore_index, label_smoothing)


@nll_backward.vjp
def _(u, out, needs, g, target, classes, ignore_index, label_smoothing):
    # linear in g: its VJP is the forward applied to u
    return _nll(u, target, ignore_index=ignore_index, label_smoothing=label_smoothing), None


def _check_reduction(reduction: str, api: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"{api}: {reduction!r} is not a valid value for reduction; use 'mean', 'sum' or "
            "'none'"
        )


def _class_rows(input: Tensor, target: Any, ignore_index: int, api: str):
    """``input`` as (rows, C) and ``target`` as a (rows,) int64 Tensor, checked; the shape
    of the per-element losses; and the number of targets not ignored.

    A Tensor target reaches the loss as a view (or, for other integer dtypes, a copy), so
    that an in-place change to it before backward is caught by the version check; any other
    target is copied."""
    if isinstance(target, Tensor):
        t = target.numpy()
    else:
        t = np.asarray(target)
    if t.dtype.kind not in "iu":
        raise TypeError(
            f"{api}: target must hold class indices (an integer tensor, e.g. dtype mg.int64), "
            f"got dtype {t.dtype}; cross_entropy also takes floating class probabilities of "
            "the input's shape"
        )
    if input.ndim == 0:
        raise ShapeError(
            f"{api}: input must have shape (C,), (N, C) or (N, C, d1, ...), got a 0-d tensor"
        )
    _check_float(input, api)
    expected = () if input.ndim == 1 else (input.shape[0],) + tuple(input.shape[2:])
    if tuple(t.shape) != expected:
        raise ShapeError(
            f"{api}: input of shape {input.shape} needs a target of shape {expected}, got "
            f"target of shape {t.shape}"
        )
    classes = input.shape[0] if input.ndim == 1 else input.shape[1]
    if classes == 0:
        raise ShapeError(f"{api}: input of shape {input.shape} has no classes")
    if input.ndim == 1:
        rows = input.reshape(1, classes)
    elif input.ndim == 2:
        rows = input
    else:  # (N, C, d1, ...) -> (N * d1 * ..., C)
        rows = input.permute(0, *range(2, input.ndim), 1).reshape(-1, classes)
    if isinstance(target, Tensor):
        flat = target.reshape(-1)
        if flat.dtype != np.int64 or not flat.numpy().flags.c_contiguous:
            flat = Tensor(np.ascontiguousarray(flat.numpy(), dtype=np.int64))
    else:
        flat = Tensor(np.array(t, dtype=np.int64).reshape(-1))
    t = flat.numpy()
    kept = t != ignore_index
    if kept.any():
        lo, hi = t[kept].min(), t[kept].max()
        if lo < 0 or hi >= classes:
            raise IndexError(
                f"{api}: target {int(lo if lo < 0 else hi)} is out of bounds for {classes} "
                f"classes (valid: 0 to {classes - 1}, or ignore_index={ignore_index})"
            )
    return rows, flat, expected, int(kept.sum())


def _reduce_loss(losses: Tensor, shape: tuple, count: int, reduction: str) -> Tensor:
    if reduction == "none":
        return losses.reshape(shape)
    total = losses.sum()
    if reduction == "sum":
        return total
    # the mean over the targets that are not ignored; NaN when all are, as in PyTorch
    return total * (1.0 / count if count else math.nan)


def cross_entropy(
    input: Tensor,
    target: Any,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """The cross-entropy of logits ``input`` against class indices or class probabilities
    ``target``: ``logsumexp(x) - x[target]`` per element for indices, ``nll_loss`` of
    ``log_softmax``, which keeps the log-probabilities for backward (as PyTorch does), not
    the logits.

    Args:
        input: logits of shape (C,), (N, C) or (N, C, d1, ...), float32 or float64.
        target: integer class indices of shape (), (N,) or (N, d1, ...) in ``[0, C)``; or
            floating class probabilities of ``input``'s shape.
        weight: a (C,) tensor of class weights (a constant: it gets no gradient). Each
            element's loss is scaled by the weight of its target class, and the mean
            divides by the sum of those weights instead of the count.
        size_average: PyTorch's deprecated spelling of ``reduction``.
        reduce: PyTorch's deprecated spelling of ``reduction``.
        ignore_index: targets equal to it contribute nothing (and are not counted by the
            mean); for class indices only.
        reduction: ``"mean"`` (over the targets not ignored, or over the elements for
            probabilities), ``"sum"`` or ``"none"``.
        label_smoothing: in [0, 1]; the target distribution becomes
            ``(1 - label_smoothing) * target + label_smoothing / C``.

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> round(F.cross_entropy(mg.zeros(2, 4), mg.tensor([1, 3])).item(), 4)
        1.3863
        >>> w = mg.tensor([1.0, 3.0, 1.0, 1.0])
        >>> round(F.cross_entropy(mg.zeros(2, 4), mg.tensor([1, 3]), weight=w).item(), 4)
        1.3863
    """
    api = "cross_entropy"
    reduction = _reduction(size_average, reduce, reduction, api)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(
            f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}"
        )
    if isinstance(target, Tensor) and target.dtype.kind == "f":
        return _soft_cross_entropy(input, target, weight, reduction, float(label_smoothing))
    rows, t, shape, count = _class_rows(input, target, ignore_index, api)
    logp = log_softmax(rows, 1)
    w = _class_weights(weight, rows.shape[1], rows.dtype, api)
    if w is None:
        losses = _nll(logp, t, ignore_index=int(ignore_index),
                      label_smoothing=float(label_smoothing))
    else:
        losses, count = _weighted_nll(logp, t, w, int(ignore_index), float(label_smoothing))
    return _reduce_loss(losses, shape, count, reduction)


def nll_loss(
    input: Tensor,
    target: Any,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The negative log-likelihood ``-input[target]`` of log-probabilities ``input``
    (shapes, ``weight``, ``ignore_index`` and ``reduction`` as for ``cross_entropy``);
    ``nll_loss(log_softmax(x, 1), t)`` equals ``cross_entropy(x, t)``.

    Example:
        >>> import memgrad as mg
        >>> logp = mg.tensor([[-0.5, -1.0], [-2.0, -0.1]])
        >>> round(mg.nn.functional.nll_loss(logp, mg.tensor([0, 1])).item(), 4)
        0.3
        >>> w = mg.tensor([3.0, 1.0])
        >>> round(mg.nn.functional.nll_loss(logp, mg.tensor([0, 1]), w).item(), 4)
        0.4
    """
    api = "nll_loss"
    reduction = _reduction(size_average, reduce, reduction, api)
    rows, t, shape, count = _class_rows(input, target, ignore_index, api)
    w = _class_weights(weight, rows.shape[1], rows.dtype, api)
    if w is None:
        losses = _nll(rows, t, ignore_index=int(ignore_index), label_smoothing=0.0)
    else:
        losses, count = _weighted_nll(rows, t, w, int(ignore_index), 0.0)
    return _reduce_loss(losses, shape, count, reduction)


def mse_loss(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The squared error ``(input - target) ** 2``, averaged (``"mean"``), summed
    (``"sum"``) or elementwise (``"none"``). Both arguments may require grad.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.mse_loss(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 4.0])).item()
        2.0
    """
    reduction = _reduction(size_average, reduce, reduction, "mse_loss")
    if reduction != "none" and isinstance(input, Tensor) and isinstance(target, Tensor) \
            and input.shape == target.shape and input.dtype == target.dtype \
            and input.dtype in _FLOATS and input.numel():
        total = squared_error_sum(input, target)  # NOTE [ Squared error ]
        return total if reduction == "sum" else total / input.numel()
    d = _difference(input, target, "mse_loss")
    return _reduce_elements(d * d, reduction)


# NOTE [ Squared error ]
# mse_loss with a mean or sum over an input and a target of one shape and float dtype is
# one primitive, ``squared_error_sum`` (then a division by the element count for a mean),
# whose VJP is one more, ``squared_error_grad``: a pass over the two arrays each way, no
# difference array in forward and no square, product or sum op, where ``(x - t) ** 2`` and
# its reduction took five ops forward and five backward, each a pass over an array of the
# input's size (in a training step of W3, benchmarks/workloads.py, its 16x32x32x32
# activations: some 2.4 ms a step, against PyTorch's fused mse_loss 0.5). The sum runs in
# float64 (the composite summed the float32 squares); the gradient is the composite's
# arithmetic, ``2 * (g * (x - t))`` in the inputs' dtype, split into parts like relu's.
_SQUARED_ERROR_COST = 40  # an element of the gradient kernel in multiply-adds (memory bound)


@primitive("squared_error_sum", saves={"input": (0, 1), "target": (0, 1)}, kind="reduce")
def squared_error_sum(input, target):
    """``sum((input - target) ** 2)`` over arrays of one shape and float dtype, in one pass,
    summed in float64; a 0-d array of the inputs' dtype (NOTE [ Squared error ] in ops/nn.py).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import squared_error_sum
        >>> squared_error_sum(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 4.0])).item()
        4.0
    """
    from memgrad._kernels import loss

    x, t = (np.ascontiguousarray(a).reshape(-1) for a in (input, target))
    if x.shape != t.shape or x.dtype != t.dtype or x.dtype not in _FLOATS:
        raise ValueError(f"expected an input and a target of one shape and float dtype, got "
                         f"{input.shape} {input.dtype} and {target.shape} {target.dtype}")
    return np.asarray(loss.squared_error_sum(x, t), dtype=x.dtype)


@squared_error_sum.vjp
def _(g, out, needs, input, target):
    gx = squared_error_grad(g, input, target)
    return gx if needs[0] else None, -gx if needs[1] else None


@primitive("squared_error_grad", saves={"g": (1, 2), "input": (0,), "target": (0,)})
def squared_error_grad(g, input, target):
    """``2 * (g * (input - target))`` for a 0-d ``g``: the gradient of ``squared_error_sum``
    at ``input`` in one op, in the inputs' dtype; itself differentiable.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import squared_error_grad
        >>> squared_error_grad(mg.tensor(0.5), mg.tensor([1.0, 2.0]),
        ...                    mg.tensor([1.0, 4.0])).tolist()
        [0.0, -2.0]
    """
    from memgrad._kernels import loss

    if np.ndim(g) != 0 or np.shape(input) != np.shape(target):
        raise ValueError(f"expected a 0-d g and an input and a target of one shape, got "
                         f"{np.shape(g)}, {np.shape(input)} and {np.shape(target)}")
    return flat_kernel_in_parts(loss.squared_error_grad_into, _SQUARED_ERROR_COST, input,
                                target, scale=float(g))


@squared_error_grad.vjp
def _(u, out, needs, g, input, target):
    gg = ((u * (input - target)).sum() * 2) if needs[0] else None
    gx = u * (g * 2) if needs[1] or needs[2] else None
    return gg, gx if needs[1] else None, -gx if needs[2] else None


# ---------------------------------------------------------------------------- attention


# NOTE [ Attention softmax ]
# Without an attn_mask, attention's weights are one primitive, ``attention_softmax``:
# softmax(scores * scale) over the last dim, with the causal mask applied inside the row
# kernel (the masked entries are never used, and get weight 0), so neither the scaled
# scores nor a mask is materialized. Its VJP is ``attention_softmax_backward``
# (scale * y * (g - sum(g * y))), a primitive whose own VJP is written in memgrad ops,
# as for softmax (NOTE [ Fused softmax ] in ops/reduce.py). Only the weights are saved.


def _softmax_rows(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(math.prod(a.shape[:-1]), a.shape[-1])


@primitive("attention_softmax", saves={"out": (0,)}, kind="reduce")
def _attention_softmax(scores, *, scale, causal):
    """``softmax(scores * scale, -1)``, with ``causal=True`` the entries above the diagonal
    of the last two dims masked (weight 0): the weights of ``scaled_dot_product_attention``
    without an ``attn_mask`` (NOTE [ Attention softmax ] in ops/nn.py)."""
    from memgrad._kernels.softmax import scaled_softmax_forward_into

    rows = _softmax_rows(scores)
    out = np.empty(rows.shape, dtype=scores.dtype)
    if rows.size:
        block = scores.shape[-2] if causal else 1  # parts hold whole matrices
        parts.kernel_in_parts(scaled_softmax_forward_into, rows.shape[0] // block, block,
                              rows.size * SOFTMAX_COST, (rows,), out, scale,
                              block if causal else 0)
    return out.reshape(scores.shape)


@_attention_softmax.vjp
def _(g, out, needs, scores, scale, causal):
    return (attention_softmax_backward(g, out, scale=scale),)


@primitive("attention_softmax_backward", saves={"g": (1,), "y": (0, 1)}, kind="reduce")
def attention_softmax_backward(g, y, *, scale):
    """``scale * y * (g - sum(g * y, -1))``: the VJP of ``attention_softmax``, in one op;
    itself differentiable."""
    from memgrad._kernels.softmax import scaled_softmax_backward_into

    dtype = np.result_type(g, y)
    gr, yr = (_softmax_rows(np.asarray(a, dtype=dtype)) for a in (g, y))
    out = np.empty(yr.shape, dtype=dtype)
    if gr.size:
        parts.kernel_in_parts(scaled_softmax_backward_into, yr.shape[0], 1,
                              yr.size * SOFTMAX_COST, (gr, yr), out, scale)
    return out.reshape(y.shape)


@attention_softmax_backward.vjp
def _(gg, out, needs, g, y, scale):
    # linear in g with the symmetric Jacobian scale * (diag(y) - y y^T)
    gg_g = attention_softmax_backward(gg, y, scale=scale) if needs[0] else None
    gy = None
    if needs[1]:
        gy = gg * (g - (g * y).sum(-1, keepdim=True)) - g * (gg * y).sum(-1, keepdim=True)
        gy = gy * scale
    return gg_g, gy


# NOTE [ Causal products ]
# With ``is_causal`` (and no attn_mask), attention's products skip the blocks above the
# diagonal. The rows of each (L, S) score matrix are cut into blocks of ``block`` rows; row
# ``i`` keeps the columns ``j < (i // block + 1) * block`` (the block mask M, which holds the
# causal mask ``j <= i``). ``causal_matmul`` computes, over matching batch dimensions:
#   form "abT": M * (a @ b^T)      the scores q k^T (0 outside M; computed whole, then
#                                  zeroed there: row blocks of a product with attention's
#                                  short inner dimension cost more than they skip);
#   form "ab":  (M * a) @ b        weights times values (a is not read outside M);
#   form "aTb": (M * a)^T @ b      the gradients of the values and keys.
# The VJP of each form is two of the forms (the family is closed), so double backward works.
# The weights are exactly 0 above the diagonal, so (M * w) @ v is w @ v; at W2's sizes
# (128 positions, blocks of 32) "ab" and "aTb" do 5/8 of the full products' multiply-adds.
# Each is one BLAS product per row block (per column block for "aTb") of each matrix: as
# jobs on the helper threads when the batch is large enough (NOTE [ Products as jobs ] in
# ops/parts.py), else one NumPy matmul per block over the whole batch, in parts of the first
# batch dimension (NOTE [ Batch parts ]): every matrix is computed the same way whatever the
# split. Their results take the layout of heads split from one
# projection when ``b`` has it (``_like_heads``), so that attention's output, and the
# gradients of queries, keys and values, merge their heads back without a copy.

CAUSAL_BLOCK = 32  # rows per block of attention's causal products


def _causal_shape(a: np.ndarray, b: np.ndarray, form: str) -> tuple:
    """The output shape of ``causal_matmul``; a ValueError if the operands do not fit."""
    if a.ndim < 2 or a.shape[:-2] != b.shape[:-2] or a.ndim != b.ndim:
        raise ValueError(f"expected operands of one batch shape with matrices, got shapes "
                         f"{a.shape} and {b.shape}")
    inner = {"abT": (-1, -1), "ab": (-1, -2), "aTb": (-2, -2)}.get(form)
    if inner is None:
        raise ValueError(f"form must be 'abT', 'ab' or 'aTb', got {form!r}")
    if a.shape[inner[0]] != b.shape[inner[1]]:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not fit form {form!r}")
    rows = {"abT": a.shape[-2], "ab": a.shape[-2], "aTb": a.shape[-1]}[form]
    cols = b.shape[-2] if form == "abT" else b.shape[-1]
    return a.shape[:-2] + (rows, cols)


def _causal_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray, form: str,
                   block: int) -> None:
    """``out`` = form ``form`` of ``a`` and ``b`` (NOTE [ Causal products ])."""
    if form == "aTb":
        length, width = a.shape[-2:]
        for c0 in range(0, width, block):  # column block c: the rows from c0 on see it
            c1 = min(width, c0 + block)
            if c0 >= length:
                out[..., c0:, :] = 0
                break
            np.matmul(a[..., c0:, c0:c1].swapaxes(-1, -2), b[..., c0:, :],
                      out=out[..., c0:c1, :])
        return
    length = a.shape[-2]
    if form == "abT":
        # one product, then the blocks above the diagonal zeroed: with a short inner
        # dimension (attention's head size) row blocks of it cost more than they skip
        np.matmul(a, b.swapaxes(-1, -2), out=out)
        for r0 in range(0, length, block):
            out[..., r0:r0 + block, r0 + block:] = 0
        return
    for r0 in range(0, length, block):
        c1 = r0 + block
        np.matmul(a[..., r0:c1, :c1], b[..., :c1, :], out=out[..., r0:c1, :])


def _like_heads(b: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An empty array of ``shape``, laid out as ``b`` when ``b`` is (N, H, T, D) heads split
    from contiguous (N, T, H, D) rows (``x.reshape(n, t, h, d).transpose(1, 2)``): then the
    result merges its heads back (``.transpose(1, 2).reshape(n, t, h * d)``) without a
    copy, in forward and in backward."""
    if b.ndim == 4 and b.shape[1] > 1 and b.swapaxes(1, 2).flags.c_contiguous:
        n, h, t, d = shape
        return np.empty((n, t, h, d), dtype).swapaxes(1, 2)
    return np.empty(shape, dtype)


@primitive("causal_matmul", saves={"a": (1,), "b": (0,)}, kind="matmul")
def causal_matmul(a, b, *, form, block):
    """A product of ``a`` and ``b`` that skips the blocks above the diagonal: form ``"abT"``
    is ``M * (a @ b^T)``, ``"ab"`` is ``(M * a) @ b``, ``"aTb"`` is ``(M * a)^T @ b``, with
    ``M`` the block mask of NOTE [ Causal products ] in ops/nn.py (``block`` rows per
    block); attention's products with ``is_causal``.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import causal_matmul
        >>> causal_matmul(mg.ones(3, 2), mg.ones(3, 2), form="abT", block=1)
        tensor([[2., 0., 0.],
                [2., 2., 0.],
                [2., 2., 2.]])
    """
    shape = _causal_shape(a, b, form)
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    out = _like_heads(b, shape, np.result_type(a, b)) if form != "abT" else \
        np.empty(shape, dtype=np.result_type(a, b))
    _causal_into(a, b, out, form, block)
    return out


def _causal_into(a: np.ndarray, b: np.ndarray, out: np.ndarray, form: str,
                 block: int) -> None:
    """``out`` = form ``form`` of ``a`` and ``b`` (NOTE [ Causal products ]), as jobs or in
    parts of the batch when it is large enough."""
    if a.ndim == 2:
        _causal_blocks(a, b, out, form, block)
        return
    macs = out.size * (b.shape[-1] if form == "abT" else a.shape[-1]) // 2
    if parts.products_in_parts(a, b, out, form, block, macs):  # NOTE [ Products as jobs ]
        return

    def work(lo: int, hi: int) -> None:
        _causal_blocks(a[lo:hi], b[lo:hi], out[lo:hi], form, block)

    parts.in_parts(a.shape[0], macs, work)


@causal_matmul.vjp
def _(g, out, needs, a, b, form, block):
    # each form's gradients are two of the forms (NOTE [ Causal products ])
    rule = {"abT": (("ab", g, b), ("aTb", g, a)),
            "ab": (("abT", g, b), ("aTb", a, g)),
            "aTb": (("abT", b, g), ("ab", a, g))}[form]
    return tuple(causal_matmul(x, y, form=f, block=block) if needs[i] else None
                 for i, (f, x, y) in enumerate(rule))


# NOTE [ Fused self-attention ]
# ``nn.MultiheadSelfAttention`` (without dropout on the weights) makes its queries, keys and
# values with one product, ``qkv`` (N, T, 3E), and attends with one primitive,
# ``self_attention(qkv)`` -> (N, T, E): the heads are views of ``qkv`` (no slicing, reshape
# or transpose ops), the scores and weights are arrays of the forward that no op returns,
# and the output is written with its heads merged. Its VJP is one primitive,
# ``self_attention_backward(g, qkv)``, which writes the query, key and value gradients
# into one (N, T, 3E) array: no zero-filled gradients of slices to add up, and one product
# each for the input and weight gradients of the projection. The composite (three
# projections, head views, two causal products and the attention softmax) ran some 45 more
# ops per transformer block, forward and backward: a step of ``memgrad train``'s model went
# from 354 primitives to 174. Only ``qkv`` is saved (the composite
# kept the (N, H, T, T) weights): the backward recomputes the scores and weights from it,
# one product and one softmax more. The arithmetic is the composite's, the same products
# (NOTE [ Causal products ]) and softmax kernels (NOTE [ Attention softmax ]). The VJP of
# ``self_attention_backward`` is reverse mode through that composite formulation, op by op
# with the VJPs of its ops, so double backward works.


def _self_attention_shape(shape: tuple, heads: Any) -> tuple:
    """The output shape of ``self_attention`` for ``qkv`` of ``shape``; a ValueError if they
    do not fit."""
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"heads must be a positive int, got {heads!r}")
    if len(shape) != 3 or shape[-1] % (3 * heads):
        raise ValueError(f"expected qkv of shape (N, T, 3 * E) with E divisible by heads="
                         f"{heads}, got shape {tuple(shape)}")
    return tuple(shape[:2]) + (shape[2] // 3,)


def _check_qkv_dtype(qkv: np.ndarray) -> None:
    if qkv.dtype not in _FLOATS:
        raise TypeError(f"expected a float32 or float64 qkv, got dtype {qkv.dtype}; convert "
                        "it first, e.g. with .float()")


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """The (N, heads, T, d) view of the heads of ``x`` (N, T, heads * d)."""
    n, t, e = x.shape
    return x.reshape(n, t, heads, e // heads).transpose(0, 2, 1, 3)


def _qkv_heads(qkv: np.ndarray, heads: int) -> tuple:
    """The heads of the queries, keys and values stacked in ``qkv`` (N, T, 3E): views."""
    e = qkv.shape[-1] // 3
    return tuple(_split_heads(qkv[..., i * e:(i + 1) * e], heads) for i in range(3))


def _attention_weights(q: np.ndarray, k: np.ndarray, causal: bool, scale: float,
                       block: int) -> np.ndarray:
    scores = np.empty(q.shape[:-1] + k.shape[-2:-1], q.dtype)
    _causal_into(q, k, scores, "abT", block)
    return _attention_softmax.forward(scores, scale=scale, causal=causal)


def _blocks_of(causal: bool, length: int) -> int:
    # without the mask, one block of all rows: the causal forms are the plain products
    return CAUSAL_BLOCK if causal else max(length, 1)


# NOTE [ Fused self-attention as jobs ]
# Where the hand-off is set up (NOTE [ One set of threads ] in ops/parts.py),
# ``self_attention`` and ``self_attention_backward`` run as one job per part of their
# (sample, head) pairs, ``ATTENTION_JOB`` (memgrad/_kernels/attention_jobs.py), rather than
# as two or five products as jobs and one or two softmax kernels as jobs, each a hand-off
# and a round of Python: for each pair the job runs the same BLAS calls (the products'
# rows of words, made by ``parts.product_words`` once per layout, NOTE [ Attention's job
# rows by layout ], with the part's own (T, T) scratch for the scores, weights and their
# gradients in place of the (N, H, T, T) arrays) and the same softmax kernels, so its
# results are those of the separate products and kernels as jobs, bit for bit, whatever
# the split. The scratch of a pair stays in cache for the pair's next phase. Below
# ``ATTENTION_JOB_MIN_MACS`` multiply-adds, with one BLAS thread, without the hand-off (or
# with ``NUMBA_DISABLE_JIT=1``), or for operands BLAS cannot take as they lie, the op runs
# its separate products and kernels.

# multiply-adds from which self-attention runs as one job per part (NOTE [ Fused
# self-attention as jobs ]): those from which its products run as jobs
ATTENTION_JOB_MIN_MACS = parts.JOB_PARTS_MIN_MACS


@functools.cache
def _attention_jobs() -> Any:
    from memgrad._kernels import attention_jobs

    return attention_jobs


def _repeated(a: np.ndarray, batch: tuple) -> np.ndarray:
    """``a`` (one matrix) as a batch of ``batch`` matrices, all ``a`` itself (batch strides
    0): a pair's scratch in the words of the products of every pair."""
    return np.ndarray(batch + a.shape, a.dtype, a, 0, (0,) * len(batch) + a.strides)


# NOTE [ Attention's job rows by layout ]
# The rows of product words of ATTENTION_JOB's phases depend on the arrays' addresses only
# through where each operand lies in its array: for arrays of the same shapes, strides and
# dtype (and the same heads and causal block) they differ by those arrays' start addresses.
# ``_attention_layout`` makes them once per layout, with ``parts.product_words`` (which
# checks them), and keeps each operand's address as an offset from the start of its array
# (the stacked queries, keys and values, the op's output, the output gradient, or the
# part's scratch); ``part_words`` (memgrad/_kernels/attention_jobs.py) adds the arrays'
# addresses back, part by part, in one compiled call. The op's output and scratch are new
# arrays of the op's own, so no operand can overlap the arrays it writes, which
# ``product_words`` also checks. Making the rows for every call (two or five
# ``product_words`` calls and a loop of Python) took some 0.1 ms a call in a small model's
# step, on a cold cache (docs/performance-log.md, "Attention's job rows by layout").
_ATTENTION_LAYOUTS: dict = {}
_ATTENTION_LAYOUTS_KEPT = 64  # the layouts whose rows are kept


def _attention_layout(qkv: np.ndarray, g: np.ndarray | None, out: np.ndarray, heads: int,
                      block: int) -> tuple | None:
    """The phases' rows of ATTENTION_JOB for the layout of ``qkv``, ``g`` and ``out``, each
    operand's address an offset from the start of its array, and which array that is (NOTE
    [ Attention's job rows by layout ]); None where the products cannot run as jobs."""
    jobs = _attention_jobs()
    n, t = qkv.shape[:2]
    q, k, v = _qkv_heads(qkv, heads)
    scratch = np.empty((4, t, t), qkv.dtype)
    s, p, dw, ds = (_repeated(m, (n, heads)) for m in scratch)
    qkv_, out_, g_, own = jobs.QKV, jobs.OUT, jobs.G, jobs.SCRATCH
    if g is None:
        plan = (((q, k, s, "abT"), (qkv_, qkv_, own)),
                ((p, v, _split_heads(out, heads), "ab"), (own, qkv_, out_)))
    else:
        dq, dk, dv = _qkv_heads(out, heads)
        gh = _split_heads(g, heads)
        plan = (((q, k, s, "abT"), (qkv_, qkv_, own)), ((p, gh, dv, "aTb"), (own, g_, out_)),
                ((gh, v, dw, "abT"), (g_, qkv_, own)), ((ds, k, dq, "ab"), (own, qkv_, out_)),
                ((ds, q, dk, "aTb"), (own, qkv_, out_)))
    rows = [parts.product_words(a, b, c, form, block) for (a, b, c, form), _ in plan]
    if any(r is None for r in rows):
        return None
    template = np.array(rows, np.int64)
    bases_of = np.array([bases for _, bases in plan], np.int64)
    starts = {qkv_: qkv, out_: out, g_: qkv if g is None else g, own: scratch}
    for i, bases in enumerate(bases_of):
        for word, base in zip((jobs.W_A, jobs.W_B, jobs.W_C), bases):
            template[i, word] -= starts[int(base)].ctypes.data
    return template, bases_of


def _attention_as_jobs(qkv: np.ndarray, g: np.ndarray | None, out: np.ndarray, heads: int,
                       causal: bool, scale: float, block: int) -> bool:
    """``self_attention`` (``g`` None) into ``out`` (N, T, E), or its backward into ``out``
    (N, T, 3E), as jobs on the helpers (NOTE [ Fused self-attention as jobs ]); False, with
    nothing written, where that does not run."""
    n, t, e3 = qkv.shape
    pairs, d = n * heads, e3 // (3 * heads)
    forward = g is None
    macs = pairs * t * t * d * (3 if forward else 7) // 2  # a full product, then halves
    if macs < ATTENTION_JOB_MIN_MACS or t == 0 or d == 0 or not parts.jobs_can_run(pairs):
        return False
    if not forward:
        g = np.asarray(g, dtype=qkv.dtype)
    key = (qkv.dtype, qkv.shape, qkv.strides, out.shape, out.strides,
           None if forward else (g.shape, g.strides), heads, block)
    layout = _ATTENTION_LAYOUTS.get(key, False)
    if layout is False:  # NOTE [ Attention's job rows by layout ]
        layout = _attention_layout(qkv, g, out, heads, block)
        if len(_ATTENTION_LAYOUTS) >= _ATTENTION_LAYOUTS_KEPT:
            _ATTENTION_LAYOUTS.clear()
        _ATTENTION_LAYOUTS[key] = layout
    if layout is None:
        return False
    template, bases_of = layout
    scale_bits = int(np.float64(scale).view(np.int64))
    kept: list = []

    def words_of(ends: list) -> np.ndarray:
        words, *arrays = _attention_jobs().part_words(
            template, bases_of, qkv, out, qkv if forward else g, np.array(ends, np.int64),
            forward, heads, scale_bits, bool(causal))
        kept.append(arrays)  # the phases' rows and the scratch, alive until the job is done
        return words

    return parts.batch_as_jobs(pairs, macs, lambda: _attention_jobs().ATTENTION_JOB, words_of,
                               min_macs=ATTENTION_JOB_MIN_MACS)


@primitive("self_attention", saves={"qkv": (0,)}, kind="matmul")
def self_attention(qkv, *, heads, causal, scale):
    """``scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` over
    ``heads`` heads, for the queries, keys and values stacked in ``qkv`` (N, T, 3E) along
    its last dim, with the heads merged back: (N, T, E). The attention of
    ``nn.MultiheadSelfAttention`` in one op (NOTE [ Fused self-attention ] in ops/nn.py).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import self_attention
        >>> self_attention(mg.ones(2, 5, 12), heads=2, causal=True, scale=0.5).shape
        (2, 5, 4)
    """
    shape = _self_attention_shape(qkv.shape, heads)
    _check_qkv_dtype(qkv)
    block = _blocks_of(causal, shape[1])
    out = np.empty(shape, qkv.dtype)
    if _attention_as_jobs(qkv, None, out, heads, causal, scale, block):
        return out
    q, k, v = _qkv_heads(qkv, heads)
    weights = _attention_weights(q, k, causal, scale, block)
    _causal_into(weights, v, _split_heads(out, heads), "ab", block)
    return out


@self_attention.vjp
def _(g, out, needs, qkv, heads, causal, scale):
    return (self_attention_backward(g, qkv, heads=heads, causal=causal, scale=scale),)


@primitive("self_attention_backward", saves={"g": (0, 1), "qkv": (0, 1)}, kind="matmul")
def self_attention_backward(g, qkv, *, heads, causal, scale):
    """The gradient of ``self_attention`` at ``qkv`` for the output gradient ``g``
    (N, T, E): the query, key and value gradients in one (N, T, 3E) array; itself
    differentiable (NOTE [ Fused self-attention ] in ops/nn.py).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.nn import self_attention_backward
        >>> self_attention_backward(mg.ones(2, 5, 4), mg.ones(2, 5, 12), heads=2,
        ...                         causal=True, scale=0.5).shape
        (2, 5, 12)
    """
    shape = _self_attention_shape(qkv.shape, heads)
    _check_qkv_dtype(qkv)
    if g.shape != shape:
        raise ValueError(f"expected g of shape {shape} for qkv of shape {qkv.shape}, got "
                         f"{g.shape}")
    block = _blocks_of(causal, shape[1])
    grad = np.empty(qkv.shape, qkv.dtype)
    if _attention_as_jobs(qkv, g, grad, heads, causal, scale, block):
        return grad
    q, k, v = _qkv_heads(qkv, heads)
    weights = _attention_weights(q, k, causal, scale, block)
    dq, dk, dv = _qkv_heads(grad, heads)
    gh = _split_heads(np.asarray(g, dtype=qkv.dtype), heads)
    _causal_into(weights, gh, dv, "aTb", block)
    dw = np.empty(weights.shape, qkv.dtype)
    _causal_into(gh, v, dw, "abT", block)
    ds = attention_softmax_backward.forward(dw, weights, scale=scale)
    _causal_into(ds, k, dq, "ab", block)
    _causal_into(ds, q, dk, "aTb", block)
    return grad


@self_attention_backward.vjp
def _(u, out, needs, g, qkv, heads, causal, scale):
    # reverse mode through the composite formulation, op by op with the VJPs of its ops
    # (written in memgrad ops, so every order of derivative works):
    #   w = softmax(q k^T), dw = g v^T, ds = asb(dw, w), dq = ds k, dk = ds^T q, dv = w^T g
    n, t, e3 = qkv.shape
    e = e3 // 3
    block = _blocks_of(causal, t)
    mm = causal_matmul.vjp_fn
    both = (True, True)

    def split(x: Tensor) -> Tensor:
        return x.reshape(n, t, heads, x.shape[-1] // heads).transpose(1, 2)

    def merge(x: Tensor) -> Tensor:
        return x.transpose(1, 2).reshape(n, t, e)

    q, k, v = (split(qkv[..., i * e:(i + 1) * e]) for i in range(3))
    uq, uk, uv = (split(u[..., i * e:(i + 1) * e]) for i in range(3))
    gh = split(g)
    scores = causal_matmul(q, k, form="abT", block=block)
    w = _attention_softmax(scores, scale=scale, causal=causal)
    dw = causal_matmul(gh, v, form="abT", block=block)
    ds = attention_softmax_backward(dw, w, scale=scale)
    ds_u, k_u = mm(uq, None, both, ds, k, form="ab", block=block)
    ds_u2, q_u = mm(uk, None, both, ds, q, form="aTb", block=block)
    w_u, g_u = mm(uv, None, both, w, gh, form="aTb", block=block)
    dw_u, w_u2 = attention_softmax_backward.vjp_fn(ds_u + ds_u2, ds, both, dw, w, scale=scale)
    g_u2, v_u = mm(dw_u, None, both, gh, v, form="abT", block=block)
    (scores_u,) = _attention_softmax.vjp_fn(w_u + w_u2, w, (True,), scores, scale=scale,
                                            causal=causal)
    q_u2, k_u2 = mm(scores_u, None, both, q, k, form="abT", block=block)
    return (merge(g_u + g_u2) if needs[0] else None,
            cat([merge(q_u + q_u2), merge(k_u + k_u2), merge(v_u)], -1) if needs[1] else None)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``, a composite of matmul and the
    fused softmax (its gradient comes from theirs); with ``is_causal`` and operands of one
    batch shape, the products skip the blocks above the diagonal (``causal_matmul``).

    Args:
        query: (..., L, E); key: (..., S, E); value: (..., S, Ev).
        attn_mask: a bool tensor (True: may attend) or a float tensor added to the
            scores, broadcastable to (..., L, S); or None.
        dropout_p: dropout on the attention weights (drawn from the global generator).
        is_causal: position i attends to positions j <= i only (the mask is -inf above
            the diagonal, aligned top-left as in PyTorch).
        scale: defaults to ``1 / sqrt(E)``.

    Returns:
        (..., L, Ev).

    Example:
        >>> import memgrad as mg
        >>> q = k = v = mg.ones(2, 3, 4)
        >>> F = mg.nn.functional
        >>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
        (2, 3, 4)
    """
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError(
            "scaled_dot_product_attention: query, key and value must have shape (..., L, E), "
            f"(..., S, E) and (..., S, Ev); got {query.shape}, {key.shape}, {value.shape}"
        )
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ShapeError(
            "scaled_dot_product_attention: query (..., L, E), key (..., S, E) and value "
            f"(..., S, Ev) do not fit: got {query.shape}, {key.shape}, {value.shape}"
        )
    if is_causal and attn_mask is not None:
        raise ValueError(
            "scaled_dot_product_attention: pass either attn_mask or is_causal=True, not both"
        )
    _check_float(query, "scaled_dot_product_attention")
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    if is_causal and query.ndim == key.ndim == value.ndim \
            and query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        # the blocks above the diagonal are skipped (NOTE [ Causal products ])
        scores = causal_matmul(query, key, form="abT", block=CAUSAL_BLOCK)
        weights = _attention_softmax(scores, scale=float(scale), causal=True)
        if dropout_p > 0.0:
            weights = dropout(weights, dropout_p)
        return causal_matmul(weights, value, form="ab", block=CAUSAL_BLOCK)
    scores = query @ key.mT
    if attn_mask is None:  # the scale and the causal mask are folded into the softmax
        weights = _attention_softmax(scores, scale=float(scale), causal=bool(is_causal))
    else:
        scores = scores * scale
        mask = attn_mask.numpy()
        if attn_mask.dtype == np.bool_:
            empty = ~mask.any(axis=-1, keepdims=True)
            scores = scores + Tensor(np.where(mask, 0.0, -np.inf).astype(scores.dtype))
        else:
            empty = np.isneginf(mask).all(axis=-1, keepdims=True)
            scores = scores + attn_mask
        # a query whose keys are all masked attends to nothing: its row of weights is 0, as
        # in PyTorch (its safe softmax), not the NaN of a softmax over -inf alone; told
        # from the mask, which may be smaller than the scores (broadcast)
        if empty.any():
            empty = np.broadcast_to(empty, scores.shape[:-1] + (1,))
            scores = where(Tensor(np.broadcast_to(empty, scores.shape)), 0.0, scores)
            weights = softmax(scores, -1) * Tensor((~empty).astype(scores.dtype))
        else:
            weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


# ---------------------------------------------------------------------------- activations
#
# NOTE [ Activation primitives ]
# silu, leaky_relu, elu, softplus and mish are primitives that keep only their input for
# backward (a composite of sigmoid, tanh and mul would keep its intermediate values too).
# Their forwards are NumPy; their VJPs are memgrad ops, so double backward works. At a kink
# the derivative is PyTorch's: leaky_relu'(0) = negative_slope, elu'(0) = alpha, and
# softplus' = 1 where beta * x > threshold (where the forward is the identity).


def _np_sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-|x|) never overflows (see the sigmoid primitive)
    e = np.exp(-np.abs(x))
    return np.where(np.signbit(x), e / (1 + e), 1 / (1 + e))


@primitive("silu", saves={"x": (0,)})
def _silu(x):
    return x * _np_sigmoid(x)


@_silu.vjp
def _(g, out, needs, x):
    s = sigmoid(x)
    return (g * s * (x * (1.0 - s) + 1.0),)


@primitive("leaky_relu", saves={"x": (0,)})
def _leaky_relu(x, *, negative_slope):
    return np.where(x > 0, x, x * negative_slope)


@_leaky_relu.vjp
def _(g, out, needs, x, negative_slope):
    return (where(x > 0, g, g * negative_slope),)


@primitive("elu", saves={"x": (0,)})
def _elu(x, *, alpha):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)) * alpha)


@_elu.vjp
def _(g, out, needs, x, alpha):
    # clamp keeps exp finite on the side where() discards; its gradient passes at 0
    return (where(x > 0, g, g * exp(clamp(x, max=0.0)) * alpha),)


@primitive("softplus", saves={"x": (0,)})
def _softplus(x, *, beta, threshold):
    bx = x * beta
    return np.where(bx > threshold, x, np.logaddexp(0, bx) / beta)


@_softplus.vjp
def _(g, out, needs, x, beta, threshold):
    bx = x * beta
    return (where(bx > threshold, g, g * sigmoid(bx)),)


@primitive("mish", saves={"x": (0,)})
def _mish(x):
    return x * np.tanh(np.logaddexp(0, x))


@_mish.vjp
def _(g, out, needs, x):
    t = tanh(_softplus(x, beta=1.0, threshold=math.inf))
    return (g * (t + x * sigmoid(x) * (1.0 - t * t)),)


def _number(value: Any, name: str, api: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{api}: {name} must be a number, got {value!r}")
    return float(value)


def _activation(api: str, prim: Any, input: Tensor, inplace: bool, **params: Any) -> Tensor:
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    _check_float(input, api)
    if not inplace:
        return prim(input, **params)
    return _inplace(api + "_", input, prim, (), params,
                    lambda a: np.copyto(a, prim.forward(a, **params)))


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)`` elementwise, as ``torch.nn.functional.relu``: the ``relu`` primitive, or
    with ``inplace=True`` the in-place ``relu_`` (the input is overwritten and returned).

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([-1.0, 2.0])
        >>> mg.nn.functional.relu(x, inplace=True) is x, x
        (True, tensor([0., 2.]))
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"relu: input must be a Tensor, got {type(input).__name__}")
    return relu_(input) if inplace else _relu(input)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """The sigmoid-weighted linear unit ``x * sigmoid(x)`` (also called swish).

    Args:
        input: a float32 or float64 tensor.
        inplace: write the result into ``input`` and return it.

    Example:
        >>> import memgrad as mg
        >>> [round(v, 4) for v in mg.nn.functional.silu(mg.tensor([-1.0, 0.0, 2.0])).tolist()]
        [-0.2689, 0.0, 1.7616]
    """
    return _activation("silu", _silu, input, inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0``, else ``negative_slope * x``; the derivative at 0 is
    ``negative_slope``, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.leaky_relu(mg.tensor([-2.0, 3.0]), 0.1)
        tensor([-0.2,  3. ])
    """
    slope = _number(negative_slope, "negative_slope", "leaky_relu")
    return _activation("leaky_relu", _leaky_relu, input, inplace, negative_slope=slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """The exponential linear unit: ``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``;
    the derivative at 0 is ``alpha``, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> [round(v, 4) for v in mg.nn.functional.elu(mg.tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """
    return _activation("elu", _elu, input, inplace, alpha=_number(alpha, "alpha", "elu"))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, computed without overflow; where
    ``beta * x > threshold`` the result is ``x`` itself (and the derivative 1), as in
    PyTorch.

    Example:
        >>> import memgrad as mg
        >>> [round(v, 4) for v in mg.nn.functional.softplus(mg.tensor([0.0, 30.0])).tolist()]
        [0.6931, 30.0]
    """
    beta = _number(beta, "beta", "softplus")
    if beta == 0:
        raise ValueError("softplus: beta must be non-zero (the result divides by it)")
    threshold = _number(threshold, "threshold", "softplus")
    return _activation("softplus", _softplus, input, False, beta=beta, threshold=threshold)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``.

    Example:
        >>> import memgrad as mg
        >>> round(mg.nn.functional.mish(mg.tensor([1.0])).item(), 4)
        0.8651
    """
    return _activation("mish", _mish, input, inplace)


# ---------------------------------------------------------------------------- more losses


def _reduction(size_average: Any, reduce: Any, reduction: str, api: str) -> str:
    """``reduction``, or the one PyTorch's deprecated ``size_average``/``reduce`` name."""
    if size_average is None and reduce is None:
        _check_reduction(reduction, api)
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    legacy = ("mean" if size_average else "sum") if reduce else "none"
    warnings.warn(
        f"{api}: size_average and reduce are deprecated, as in PyTorch; use "
        f"reduction={legacy!r} instead",
        UserWarning,
        stacklevel=3,
    )
    return legacy


def _reduce_elements(losses: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.mean()


def _difference(input: Tensor, target: Any, api: str) -> Tensor:
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    if isinstance(target, Tensor) and target.shape != input.shape:
        warnings.warn(
            f"{api}: target of shape {target.shape} differs from input of shape "
            f"{input.shape}; they are broadcast, which is likely not what you want",
            UserWarning,
            stacklevel=3,
        )
    return input - target


def _class_weights(weight: Any, classes: int, dtype: np.dtype, api: str) -> np.ndarray | None:
    """``weight`` as a (C,) array of ``dtype`` (a copy), checked; None for no weights."""
    if weight is None:
        return None
    if not isinstance(weight, Tensor):
        raise TypeError(
            f"{api}: weight must be a Tensor of shape ({classes},), got {type(weight).__name__}"
        )
    if weight.dtype.kind != "f":
        raise TypeError(f"{api}: weight must be a floating tensor, got dtype {weight.dtype}")
    if tuple(weight.shape) != (classes,):
        raise ShapeError(
            f"{api}: weight must hold one value per class, shape ({classes},), got shape "
            f"{weight.shape}"
        )
    return weight.numpy().astype(dtype)


def _weighted_nll(logp: Tensor, t: Tensor, w: np.ndarray, ignore_index: int,
                  label_smoothing: float) -> tuple[Tensor, float]:
    """Per-row losses with class weights ``w``, as PyTorch weighs them: the target term
    scaled by ``w[target]``, the smoothing term by ``w`` of each class; and the sum of the
    target weights (what the mean divides by)."""
    idx = t.numpy()
    kept = idx != ignore_index
    row_w = np.where(kept, w[np.where(kept, idx, 0)], 0).astype(w.dtype)
    losses = _nll(logp, t, ignore_index=ignore_index, label_smoothing=0.0) * Tensor(row_w)
    if label_smoothing:
        smooth = (logp @ Tensor(-w)) * Tensor(kept.astype(w.dtype))
        losses = losses * (1.0 - label_smoothing) + smooth * (label_smoothing / logp.shape[1])
    return losses, float(row_w.sum())


def _soft_cross_entropy(input: Tensor, target: Tensor, weight: Any, reduction: str,
                        label_smoothing: float) -> Tensor:
    """Cross-entropy against class probabilities ``target`` (``input``'s shape)."""
    api = "cross_entropy"
    _check_float(input, api)
    if input.ndim == 0 or tuple(target.shape) != tuple(input.shape):
        raise ShapeError(
            f"{api}: class-probability targets must have the input's shape {input.shape} "
            f"(C,), (N, C) or (N, C, d1, ...); got target of shape {target.shape}"
        )
    dim = 0 if input.ndim == 1 else 1
    classes = input.shape[dim]
    q = target
    if label_smoothing:
        q = target * (1.0 - label_smoothing) + label_smoothing / classes
    terms = log_softmax(input, dim) * q
    w = _class_weights(weight, classes, input.dtype, api)
    if w is not None:
        terms = terms * Tensor(w.reshape((classes,) + (1,) * (input.ndim - dim - 1)))
    losses = -terms.sum(dim)
    if reduction != "mean":
        return _reduce_elements(losses, reduction)
    n = losses.numel()
    return losses.sum() * (1.0 / n if n else math.nan)


def l1_loss(
    input: Tensor,
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """The absolute error ``|input - target|``, averaged (``"mean"``), summed (``"sum"``) or
    elementwise (``"none"``); the gradient where they are equal is 0, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.functional.l1_loss(mg.tensor([1.0, 2.0]), mg.tensor([1.0, 5.0])).item()
        1.5
    """
    reduction = _reduction(size_average, reduce, reduction, "l1_loss")
    return _reduce_elements(_difference(input, target, "l1_loss").abs(), reduction)


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """The binary cross-entropy of logits ``input`` against probabilities ``target``:
    ``-w * (pos_weight * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x)))``, computed as
    ``(1 - y) * x + (1 + (pos_weight - 1) * y) * softplus(-x)``, which neither overflows nor
    loses the loss of a confident wrong logit.

    Args:
        input: logits, float32 or float64.
        target: probabilities of ``input``'s shape (floating; may require grad).
        weight: rescales each element's loss (broadcast to ``input``'s shape).
        size_average: PyTorch's deprecated spelling of ``reduction``.
        reduce: PyTorch's deprecated spelling of ``reduction``.
        reduction: ``"mean"`` (over all elements), ``"sum"`` or ``"none"``.
        pos_weight: the weight of the positive term, broadcast along the last dimension
            (one value per class).

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> F.binary_cross_entropy_with_logits(mg.tensor([100.0]), mg.tensor([0.0])).item()
        100.0
    """
    api = "binary_cross_entropy_with_logits"
    reduction = _reduction(size_average, reduce, reduction, api)
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    _check_float(input, api)
    if not isinstance(target, Tensor) or tuple(target.shape) != tuple(input.shape):
        got = target.shape if isinstance(target, Tensor) else type(target).__name__
        raise ValueError(
            f"{api}: Target size ({got}) must be the same as input size ({input.shape})"
        )
    if target.dtype.kind != "f":
        raise TypeError(
            f"{api}: target must hold probabilities (a floating tensor), got dtype "
            f"{target.dtype}; convert it with .float()"
        )
    softplus_neg = _softplus(-input, beta=1.0, threshold=math.inf)  # -log(sigmoid(x))
    if pos_weight is None:
        losses = (1.0 - target) * input + softplus_neg
    else:
        losses = (1.0 - target) * input + ((pos_weight - 1.0) * target + 1.0) * softplus_neg
    if weight is not None:
        losses = losses * weight
    return _reduce_elements(losses, reduction)
