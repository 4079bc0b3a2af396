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
checks the arrays' layout once and keeps the phases' rows as offsets from the arrays' starts
(NOTE [ Attention's job rows by layout ] in memgrad/ops/nn.py), and ``part_words`` makes
each call's rows, the parts' scratch included, from those and the arrays, in one compiled
call.

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
           "A_THREAD", "FORWARD", "BACKWARD", "PHASES", "QKV", "OUT", "G", "SCRATCH",
           "part_words"]

FORWARD, BACKWARD = 0, 1
PHASES = (2, 5)  # the product phases of the forward and of the backward

# a part's words, in this order
(A_KIND, A_DOUBLE, A_LO, A_HI, A_HEADS, A_T, A_SCALE, A_CAUSAL, A_S, A_P, A_DW, A_DS,
 A_PHASES, A_THREAD) = range(14)
ATTENTION_WORDS = 14

# the arrays an operand of a phase lies in (``part_words``'s ``bases_of``): the stacked
# queries, keys and values, the op's output, the output gradient, the part's own scratch
QKV, OUT, G, SCRATCH = range(4)


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


@njit(nogil=True, cache=True)
def part_words(template, bases_of, qkv, out, g, ends, forward, heads, scale_bits, causal):
    """The rows of ``ATTENTION_WORDS`` words of the parts ``[ends[j], ends[j + 1])`` of the
    (sample, head) pairs, with what they point to: ``(words, phases, scratch)``, the last two
    to be kept alive until the job has run. ``template`` holds the phases' rows of product
    words with each operand's address (words ``W_A``, ``W_B``, ``W_C``) as an offset from
    the start of the array it lies in, ``bases_of`` (one row a phase) which array that is:
    ``QKV``, ``OUT``, ``G`` or ``SCRATCH``, part j's four (T, T) matrices in
    ``scratch[j]``. ``qkv`` (N, T, 3E), ``out`` and ``g`` are the op's arrays (``g`` any
    array in the forward); ``scale_bits`` is the softmax's scale as the bits of a float64.
    Nothing here checks a layout: the template was made from arrays of the same shapes,
    strides and dtype, whose words ``product_words`` checked.

    Example:
        >>> words, phases, scratch = part_words(np.zeros((2, PRODUCT_WORDS), np.int64),
        ...     np.full((2, 3), QKV), np.zeros((1, 3, 12)), np.zeros((1, 3, 4)),
        ...     np.zeros((1, 3, 4)), np.array([0, 1, 2]), True, 2, 0, True)
        >>> words.shape, phases.shape, scratch.shape
        ((2, 14), (2, 2, 27), (2, 4, 3, 3))
    """
    k = ends.shape[0] - 1
    t = qkv.shape[1]
    p, nw = template.shape
    scratch = np.empty((k, 4, t, t), qkv.dtype)
    phases = np.empty((k, p, nw), np.int64)
    words = np.zeros((k, ATTENTION_WORDS), np.int64)
    base = np.empty(4, np.int64)
    base[QKV], base[OUT], base[G] = qkv.ctypes.data, out.ctypes.data, g.ctypes.data
    matrix = t * t * qkv.itemsize
    for j in range(k):
        own = scratch.ctypes.data + j * 4 * matrix
        base[SCRATCH] = own
        for i in range(p):
            for w in range(nw):
                phases[j, i, w] = template[i, w]
            phases[j, i, W_A] += base[bases_of[i, 0]]
            phases[j, i, W_B] += base[bases_of[i, 1]]
            phases[j, i, W_C] += base[bases_of[i, 2]]
        row = words[j]
        row[A_KIND] = FORWARD if forward else BACKWARD
        row[A_DOUBLE] = qkv.itemsize == 8
        row[A_LO], row[A_HI] = ends[j], ends[j + 1]
        row[A_HEADS], row[A_T] = heads, t
        row[A_SCALE] = scale_bits
        row[A_CAUSAL] = causal
        row[A_S], row[A_P] = own, own + matrix
        row[A_DW], row[A_DS] = own + 2 * matrix, own + 3 * matrix
        row[A_PHASES] = phases.ctypes.data + j * p * nw * 8
    return words, phases, scratch


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
