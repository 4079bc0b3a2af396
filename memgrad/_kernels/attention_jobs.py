"""Self-attention's forward and backward as one job of the hand-off per part (NOTE [ Fused
self-attention as jobs ] in memgrad/ops/nn.py): ``ATTENTION_JOB`` runs the (sample, head)
pairs of one part, described by a row of ``ATTENTION_WORDS`` int64 words, without the GIL,
on the calling thread and on the helpers at once (through ``handoff.run_jobs``, as
``handoff.PRODUCTS_JOB``).

For each pair of its part, the forward (``A_KIND`` 0) computes the scores ``q k^T`` into the
part's (T, T) scratch ``s``, their scaled softmax into the scratch ``p``
(``softmax.scaled_softmax_forward_into``, the causal mask inside), and the output ``p v``. The
backward (``A_KIND`` 1) recomputes ``s`` and ``p`` the same way, then takes the value
gradient ``p^T g``, ``dw = g v^T`` into the scratch ``dw``, its softmax backward into the
scratch ``ds`` (``softmax.scaled_softmax_backward_into``), and the query and key gradients
``ds k`` and ``ds^T q``. Each product is one phase: a row of ``handoff.PRODUCT_WORDS`` words
(the form of NOTE [ Causal products ] in memgrad/ops/nn.py, the operands' addresses, batch
strides, transpose flags and leading dimensions), run by ``handoff``'s own
``_matrix_products`` for the pair, so that every product is the BLAS call the op's products
as jobs make, and every softmax row the kernel's: a part computes what those ops compute,
bit for bit. A scratch operand has batch strides 0 (one matrix, reused by every pair).

A row's words: the kind, whether the arrays are float64 (else float32), the part's pairs
``[lo, hi)`` (pair ``n * heads + h``), the heads, the length T, the softmax's scale as the
bits of a float64, whether the mask is causal, the addresses of the part's scratch ``s``,
``p``, ``dw`` and ``ds`` (T, T) each, the address of the phases' rows ((2, PRODUCT_WORDS)
forward: scores, output; (5, PRODUCT_WORDS) backward: scores, value, ``dw``, query and key
gradients); last, the id of the thread that ran the part. The job checks nothing: its caller
checks the arrays and makes the phases' rows from them.

Nothing here imports memgrad. The job needs numba's compiler (with ``NUMBA_DISABLE_JIT=1``
memgrad runs the op's separate products and softmax kernels).
"""

import numpy as np
from numba import carray, cfunc, njit, types

from memgrad._kernels.handoff import (
    PRODUCT_WORDS,
    W_A,
    W_A1,
    W_A2,
    W_B,
    W_B1,
    W_B2,
    W_C,
    W_C1,
    W_C2,
    _matrix_products,
    _thread_self,
    f32_at,
    f64_at,
    i64_at,
)
from memgrad._kernels.softmax import (
    _int64_as_float64,
    scaled_softmax_backward_into,
    scaled_softmax_forward_into,
)

__all__ = ["ATTENTION_WORDS", "ATTENTION_JOB", "A_KIND", "A_DOUBLE", "A_LO", "A_HI",
           "A_HEADS", "A_T", "A_SCALE", "A_CAUSAL", "A_S", "A_P", "A_DW", "A_DS", "A_PHASES",
           "A_THREAD", "FORWARD", "BACKWARD", "PHASES"]

FORWARD, BACKWARD = 0, 1
PHASES = (2, 5)  # the product phases of the forward and of the backward

# a part's words, in this order
(A_KIND, A_DOUBLE, A_LO, A_HI, A_HEADS, A_T, A_SCALE, A_CAUSAL, A_S, A_P, A_DW, A_DS,
 A_PHASES, A_THREAD) = range(14)
ATTENTION_WORDS = 14


@njit(nogil=True, cache=True)
def _phase(r, n, h):
    """Phase ``r`` (a row of product words) for the pair (``n``, ``h``)."""
    _matrix_products(r, r[W_A] + n * r[W_A1] + h * r[W_A2], r[W_B] + n * r[W_B1] + h * r[W_B2],
                     r[W_C] + n * r[W_C1] + h * r[W_C2])


@njit(nogil=True, cache=True)
def _run(w, phases, s, p, dw, ds):
    """One part's pairs, its scratch typed (float32 or float64)."""
    heads = w[A_HEADS]
    scale = _int64_as_float64(w[A_SCALE])
    causal = s.shape[0] if w[A_CAUSAL] else 0  # the softmax masks within each (T, T) matrix
    forward = w[A_KIND] == FORWARD
    for i in range(w[A_LO], w[A_HI]):
        n = i // heads
        h = i - n * heads
        _phase(phases[0], n, h)  # s = q k^T (causal: the blocks above the diagonal 0)
        scaled_softmax_forward_into(s, scale, causal, p)
        _phase(phases[1], n, h)  # forward: out = p v; backward: dv = p^T g
        if forward:
            continue
        _phase(phases[2], n, h)  # dw = g v^T
        scaled_softmax_backward_into(dw, p, scale, ds)
        _phase(phases[3], n, h)  # dq = ds k
        _phase(phases[4], n, h)  # dk = ds^T q


@cfunc(types.void(types.int32, types.voidptr, types.int32), cache=True)
def _attention_job(index, data, arg):
    w = carray(data, ATTENTION_WORDS, np.int64)
    w[A_THREAD] = _thread_self()
    if w[A_HI] <= w[A_LO]:
        return
    t = w[A_T]
    shape = (t, t)
    phases = carray(i64_at(w[A_PHASES]), (PHASES[w[A_KIND]], PRODUCT_WORDS))
    if w[A_DOUBLE]:
        _run(w, phases, carray(f64_at(w[A_S]), shape), carray(f64_at(w[A_P]), shape),
             carray(f64_at(w[A_DW]), shape), carray(f64_at(w[A_DS]), shape))
    else:
        _run(w, phases, carray(f32_at(w[A_S]), shape), carray(f32_at(w[A_P]), shape),
             carray(f32_at(w[A_DW]), shape), carray(f32_at(w[A_DS]), shape))


ATTENTION_JOB = _attention_job.address
