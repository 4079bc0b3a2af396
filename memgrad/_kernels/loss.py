"""The negative log-likelihood over class-index targets, forward and backward, with PyTorch's
label smoothing; ``cross_entropy`` is this after ``log_softmax``.

``logp`` is C-contiguous (N, C) log-probabilities (float32 or float64) with C >= 1,
``target`` (N,) int64 class indices in ``[0, C)`` or ``ignore_index``. With label smoothing
``ls``, row ``i`` loses

    -(1 - ls) * logp[i, t] - ls * mean(logp[i])

(the target distribution puts ``1 - ls + ls / C`` on the class and ``ls / C`` on every
other), and an ignored row loses 0. The backward is linear in the loss gradient ``g``:
``-g[i] * q[i]`` with ``q`` that distribution, 0 on ignored rows.

Both kernels check every target before they touch memory: a target outside ``[0, C)`` that
is not ``ignore_index`` raises IndexError (callers check first, with a message that names the
op and the value). ``*_reference`` are the NumPy formulations.

The squared error of ``mse_loss``: ``squared_error_sum`` is ``sum((x - t) ** 2)`` over flat
arrays of one shape in one pass, each difference rounded to the inputs' dtype (as ``x - t``
is) and squared and summed in float64; ``squared_error_grad_into`` writes its gradient
``2 * (scale * (x - t))`` in the inputs' dtype, the arithmetic of the gradient of a mean or
sum of ``d * d`` (``scale`` the loss gradient, divided by the element count for a mean).
"""

import numpy as np
from numba import njit

from memgrad._kernels.softmax import row_sum

__all__ = [
    "nll_forward",
    "nll_backward",
    "nll_forward_reference",
    "nll_backward_reference",
    "squared_error_sum",
    "squared_error_grad_into",
    "squared_error_sum_reference",
    "squared_error_grad_reference",
]


@njit(cache=True, nogil=True)
def _check_targets(target, classes, ignore_index):
    for i in range(target.shape[0]):
        t = target[i]
        if t != ignore_index and (t < 0 or t >= classes):
            raise IndexError("nll: a target is out of range for the number of classes")


@njit(cache=True, nogil=True, error_model="numpy")
def nll_forward(logp, target, ignore_index, label_smoothing):
    """The loss of each row (N,), in ``logp``'s dtype."""
    n, c = logp.shape
    _check_targets(target, c, ignore_index)
    out = np.zeros(n, dtype=logp.dtype)
    for i in range(n):
        t = target[i]
        if t == ignore_index:
            continue
        loss = -np.float64(logp[i, t])
        if label_smoothing != 0.0:  # the row's sum in SIMD lanes (a running sum is scalar)
            loss = (1.0 - label_smoothing) * loss - label_smoothing * row_sum(logp[i]) / c
        out[i] = loss
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def nll_backward(g, target, classes, ignore_index, label_smoothing):
    """``-g[i] * q[i]`` for each row (N, C); ``g`` is (N,)."""
    n = target.shape[0]
    _check_targets(target, classes, ignore_index)
    out = np.zeros((n, classes), dtype=g.dtype)
    off = label_smoothing / classes
    for i in range(n):
        t = target[i]
        if t == ignore_index:
            continue
        gi = np.float64(g[i])
        if off != 0.0:
            for j in range(classes):
                out[i, j] = -gi * off
        out[i, t] -= gi * (1.0 - label_smoothing)
    return out


@njit(cache=True, nogil=True)
def _check_same_shape(a, b):
    if a.shape != b.shape:
        raise ValueError("squared error kernel: the arrays must have one shape")


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def squared_error_sum(x, t):
    """The float64 sum of ``(x - t) ** 2`` over flat arrays of one shape."""
    _check_same_shape(x, t)
    s = 0.0
    for i in range(x.shape[0]):
        d = np.float64(x[i] - t[i])
        s += d * d
    return s


@njit(cache=True, nogil=True, error_model="numpy")
def squared_error_grad_into(x, t, scale, out):
    """``out = 2 * (scale * (x - t))`` elementwise in the inputs' dtype, over flat arrays."""
    _check_same_shape(x, t)
    _check_same_shape(x, out)
    sc = x.dtype.type(scale)
    two = x.dtype.type(2.0)
    for i in range(x.shape[0]):
        out[i] = two * (sc * (x[i] - t[i]))


def squared_error_sum_reference(x, t):
    """NumPy formulation of ``squared_error_sum``."""
    d = (x - t).astype(np.float64)
    return float(np.sum(d * d))


def squared_error_grad_reference(x, t, scale):
    """NumPy formulation of ``squared_error_grad_into``'s result."""
    return 2 * (x.dtype.type(scale) * (x - t))


def nll_forward_reference(logp, target, ignore_index, label_smoothing):
    """NumPy formulation of ``nll_forward``."""
    valid = target != ignore_index
    rows = np.arange(logp.shape[0])
    picked = -logp[rows, np.where(valid, target, 0)]
    loss = (1 - label_smoothing) * picked - label_smoothing * logp.mean(axis=1)
    return np.where(valid, loss, 0).astype(logp.dtype)


def nll_backward_reference(g, target, classes, ignore_index, label_smoothing):
    """NumPy formulation of ``nll_backward``."""
    n = target.shape[0]
    valid = target != ignore_index
    q = np.full((n, classes), label_smoothing / classes)
    q[np.arange(n), np.where(valid, target, 0)] += 1 - label_smoothing
    return (-q * np.where(valid, g, 0)[:, None]).astype(g.dtype)
