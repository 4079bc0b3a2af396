"""The Winograd convolution's loops over the batch as jobs of the hand-off (NOTE [ Winograd
convolution as jobs ] in memgrad/ops/conv.py): one compiled job, ``WINOGRAD_JOB``, runs one
part of the batch, described by a row of ``WINOGRAD_WORDS`` int64 words, without the GIL, on
the calling thread and on the helpers at once (through ``handoff.run_jobs``, as
``handoff.PRODUCTS_JOB``).

A part of the forward (``W_KIND`` 0), for each of its samples: ``winograd_input`` of the
sample into the part's scratch ``v``, one ``cblas_?gemm`` per position ``p`` of the 4x4
tiles, ``m[p] = u[p] @ v[p]`` ((CO, C) @ (C, S), S the entries per channel), and
``winograd_output`` of ``m`` into the sample's output, bias added. A part of the weight
gradient (``W_KIND`` 1): ``winograd_input`` of the sample into ``v`` and ``winograd_grad`` of
its ``g`` into ``m`` (adding ``g``'s channel sums into the part's float64 ``sums`` when
``W_SUMS`` is nonzero), then per position ``prod[p] = v[p] @ m[p]^T`` ((C, S) @ (S, CO)), added
into the part's ``acc`` (16, C, CO); the caller adds the parts' ``acc`` and ``sums`` in part
order. Each product is the BLAS call NumPy's matmul makes for the same operands, and every
sample's work is the Python loop's, so a part computes what that loop computes.

A row's words: the kind, whether the arrays are float64 (else float32), the part's samples
``[lo, hi)``, the channels in (``C``) and out (``CO``), the input's height and width, the
output's, the padding, the address of the ILP64 ``cblas_?gemm`` to call; the addresses of
``x`` (N, C, H, W), of ``u`` (16, CO, C) or ``g`` (N, CO, OH, OW), of the bias (CO,) or the
part's ``sums`` (CO,), of the output (N, CO, OH, OW) or the part's ``acc`` (16, C, CO), of the
part's scratch ``v`` (16, LV), ``m`` (16, LM) and, for the weight gradient, ``prod``
(16, C, CO); the row lengths LV and LM; the addresses of the input transform's offsets
(int64) and signs (of the arrays' dtype), (16, 4) each (``winograd.transform_terms``), and
of the gradient transform's; whether to add
into ``sums``; last, the id of the thread that ran the part. The job checks nothing: its
caller checks the arrays before it writes their addresses (the transforms check the shapes
the words give them).

Nothing here imports memgrad. The job needs numba's compiler (with ``NUMBA_DISABLE_JIT=1``
memgrad runs the loops as Python parts).
"""

import numpy as np
from numba import carray, cfunc, njit, types

from memgrad._kernels.blas import _gemm
from memgrad._kernels.handoff import _thread_self, f32_at, f64_at, i64_at
from memgrad._kernels.winograd import _winograd_grad, _winograd_input, _winograd_output

__all__ = ["WINOGRAD_WORDS", "WINOGRAD_JOB", "W_KIND", "W_DOUBLE", "W_LO", "W_HI", "W_C",
           "W_CO", "W_H", "W_W", "W_OH", "W_OW", "W_PH", "W_PW", "W_GEMM", "W_X", "W_Y",
           "W_BIAS", "W_OUT", "W_V", "W_M", "W_PROD", "W_LV", "W_LM", "W_OFFSETS", "W_SIGNS",
           "W_GRAD_OFFSETS", "W_GRAD_SIGNS", "W_SUMS", "W_THREAD", "FORWARD", "WEIGHT_GRAD"]

FORWARD, WEIGHT_GRAD = 0, 1

# a part's words, in this order
(W_KIND, W_DOUBLE, W_LO, W_HI, W_C, W_CO, W_H, W_W, W_OH, W_OW, W_PH, W_PW, W_GEMM, W_X, W_Y,
 W_BIAS, W_OUT, W_V, W_M, W_PROD, W_LV, W_LM, W_OFFSETS, W_SIGNS, W_GRAD_OFFSETS,
 W_GRAD_SIGNS, W_SUMS, W_THREAD) = range(28)
WINOGRAD_WORDS = 28

_NO_TRANS, _TRANS = 111, 112



@njit(nogil=True, cache=True)
def _forward_part(w, x, u, bias, out, v, m, offsets, signs):
    """The forward's samples ``[lo, hi)`` of ``w``'s part."""
    c, co, oh, ow = w[W_C], w[W_CO], w[W_OH], w[W_OW]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    per = th * (tw + 1)
    item = x.itemsize
    for i in range(w[W_LO], w[W_HI]):
        _winograd_input(x[i], v, w[W_PH], w[W_PW], th, tw, offsets, signs)
        for p in range(16):
            _gemm(w[W_GEMM], w[W_DOUBLE], _NO_TRANS, _NO_TRANS, co, per, c,
                  u.ctypes.data + p * co * c * item, c, v.ctypes.data + p * v.shape[1] * item,
                  per, 0.0, m.ctypes.data + p * m.shape[1] * item, per)
        _winograd_output(m, bias, out[i])


@njit(nogil=True, cache=True)
def _grad_part(w, x, g, sums, acc, v, m, prod, offsets, signs, grad_offsets, grad_signs):
    """The weight gradient's samples ``[lo, hi)`` of ``w``'s part, added into ``acc`` (and
    ``g``'s channel sums into ``sums`` unless it is empty)."""
    c, co, oh, ow = w[W_C], w[W_CO], w[W_OH], w[W_OW]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    per = th * (tw + 1)
    item = x.itemsize
    flat_acc, flat_prod = acc.reshape(-1), prod.reshape(-1)
    for i in range(w[W_LO], w[W_HI]):
        _winograd_input(x[i], v, w[W_PH], w[W_PW], th, tw, offsets, signs)
        _winograd_grad(g[i], m, grad_offsets, grad_signs, sums)
        for p in range(16):
            _gemm(w[W_GEMM], w[W_DOUBLE], _NO_TRANS, _TRANS, c, co, per,
                  v.ctypes.data + p * v.shape[1] * item, per,
                  m.ctypes.data + p * m.shape[1] * item, per, 0.0,
                  prod.ctypes.data + p * c * co * item, co)
        for j in range(flat_acc.shape[0]):
            flat_acc[j] += flat_prod[j]


@njit(nogil=True, cache=True)
def _run(w, x, y, z, out, v, m, prod, signs, grad_signs):
    """One part, its arrays typed (float32 or float64): ``y`` is ``u`` (16, CO, C) or ``g``
    flattened, ``z`` the bias."""
    terms = (16, 4)
    offsets = carray(i64_at(w[W_OFFSETS]), terms)
    if w[W_KIND] == FORWARD:
        _forward_part(w, x, y.reshape((16, w[W_CO], w[W_C])), z,
                      out.reshape((w[W_HI], w[W_CO], w[W_OH], w[W_OW])), v, m, offsets, signs)
        return
    sums = carray(f64_at(w[W_BIAS]), w[W_CO] if w[W_SUMS] else 0)
    _grad_part(w, x, y.reshape((w[W_HI], w[W_CO], w[W_OH], w[W_OW])), sums,
               out.reshape((16, w[W_C], w[W_CO])), v, m, prod.reshape((16, w[W_C], w[W_CO])),
               offsets, signs, carray(i64_at(w[W_GRAD_OFFSETS]), terms), grad_signs)


@cfunc(types.void(types.int32, types.voidptr, types.int32), cache=True)
def _winograd_job(index, data, arg):
    w = carray(data, WINOGRAD_WORDS, np.int64)
    w[W_THREAD] = _thread_self()
    if w[W_HI] <= w[W_LO]:
        return
    n, c, co = w[W_HI], w[W_C], w[W_CO]
    x_shape = (n, c, w[W_H], w[W_W])
    y_size = 16 * co * c if w[W_KIND] == FORWARD else n * co * w[W_OH] * w[W_OW]
    out_size = n * co * w[W_OH] * w[W_OW] if w[W_KIND] == FORWARD else 16 * c * co
    prod_size = 0 if w[W_KIND] == FORWARD else 16 * c * co
    v_shape, m_shape, terms = (16, w[W_LV]), (16, w[W_LM]), (16, 4)
    if w[W_DOUBLE]:
        _run(w, carray(f64_at(w[W_X]), x_shape), carray(f64_at(w[W_Y]), y_size),
             carray(f64_at(w[W_BIAS]), co), carray(f64_at(w[W_OUT]), out_size),
             carray(f64_at(w[W_V]), v_shape), carray(f64_at(w[W_M]), m_shape),
             carray(f64_at(w[W_PROD]), prod_size), carray(f64_at(w[W_SIGNS]), terms),
             carray(f64_at(w[W_GRAD_SIGNS]), terms))
    else:
        _run(w, carray(f32_at(w[W_X]), x_shape), carray(f32_at(w[W_Y]), y_size),
             carray(f32_at(w[W_BIAS]), co), carray(f32_at(w[W_OUT]), out_size),
             carray(f32_at(w[W_V]), v_shape), carray(f32_at(w[W_M]), m_shape),
             carray(f32_at(w[W_PROD]), prod_size), carray(f32_at(w[W_SIGNS]), terms),
             carray(f32_at(w[W_GRAD_SIGNS]), terms))


WINOGRAD_JOB = _winograd_job.address
