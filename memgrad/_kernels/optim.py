"""The Adam update of one parameter in one pass over its elements, and SGD's last step.

``adam_update`` does, element by element, the sequence of NumPy operations that
``adam_update_reference`` does array by array (the update of ``optim/adam.py``): the same
operations in the same order on the same dtype, each rounded once, so that the results are
equal bit for bit. The arrays are flat and of one dtype (float32 or float64); the scalars
are given in that dtype (a float32 step takes ``np.float32`` scalars). ``decay_mode`` is 0
(no weight decay), 1 (decoupled: ``p = p * decay`` first, AdamW) or 2 (L2: the gradient
is ``p * decay + g``, Adam). With ``amsgrad`` the running maximum ``vmax`` of ``v`` is
updated and used in place of ``v``.

``sgd_step_into`` is SGD's ``p = p - g * lr`` in place, in one pass (``optim/sgd.py``): the
multiply and the subtraction of ``sgd_step_reference``, each rounded once, so equal bit for
bit; flat arrays of one dtype, ``lr`` rounded to it first, as NumPy rounds a Python float
for a float32 array. It takes ``p`` last, as the kernels that write into their last
argument (and run as jobs of ``jobs.py``), and reads it there: with ``p`` also an input, the
loop would have to tell whether an input and the output overlap, and LLVM's vectorized loop
declines arrays that are the same.
"""

import numpy as np
from numba import njit

__all__ = ["adam_update", "adam_update_reference", "sgd_step_into", "sgd_step_reference"]


@njit(cache=True, nogil=True, error_model="numpy")
def adam_update(p, g, m, v, vmax, decay_mode, decay, beta1, one_minus_beta1, beta2,
                one_minus_beta2, amsgrad, bias2_sqrt, eps, step_size):
    if decay_mode == 2 or amsgrad:
        if decay_mode == 1:
            for i in range(p.size):
                p[i] = p[i] * decay
        _adam_general(p, g, m, v, vmax, decay_mode == 2, decay, beta1, one_minus_beta1,
                      beta2, one_minus_beta2, amsgrad, bias2_sqrt, eps, step_size)
        return
    # the usual cases in loops without branches, which LLVM vectorizes; AdamW's decay in
    # the same pass (one read of p, not two)
    if decay_mode == 1:
        for i in range(p.size):
            gi = g[i]
            mi = m[i] * beta1 + gi * one_minus_beta1
            vi = v[i] * beta2 + (gi * gi) * one_minus_beta2
            m[i] = mi
            v[i] = vi
            p[i] = p[i] * decay - (mi / (np.sqrt(vi) / bias2_sqrt + eps)) * step_size
        return
    for i in range(p.size):
        gi = g[i]
        mi = m[i] * beta1 + gi * one_minus_beta1
        vi = v[i] * beta2 + (gi * gi) * one_minus_beta2
        m[i] = mi
        v[i] = vi
        p[i] = p[i] - (mi / (np.sqrt(vi) / bias2_sqrt + eps)) * step_size


@njit(cache=True, nogil=True, error_model="numpy")
def _adam_general(p, g, m, v, vmax, l2, decay, beta1, one_minus_beta1, beta2,
                  one_minus_beta2, amsgrad, bias2_sqrt, eps, step_size):
    for i in range(p.size):
        pi = p[i]
        gi = g[i]
        if l2:
            gi = pi * decay + gi
        mi = m[i] * beta1 + gi * one_minus_beta1
        vi = v[i] * beta2 + (gi * gi) * one_minus_beta2
        m[i] = mi
        v[i] = vi
        if amsgrad:
            vm = vmax[i]
            if vi > vm or vi != vi:  # np.maximum: NaN wins
                vm = vi
            vmax[i] = vm
            vi = vm
        p[i] = pi - (mi / (np.sqrt(vi) / bias2_sqrt + eps)) * step_size


def adam_update_reference(p, g, m, v, vmax, decay_mode, decay, beta1, one_minus_beta1, beta2,
                          one_minus_beta2, amsgrad, bias2_sqrt, eps, step_size):
    if decay_mode == 1:
        np.multiply(p, decay, out=p)
    elif decay_mode == 2:
        g = p * decay + g
    np.multiply(m, beta1, out=m)
    np.add(m, g * one_minus_beta1, out=m)
    np.multiply(v, beta2, out=v)
    np.add(v, (g * g) * one_minus_beta2, out=v)
    if amsgrad:
        np.maximum(vmax, v, out=vmax)
        v = vmax
    t = np.sqrt(v) / bias2_sqrt + eps
    np.subtract(p, (m / t) * step_size, out=p)


@njit(cache=True, nogil=True)
def sgd_step_into(g, lr, p):
    """``p = p - g * lr`` in place, element by element, over flat ``g`` and ``p`` of one
    length (checked first: ValueError).

    Example:
        >>> p = np.array([1.0, 2.0])
        >>> sgd_step_into(np.array([10.0, -10.0]), 0.5, p); p
        array([-4.,  7.])
    """
    if p.shape[0] != g.shape[0]:
        raise ValueError("sgd_step_into: g and p must have one length")
    step = p.dtype.type(lr)
    for i in range(p.shape[0]):
        p[i] = p[i] - g[i] * step


def sgd_step_reference(p, g, lr):
    """NumPy formulation of ``sgd_step_into`` (two ufuncs, ``lr`` rounded to ``p``'s dtype);
    returns ``p - g * lr``."""
    return np.subtract(p, np.multiply(g, p.dtype.type(lr)))
