"""Layer normalization's kernels in parts as jobs of the hand-off (NOTE [ Layer norm as jobs ]
in memgrad/ops/nn.py): one compiled job, ``NORM_JOB``, runs one part of the rows of one
kernel call, described by a row of ``NORM_WORDS`` int64 words, without the GIL, on the
calling thread and on the helpers at once (through ``handoff.run_jobs``, as
``handoff.PRODUCTS_JOB``).

The kinds: ``FORWARD`` (``norm.layer_norm_forward_into``), ``BACKWARD``
(``norm.layer_norm_backward_into``), ``WEIGHT_GRAD`` (``norm.layer_norm_weight_grad_chunks``)
and ``GRADS`` (``norm.layer_norm_grads_chunks``). A part is one call of the kernel on its rows
``[lo, hi)``; for the last two, ``lo`` is a multiple of ``norm.ROWS_PER_CHUNK`` and the part
writes the chunks of its rows into the float64 ``partial`` (zeros on entry), which the caller
adds up in order after, so that the results do not depend on the split.

A row's words: the kind, whether the arrays are float64 (else float32), the part's rows
``[lo, hi)``, all the rows ``N`` and their length ``D``, ``eps`` as the bits of a float64, the
addresses of ``x`` (N, D), ``g`` (N, D; ``x``'s for the forward), the weight (D,; ``x``'s for
the weight gradient), the bias (D,; the weight's but in the forward), the output (N, D; ``x``'s
for the weight gradient) and ``partial`` (the chunks' float64 sums: (chunks, D) or
(chunks, 2, D); ``x``'s for the forward and backward, where it is not read); last, the id of
the thread that ran the part. The job checks nothing: its caller checks the arrays before it
writes their addresses.

Nothing here imports memgrad. The job needs numba's compiler (with ``NUMBA_DISABLE_JIT=1``
memgrad runs the kernels as Python parts).
"""

import numpy as np
from numba import carray, cfunc, njit, types

from memgrad._kernels.handoff import _thread_self, f32_at, f64_at
from memgrad._kernels.norm import (
    ROWS_PER_CHUNK,
    layer_norm_backward_into,
    layer_norm_forward_into,
    layer_norm_grads_chunks,
    layer_norm_weight_grad_chunks,
)
from memgrad._kernels.softmax import _int64_as_float64

__all__ = ["NORM_WORDS", "NORM_JOB", "N_KIND", "N_DOUBLE", "N_LO", "N_HI", "N_ROWS", "N_D",
           "N_EPS", "N_X", "N_G", "N_W", "N_B", "N_OUT", "N_PARTIAL", "N_THREAD", "FORWARD",
           "BACKWARD", "WEIGHT_GRAD", "GRADS"]

FORWARD, BACKWARD, WEIGHT_GRAD, GRADS = range(4)

# a part's words, in this order
(N_KIND, N_DOUBLE, N_LO, N_HI, N_ROWS, N_D, N_EPS, N_X, N_G, N_W, N_B, N_OUT, N_PARTIAL,
 N_THREAD) = range(14)
NORM_WORDS = 14



@njit(nogil=True, cache=True)
def _run(w, x, g, weight, bias, out, partial):
    """One part, its arrays typed (float32 or float64)."""
    lo, hi, kind = w[N_LO], w[N_HI], w[N_KIND]
    eps = _int64_as_float64(w[N_EPS])
    if kind == FORWARD:
        layer_norm_forward_into(x[lo:hi], weight, bias, eps, out[lo:hi])
    elif kind == BACKWARD:
        layer_norm_backward_into(g[lo:hi], x[lo:hi], weight, eps, out[lo:hi])
    else:
        d = w[N_D]
        chunks = (w[N_ROWS] + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK
        c0, c1 = lo // ROWS_PER_CHUNK, (hi + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK
        if kind == WEIGHT_GRAD:
            layer_norm_weight_grad_chunks(g[lo:hi], x[lo:hi], eps,
                                          partial.reshape((chunks, d))[c0:c1])
        else:
            layer_norm_grads_chunks(g[lo:hi], x[lo:hi], weight, eps, out[lo:hi],
                                    partial.reshape((chunks, 2, d))[c0:c1])


@cfunc(types.void(types.int32, types.voidptr, types.int32), cache=True)
def _norm_job(index, data, arg):
    w = carray(data, NORM_WORDS, np.int64)
    w[N_THREAD] = _thread_self()
    if w[N_HI] <= w[N_LO]:
        return
    n, d = w[N_ROWS], w[N_D]
    chunks = (n + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK
    sums = chunks * d * (2 if w[N_KIND] == GRADS else 1) if w[N_KIND] >= WEIGHT_GRAD else 0
    partial = carray(f64_at(w[N_PARTIAL]), sums)
    if w[N_DOUBLE]:
        _run(w, carray(f64_at(w[N_X]), (n, d)), carray(f64_at(w[N_G]), (n, d)),
             carray(f64_at(w[N_W]), d), carray(f64_at(w[N_B]), d),
             carray(f64_at(w[N_OUT]), (n, d)), partial)
    else:
        _run(w, carray(f32_at(w[N_X]), (n, d)), carray(f32_at(w[N_G]), (n, d)),
             carray(f32_at(w[N_W]), d), carray(f32_at(w[N_B]), d),
             carray(f32_at(w[N_OUT]), (n, d)), partial)


NORM_JOB = _norm_job.address
