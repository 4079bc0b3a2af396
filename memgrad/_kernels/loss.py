"""Fused cross-entropy over class-index targets: log-softmax and the negative
log-likelihood in one pass per row, forward and backward.

``x`` is C-contiguous (N, C) logits (float32 or float64) with C >= 1, ``target`` (N,)
int64 class indices in ``[0, C)`` or ``ignore_index`` (the caller checks both). With
``lse = logsumexp(x[i])`` and label smoothing ``ls``, row ``i`` loses

    (1 - ls) * (lse - x[i, t]) + ls * (lse - mean(x[i]))

(PyTorch's ``label_smoothing``: the target distribution puts ``1 - ls + ls / C`` on the
class and ``ls / C`` on every other), and an ignored row loses 0. The backward gives
``g[i] * (softmax(x[i]) - q[i])`` with ``q`` that distribution, and 0 on ignored rows.
Neither the log-probabilities nor the probabilities are ever stored whole: the backward
recomputes them from ``x`` row by row. ``*_reference`` are the NumPy formulations.
"""

import math

import numpy as np
from numba import njit

from memgrad._kernels.softmax import fast_exp, row_max, row_sum

__all__ = [
    "cross_entropy_forward",
    "cross_entropy_backward",
    "cross_entropy_forward_reference",
    "cross_entropy_backward_reference",
]


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _exp_shifted(row, out):
    """``out = exp(row - max(row))``; returns ``max(row)`` and ``sum(out)``."""
    m = row_max(row)
    for j in range(row.shape[0]):
        out[j] = fast_exp(row[j] - m)
    return m, row_sum(out)


@njit(cache=True, nogil=True, error_model="numpy")
def cross_entropy_forward(x, target, ignore_index, label_smoothing):
    """The loss of each row (N,), in ``x``'s dtype."""
    n, c = x.shape
    out = np.zeros(n, dtype=x.dtype)
    for i in range(n):
        t = target[i]
        if t == ignore_index:
            continue
        e = np.empty(c, dtype=x.dtype)
        m, s = _exp_shifted(x[i], e)
        lse = np.float64(m) + math.log(s)
        loss = lse - x[i, t]
        if label_smoothing != 0.0:
            loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - row_sum(x[i]) / c)
        out[i] = loss
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def cross_entropy_backward(g, x, target, ignore_index, label_smoothing):
    """``g[i] * (softmax(x[i]) - q[i])`` for each row (N, C); ``g`` is (N,)."""
    n, c = x.shape
    out = np.zeros_like(x)
    off = label_smoothing / c
    for i in range(n):
        t = target[i]
        if t == ignore_index:
            continue
        m, s = _exp_shifted(x[i], out[i])
        gi = np.float64(g[i])
        scale = gi / s
        shift = gi * off
        for j in range(c):
            out[i, j] = out[i, j] * scale - shift
        out[i, t] -= gi * (1.0 - label_smoothing)
    return out


def _log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))


def cross_entropy_forward_reference(x, target, ignore_index, label_smoothing):
    """NumPy formulation of ``cross_entropy_forward``."""
    logp = _log_softmax(x)
    valid = target != ignore_index
    rows = np.arange(x.shape[0])
    nll = -logp[rows, np.where(valid, target, 0)]
    loss = (1 - label_smoothing) * nll - label_smoothing * logp.mean(axis=1)
    return np.where(valid, loss, 0).astype(x.dtype)


def cross_entropy_backward_reference(g, x, target, ignore_index, label_smoothing):
    """NumPy formulation of ``cross_entropy_backward``."""
    n, c = x.shape
    valid = target != ignore_index
    q = np.full(x.shape, label_smoothing / c)
    q[np.arange(n), np.where(valid, target, 0)] += 1 - label_smoothing
    p = np.exp(_log_softmax(x))
    return ((p - q) * np.where(valid, g, 0)[:, None]).astype(x.dtype)
