"""An optimizer's update of many parameters in one compiled call: ``optim/adam.py``'s step
over a parameter group, each parameter's update ``optim.adam_update`` itself, called on the
arrays that a row of addresses points at.

A row of ``table`` (int64, six words) holds the addresses of one parameter's ``p``, ``g``,
``m``, ``v`` and ``vmax`` (``p``'s where there is no AMSGrad maximum) and their common size;
each array C-contiguous, of the dtype of ``coefs``. A row of ``coefs`` (eight scalars) holds
that parameter's scalars in its dtype, in this order: the decay, ``beta1``, ``1 - beta1``,
``beta2``, ``1 - beta2``, ``eps``, the bias correction ``sqrt(1 - beta2**step)`` and the step
size ``lr / (1 - beta1**step)``. The update of each parameter is ``adam_update``'s with those
scalars, so it equals that call bit for bit. The caller writes the addresses from the arrays
(``param_row``); the kernel checks the tables' shapes, not the addresses.

Nothing here imports memgrad. It needs numba's compiler (with ``NUMBA_DISABLE_JIT=1`` the
optimizer updates one parameter at a time).
"""

from numba import carray, njit

from memgrad._kernels.handoff import f32_at, f64_at
from memgrad._kernels.optim import adam_update

__all__ = ["param_row", "adam_update_params"]


@njit(cache=True, nogil=True)
def param_row(p, g, m, v, vmax):
    """The row of ``adam_update_params``'s table for these arrays (``vmax``: ``p`` where
    there is none), from one compiled call (NumPy's ``ctypes.data`` makes an object per
    array)."""
    return (p.ctypes.data, g.ctypes.data, m.ctypes.data, v.ctypes.data, vmax.ctypes.data,
            p.size)


@njit(cache=True, nogil=True, error_model="numpy")
def adam_update_params(table, coefs, decay_mode, amsgrad):
    """``adam_update`` on each parameter that a row of ``table`` points at, with the scalars
    of the same row of ``coefs`` (float32 or float64: the parameters' dtype); ValueError for
    tables of other shapes."""
    if table.shape[1] != 6 or coefs.shape[1] != 8 or coefs.shape[0] != table.shape[0]:
        raise ValueError("adam_update_params: expected a table (N, 6) and coefs (N, 8)")
    for i in range(table.shape[0]):
        n = table[i, 5]
        c = coefs[i]
        if coefs.itemsize == 4:
            p = carray(f32_at(table[i, 0]), n)
            vmax = p if not amsgrad else carray(f32_at(table[i, 4]), n)
            adam_update(p, carray(f32_at(table[i, 1]), n), carray(f32_at(table[i, 2]), n),
                        carray(f32_at(table[i, 3]), n), vmax, decay_mode, c[0], c[1], c[2],
                        c[3], c[4], amsgrad, c[6], c[5], c[7])
        else:
            p = carray(f64_at(table[i, 0]), n)
            vmax = p if not amsgrad else carray(f64_at(table[i, 4]), n)
            adam_update(p, carray(f64_at(table[i, 1]), n), carray(f64_at(table[i, 2]), n),
                        carray(f64_at(table[i, 3]), n), vmax, decay_mode, c[0], c[1], c[2],
                        c[3], c[4], amsgrad, c[6], c[5], c[7])

