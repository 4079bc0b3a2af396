"""Layer normalization over the last axis of C-contiguous (N, D) rows: forward, the input
gradient, and the weight gradient.

With ``mean`` and ``rstd = 1 / sqrt(var + eps)`` of a row (biased variance, two passes,
float64 sums) and ``h = (x - mean) * rstd``:

* ``layer_norm_forward``: ``h * weight + bias``;
* ``layer_norm_backward``: with ``a = g * weight``,
  ``rstd * (a - mean(a) - h * mean(a * h))``;
* ``layer_norm_weight_grad``: ``sum over rows of g * h``;
* ``layer_norm_grads``: the three gradients (input, weight, bias) in one pass over ``g``
  and ``x`` (the separate kernels read them twice, and the bias gradient a third time).

``*_into`` forms write into a given ``out`` (``layer_norm_weight_grad_chunks``: the sums of
chunks of rows), so that parts of the rows can run on several threads.

The backward kernels recompute ``mean`` and ``rstd`` from the row (one extra read of data
that is in cache) instead of taking them saved from the forward: the op table keeps one
output per primitive, and this way nothing but the input is kept for backward. Rows of
length 0 give empty results. ``*_reference`` are the NumPy formulations.

Precision: a row's ``mean`` and ``rstd`` and the row sums of the input gradient accumulate
in float64 (two passes for the variance). The element-wise arithmetic runs in the input's
dtype, so that float32 rows fill eight SIMD lanes, not four (float64 made these kernels
twice as slow as PyTorch's): ``h`` is computed once per row into a row buffer as
``((x - hi) - lo) * rstd``, with ``hi + lo`` the float64 ``mean`` split into two values of
the input's dtype, so that a row far from 0 relative to its spread keeps its digits (its
``x - hi`` is exact). The weight and bias gradients add the rows of a chunk of
``ROWS_PER_CHUNK`` rows in the input's dtype, then the chunks in float64.
"""

import math

import numpy as np
from numba import njit

__all__ = [
    "ROWS_PER_CHUNK",
    "layer_norm_forward",
    "layer_norm_backward",
    "layer_norm_weight_grad",
    "layer_norm_forward_into",
    "layer_norm_backward_into",
    "layer_norm_weight_grad_chunks",
    "layer_norm_grads",
    "layer_norm_grads_chunks",
    "layer_norm_forward_reference",
    "layer_norm_backward_reference",
    "layer_norm_weight_grad_reference",
    "layer_norm_grads_reference",
]

ROWS_PER_CHUNK = 64  # layer_norm_weight_grad sums rows in chunks, then the chunks


# Row reductions are separate functions compiled with reassociation allowed, so that LLVM
# sums in SIMD lanes; the element-wise loops keep IEEE semantics.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _row_stats(x, i, eps):
    d = x.shape[1]
    s = np.float64(0.0)
    for j in range(d):
        s += x[i, j]
    mean = s / d
    v = np.float64(0.0)
    for j in range(d):
        c = x[i, j] - mean
        v += c * c
    return mean, 1.0 / math.sqrt(v / d + eps)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _row_grad_sums(g, w, h, i):
    sa = np.float64(0.0)
    sah = np.float64(0.0)
    for j in range(h.shape[0]):
        a = g[i, j] * np.float64(w[j])
        sa += a
        sah += a * h[j]
    return sa, sah


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _normalize_row(x, i, eps, h):
    """``h = (x[i] - mean) * rstd`` in ``x``'s dtype (the module's docstring says how);
    returns ``rstd`` in that dtype. Compiled without reassociation, which would add the
    two halves of ``mean`` before subtracting them."""
    mean, rstd = _row_stats(x, i, eps)
    t = x.dtype.type
    hi = t(mean)
    lo = t(mean - hi)
    r = t(rstd)
    for j in range(x.shape[1]):
        h[j] = ((x[i, j] - hi) - lo) * r
    return r


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _grad_means(g, w, h, i, inv_d):
    """``mean(g * w)`` and ``mean(g * w * h)`` of row ``i``, in ``h``'s dtype; the input
    gradient is ``rstd * (g * w - ma - h * mah)``."""
    sa, sah = _row_grad_sums(g, w, h, i)
    t = h.dtype.type
    return t(sa * inv_d), t(sah * inv_d)


# the messages are constants of each checker: numba 0.60 compiles a message passed as an
# argument into the first specialisation and raises it for every later one
@njit(cache=True, nogil=True, error_model="numpy")
def _check_g(x, g):
    if g.shape != x.shape:
        raise ValueError("layer norm kernel: g must have the input's shape")


@njit(cache=True, nogil=True, error_model="numpy")
def _check_out(x, out):
    if out.shape != x.shape:
        raise ValueError("layer norm kernel: out must have the input's shape")


@njit(cache=True, nogil=True, error_model="numpy")
def _check_affine(x, weight):
    if weight.shape[0] != x.shape[1]:
        raise ValueError("layer norm kernel: weight and bias must have the rows' length")


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_forward_into(x, weight, bias, eps, out):
    """``out = (x - mean) * rstd * weight + bias`` for each row of ``x`` (N, D); ``weight``
    and ``bias`` are (D,)."""
    _check_out(x, out)
    _check_affine(x, weight)
    _check_affine(x, bias)
    if x.shape[1] == 0:
        return
    h = np.empty(x.shape[1], dtype=x.dtype)
    for i in range(x.shape[0]):
        _normalize_row(x, i, eps, h)
        for j in range(x.shape[1]):
            out[i, j] = h[j] * weight[j] + bias[j]


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_forward(x, weight, bias, eps):
    """``(x - mean) * rstd * weight + bias`` for each row of ``x`` (N, D); ``weight`` and
    ``bias`` are (D,)."""
    out = np.empty_like(x)
    layer_norm_forward_into(x, weight, bias, eps, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_backward_into(g, x, weight, eps, out):
    """``out`` = the gradient with respect to ``x`` of ``layer_norm_forward(x, weight,
    bias, eps)`` times ``g`` (N, D)."""
    _check_g(x, g)
    _check_out(x, out)
    _check_affine(x, weight)
    if x.shape[1] == 0:
        return
    inv_d = 1.0 / x.shape[1]
    h = np.empty(x.shape[1], dtype=x.dtype)
    for i in range(x.shape[0]):
        r = _normalize_row(x, i, eps, h)
        ma, mah = _grad_means(g, weight, h, i, inv_d)
        for j in range(x.shape[1]):
            out[i, j] = r * (g[i, j] * weight[j] - ma - h[j] * mah)


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_backward(g, x, weight, eps):
    """The gradient with respect to ``x`` of ``layer_norm_forward(x, weight, bias, eps)``
    times ``g`` (N, D)."""
    out = np.empty_like(g)
    layer_norm_backward_into(g, x, weight, eps, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_weight_grad_chunks(g, x, eps, partial):
    """``partial[c] = sum over the rows of chunk c of g * (x - mean) * rstd``, chunk ``c``
    the rows ``c * ROWS_PER_CHUNK`` up to ``(c + 1) * ROWS_PER_CHUNK`` of ``x`` (N, D);
    ``partial`` is float64 (chunks, D), zeros on entry. The partial sums of the rows of
    one chunk, so that the parts of ``x`` (cut at chunk boundaries) can run on several
    threads and their chunks be summed in order after."""
    n, d = x.shape
    _check_g(x, g)
    if partial.shape[0] != (n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK or partial.shape[1] != d:
        raise ValueError("layer norm kernel: partial must be (chunks of the rows, D)")
    h = np.empty(d, dtype=x.dtype)
    acc = np.empty(d, dtype=x.dtype)  # a chunk's sum, in the input's dtype
    for c in range(partial.shape[0]):
        acc[:] = 0.0
        for i in range(c * ROWS_PER_CHUNK, min((c + 1) * ROWS_PER_CHUNK, n)):
            _normalize_row(x, i, eps, h)
            for j in range(d):
                acc[j] += g[i, j] * h[j]
        for j in range(d):
            partial[c, j] += acc[j]


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_weight_grad(g, x, eps):
    """``sum over rows of g * (x - mean) * rstd``: the weight gradient (D,) of
    ``layer_norm_forward``. Rows are summed in chunks and then the chunks, which rounds
    better than one running sum over many rows."""
    n, d = x.shape
    if d == 0:
        return np.zeros(0, dtype=x.dtype)
    partial = np.zeros(((n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK, d))
    layer_norm_weight_grad_chunks(g, x, eps, partial)
    total = np.zeros(d)
    for c in range(partial.shape[0]):
        for j in range(d):
            total[j] += partial[c, j]
    return total.astype(x.dtype)


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_grads_chunks(g, x, weight, eps, out, partial):
    """``out`` = the input gradient (as ``layer_norm_backward_into``), and ``partial[c, 0]``
    = the sum over the rows of chunk ``c`` of ``g * h`` (as in
    ``layer_norm_weight_grad_chunks``), ``partial[c, 1]`` that of ``g``: the three
    gradients of ``layer_norm_forward`` in one pass over each row. ``partial`` is float64
    (chunks, 2, D), zeros on entry; the chunks as in ``layer_norm_weight_grad_chunks``, so
    that parts cut at chunk boundaries can run on several threads."""
    n, d = x.shape
    _check_g(x, g)
    _check_out(x, out)
    _check_affine(x, weight)
    if partial.shape != ((n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK, 2, d):
        raise ValueError("layer norm kernel: partial must be (chunks of the rows, 2, D)")
    if d == 0:
        return
    inv_d = 1.0 / d
    h = np.empty(d, dtype=x.dtype)
    acc = np.empty((2, d), dtype=x.dtype)  # a chunk's sums, in the input's dtype
    for c in range(partial.shape[0]):
        acc[:] = 0.0
        for i in range(c * ROWS_PER_CHUNK, min((c + 1) * ROWS_PER_CHUNK, n)):
            r = _normalize_row(x, i, eps, h)
            ma, mah = _grad_means(g, weight, h, i, inv_d)
            for j in range(d):
                gij = g[i, j]
                out[i, j] = r * (gij * weight[j] - ma - h[j] * mah)
                acc[0, j] += gij * h[j]
                acc[1, j] += gij
        for k in range(2):
            for j in range(d):
                partial[c, k, j] += acc[k, j]


@njit(cache=True, nogil=True, error_model="numpy")
def layer_norm_grads(g, x, weight, eps):
    """``(input gradient (N, D), weight gradient (D,), bias gradient (D,))`` of
    ``layer_norm_forward(x, weight, bias, eps)`` times ``g``, in one pass; the sums over
    rows in chunks, then the chunks (as ``layer_norm_weight_grad``)."""
    n, d = x.shape
    out = np.empty_like(g)
    partial = np.zeros(((n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK, 2, d))
    layer_norm_grads_chunks(g, x, weight, eps, out, partial)
    total = np.zeros((2, d))
    for c in range(partial.shape[0]):
        for k in range(2):
            for j in range(d):
                total[k, j] += partial[c, k, j]
    sums = total.astype(g.dtype)
    return out, sums[0], sums[1]


def _normalized(x, eps):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def layer_norm_forward_reference(x, weight, bias, eps):
    """NumPy formulation of ``layer_norm_forward``."""
    return _normalized(x, eps) * weight + bias


def layer_norm_backward_reference(g, x, weight, eps):
    """NumPy formulation of ``layer_norm_backward``."""
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    h = (x - mean) * rstd
    a = g * weight
    return rstd * (a - a.mean(axis=1, keepdims=True) - h * (a * h).mean(axis=1, keepdims=True))


def layer_norm_weight_grad_reference(g, x, eps):
    """NumPy formulation of ``layer_norm_weight_grad``."""
    return (g * _normalized(x, eps)).sum(axis=0)


def layer_norm_grads_reference(g, x, weight, eps):
    """NumPy formulation of ``layer_norm_grads``."""
    return (layer_norm_backward_reference(g, x, weight, eps),
            layer_norm_weight_grad_reference(g, x, eps), g.sum(axis=0))
