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
chunks of rows, which ``sum_chunks_into`` adds up in order), so that parts of the rows can
run on several threads.

The statistics of up to ``_BLOCK_ROWS`` rows are computed together, each pass over the
block before the next (``_block_stats``): row by row, a short row's division and square
root waited for its own sums (1024x64 float32 rows: 67 against 32 us forward).

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
    "sum_chunks_into",
    "layer_norm_forward_reference",
    "layer_norm_backward_reference",
    "layer_norm_weight_grad_reference",
    "layer_norm_grads_reference",
]

ROWS_PER_CHUNK = 64  # layer_norm_weight_grad sums rows in chunks, then the chunks
# the statistics of a block of up to _BLOCK_ROWS rows of up to _BLOCK_ELEMENTS elements in
# all are computed together (_block_stats)
_BLOCK_ROWS = 8
_BLOCK_ELEMENTS = 4096


# Row reductions are separate functions compiled with reassociation allowed, so that LLVM
# sums in SIMD lanes; the element-wise loops keep IEEE semantics.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _row_sum(x, i):
    s = np.float64(0.0)
    for j in range(x.shape[1]):
        s += x[i, j]
    return s


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _row_centred_squares(x, i, mean):
    v = np.float64(0.0)
    for j in range(x.shape[1]):
        c = x[i, j] - mean
        v += c * c
    return v


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _row_grad_sums(g, w, h, i):
    sa = np.float64(0.0)
    sah = np.float64(0.0)
    for j in range(h.shape[0]):
        a = g[i, j] * np.float64(w[j])
        sa += a
        sah += a * h[j]
    return sa, sah


@njit(cache=True, nogil=True, error_model="numpy")
def _block_scratch(x):
    """``(rows, h, mean, rstd)``: the rows of a block (``_BLOCK_ROWS``, fewer for long
    rows: a block's rows are read once per pass of ``_block_stats`` and then by the
    caller, from cache), a row buffer in ``x``'s dtype, and a block's float64 statistics."""
    d = x.shape[1]
    rows = max(1, min(_BLOCK_ROWS, _BLOCK_ELEMENTS // max(d, 1)))
    return rows, np.empty(d, dtype=x.dtype), np.empty(rows), np.empty(rows)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _block_stats(x, i0, i1, eps, mean, rstd):
    """``mean[k]`` and ``rstd[k]`` (float64) of the rows ``i0 + k`` for ``i0 + k < i1``,
    each pass over all the block's rows before the next: row by row, each row's divisions
    and square root waited for its own sums, a latency that cost short rows more than
    their sums."""
    d = x.shape[1]
    for i in range(i0, i1):
        mean[i - i0] = _row_sum(x, i)
    for k in range(i1 - i0):
        mean[k] = mean[k] / d
    for i in range(i0, i1):
        rstd[i - i0] = _row_centred_squares(x, i, mean[i - i0])
    for k in range(i1 - i0):
        rstd[k] = 1.0 / math.sqrt(rstd[k] / d + eps)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _centring(mean, rstd, t):
    """``(hi, lo, r)`` in dtype ``t``: ``mean = hi + lo`` split in two, ``rstd`` rounded;
    ``h = ((x - hi) - lo) * r`` (the module's docstring says why)."""
    hi = t(mean)
    return hi, t(mean - hi), t(rstd)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _normalize_row(x, i, mean, rstd, h):
    """``h = (x[i] - mean) * rstd`` in ``x``'s dtype; returns ``rstd`` in that dtype.
    Compiled without reassociation, which would add the two halves of ``mean`` before
    subtracting them."""
    hi, lo, r = _centring(mean, rstd, x.dtype.type)
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
    n, d = x.shape
    if d == 0:
        return
    rows, _, mean, rstd = _block_scratch(x)
    for i0 in range(0, n, rows):
        i1 = min(i0 + rows, n)
        _block_stats(x, i0, i1, eps, mean, rstd)
        for i in range(i0, i1):
            hi, lo, r = _centring(mean[i - i0], rstd[i - i0], x.dtype.type)
            for j in range(d):
                out[i, j] = (((x[i, j] - hi) - lo) * r) * weight[j] + bias[j]


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
    n, d = x.shape
    if d == 0:
        return
    inv_d = 1.0 / d
    rows, h, mean, rstd = _block_scratch(x)
    for i0 in range(0, n, rows):
        i1 = min(i0 + rows, n)
        _block_stats(x, i0, i1, eps, mean, rstd)
        for i in range(i0, i1):
            r = _normalize_row(x, i, mean[i - i0], rstd[i - i0], h)
            ma, mah = _grad_means(g, weight, h, i, inv_d)
            for j in range(d):
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
    rows, h, mean, rstd = _block_scratch(x)
    acc = np.empty(d, dtype=x.dtype)  # a chunk's sum, in the input's dtype
    for c in range(partial.shape[0]):
        acc[:] = 0.0
        end = min((c + 1) * ROWS_PER_CHUNK, n)
        for i0 in range(c * ROWS_PER_CHUNK, end, rows):
            i1 = min(i0 + rows, end)
            _block_stats(x, i0, i1, eps, mean, rstd)
            for i in range(i0, i1):
                _normalize_row(x, i, mean[i - i0], rstd[i - i0], h)
                for j in range(d):
                    acc[j] += g[i, j] * h[j]
        for j in range(d):
            partial[c, j] += acc[j]


@njit(cache=True, nogil=True, error_model="numpy")
def sum_chunks_into(partial, out):
    """``out[j] = partial[0, j] + partial[1, j] + ...`` (the chunks' sums, in order, in
    float64), rounded to ``out``'s dtype; ``partial`` is (chunks, M) and ``out`` (M,)."""
    if out.shape[0] != partial.shape[1]:
        raise ValueError("layer norm kernel: out must have a chunk's length")
    total = np.zeros(partial.shape[1])
    for c in range(partial.shape[0]):
        for j in range(partial.shape[1]):
            total[j] += partial[c, j]
    for j in range(partial.shape[1]):
        out[j] = total[j]


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
    total = np.empty(d, dtype=x.dtype)
    sum_chunks_into(partial, total)
    return total


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
    rows, h, mean, rstd = _block_scratch(x)
    acc = np.empty((2, d), dtype=x.dtype)  # a chunk's sums, in the input's dtype
    for c in range(partial.shape[0]):
        acc[:] = 0.0
        end = min((c + 1) * ROWS_PER_CHUNK, n)
        for i0 in range(c * ROWS_PER_CHUNK, end, rows):
            i1 = min(i0 + rows, end)
            _block_stats(x, i0, i1, eps, mean, rstd)
            for i in range(i0, i1):
                r = _normalize_row(x, i, mean[i - i0], rstd[i - i0], h)
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
    sums = np.empty((2, d), dtype=g.dtype)
    sum_chunks_into(partial.reshape(partial.shape[0], 2 * d), sums.reshape(2 * d))
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
