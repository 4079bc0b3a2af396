"""The element-wise and row kernels of an op in parts as jobs of the hand-off (NOTE [ Kernels
as jobs ] in memgrad/ops/parts.py): one compiled job, ``KERNEL_JOB``, runs the part of one
kernel call that a row of ``JOB_WORDS`` int64 words describes, without the GIL, on the
calling thread and on the helpers at once (through ``handoff.run_jobs``, as
``handoff.PRODUCTS_JOB``).

A row's words: the kernel (an index into ``KERNELS``), whether the arrays are float64 (else
float32), the part's rows ``[lo, hi)``, the elements in a row (1 for an element-wise
kernel, whose rows are its elements), the addresses of the two inputs and the output (each
C-contiguous, its row 0 at that address; a kernel of one input reads only the first), the
scale of the attention softmax and squared error kernels and SGD's learning rate (a float64,
its bits), the causal block of the attention softmax forward (0 for none) and, last, the id
of the thread that ran the part. The job checks nothing: its caller checks the arrays before
it writes their addresses. Each part is one call of the kernel on its rows, so a result does
not depend on the split where the kernel's rows (or elements) are independent, as they are
for every kernel here.

Nothing here imports memgrad. The job needs numba's compiler (with ``NUMBA_DISABLE_JIT=1``
memgrad runs the kernels as Python parts).
"""

import numpy as np
from numba import carray, cfunc, njit, types

from memgrad._kernels.activation import (
    exp_into,
    gelu_backward_into,
    gelu_into,
    gelu_tanh_backward_into,
    gelu_tanh_into,
    relu_backward_into,
    relu_into,
)
from memgrad._kernels.handoff import _thread_self, f32_at, f64_at, run_jobs
from memgrad._kernels.loss import squared_error_grad_into
from memgrad._kernels.optim import sgd_step_into
from memgrad._kernels.softmax import (
    log_softmax_backward_into,
    log_softmax_forward_into,
    scaled_softmax_backward_into,
    scaled_softmax_forward_into,
    softmax_backward_into,
    softmax_forward_into,
)

__all__ = ["KERNELS", "JOB_WORDS", "W_KERNEL", "W_DOUBLE", "W_LO", "W_HI", "W_COLS", "W_A",
           "W_B", "W_C", "W_SCALE", "W_CAUSAL", "W_THREAD", "KERNEL_JOB", "KERNEL_INDEX",
           "kernel_words", "run_kernel"]

# the kernels a job runs, by index
KERNELS = (relu_into, gelu_into, gelu_tanh_into, exp_into, softmax_forward_into,
           log_softmax_forward_into, relu_backward_into, gelu_backward_into,
           gelu_tanh_backward_into, squared_error_grad_into, scaled_softmax_forward_into,
           scaled_softmax_backward_into, softmax_backward_into, log_softmax_backward_into,
           sgd_step_into)
(_RELU, _GELU, _GELU_TANH, _EXP, _ROW_SOFTMAX, _ROW_LOG_SOFTMAX, _RELU_BACKWARD,
 _GELU_BACKWARD, _GELU_TANH_BACKWARD, _SQUARED_ERROR_GRAD, _SOFTMAX, _SOFTMAX_BACKWARD,
 _ROW_SOFTMAX_BACKWARD, _ROW_LOG_SOFTMAX_BACKWARD, _SGD_STEP) = range(len(KERNELS))
KERNEL_INDEX = {kernel: i for i, kernel in enumerate(KERNELS)}

# a part's words, in this order (kernel_words writes its rows so)
(W_KERNEL, W_DOUBLE, W_LO, W_HI, W_COLS, W_A, W_B, W_C, W_SCALE, W_CAUSAL,
 W_THREAD) = range(11)
JOB_WORDS = 11




@njit(nogil=True, cache=True)
def _run(kernel, rows, cols, a, b, c, scale, causal):
    """Kernel ``kernel`` on flat arrays a, b (inputs) and c (output) of ``rows`` rows of
    ``cols`` elements."""
    if (kernel == _SOFTMAX or kernel == _SOFTMAX_BACKWARD or kernel == _ROW_SOFTMAX
            or kernel == _ROW_LOG_SOFTMAX or kernel == _ROW_SOFTMAX_BACKWARD
            or kernel == _ROW_LOG_SOFTMAX_BACKWARD):
        _run_rows(kernel, a.reshape((rows, cols)), b.reshape((rows, cols)),
                  c.reshape((rows, cols)), scale, causal)
    else:
        _run_elementwise(kernel, a, b, c, scale)


@njit(nogil=True, cache=True)
def _run_elementwise(kernel, a, b, c, scale):
    if kernel == _RELU:
        relu_into(a, c)
    elif kernel == _GELU:
        gelu_into(a, c)
    elif kernel == _GELU_TANH:
        gelu_tanh_into(a, c)
    elif kernel == _EXP:
        exp_into(a, c)
    elif kernel == _RELU_BACKWARD:
        relu_backward_into(a, b, c)
    elif kernel == _GELU_BACKWARD:
        gelu_backward_into(a, b, c)
    elif kernel == _GELU_TANH_BACKWARD:
        gelu_tanh_backward_into(a, b, c)
    elif kernel == _SQUARED_ERROR_GRAD:
        squared_error_grad_into(a, b, scale, c)
    elif kernel == _SGD_STEP:
        sgd_step_into(a, scale, c)


@njit(nogil=True, cache=True)
def _run_rows(kernel, a, b, c, scale, causal):
    if kernel == _SOFTMAX:
        scaled_softmax_forward_into(a, scale, causal, c)
    elif kernel == _SOFTMAX_BACKWARD:
        scaled_softmax_backward_into(a, b, scale, c)
    elif kernel == _ROW_SOFTMAX:
        softmax_forward_into(a, c)
    elif kernel == _ROW_LOG_SOFTMAX:
        log_softmax_forward_into(a, c)
    elif kernel == _ROW_SOFTMAX_BACKWARD:
        softmax_backward_into(a, b, c)
    elif kernel == _ROW_LOG_SOFTMAX_BACKWARD:
        log_softmax_backward_into(a, b, c)


@cfunc(types.void(types.int32, types.voidptr, types.int32), cache=True)
def _kernel_job(index, data, arg):
    w = carray(data, JOB_WORDS, np.int64)
    w[W_THREAD] = _thread_self()
    scale = carray(data, JOB_WORDS, np.float64)[W_SCALE]
    lo, hi, cols = w[W_LO], w[W_HI], w[W_COLS]
    n = (hi - lo) * cols
    if n <= 0:
        return
    # an element-wise kernel in place gets one array as input and output: LLVM then knows
    # they are the same and vectorizes the loop, where two views of one address fail the
    # check that they do not overlap and run element by element
    in_place = w[W_C] == w[W_A]
    if w[W_DOUBLE]:
        skip = lo * cols * 8
        a = carray(f64_at(w[W_A] + skip), n)
        c = a if in_place else carray(f64_at(w[W_C] + skip), n)
        _run(w[W_KERNEL], hi - lo, cols, a, carray(f64_at(w[W_B] + skip), n), c, scale,
             w[W_CAUSAL])
    else:
        skip = lo * cols * 4
        a = carray(f32_at(w[W_A] + skip), n)
        c = a if in_place else carray(f32_at(w[W_C] + skip), n)
        _run(w[W_KERNEL], hi - lo, cols, a, carray(f32_at(w[W_B] + skip), n), c, scale,
             w[W_CAUSAL])


KERNEL_JOB = _kernel_job.address


@njit(nogil=True, cache=True)
def kernel_words(kernel, a, b, out, scale, causal, blocks, rows_per_block, parts):
    """The rows of ``KERNEL_JOB``'s words for kernel index ``kernel`` with inputs ``a`` and
    ``b`` (``a`` twice for a kernel of one input) and output ``out``, arrays of one float
    dtype, over ``blocks`` blocks of ``rows_per_block`` rows (the elements of 1-D arrays, the
    rows of 2-D ones) in ``parts`` parts of whole blocks; no rows where the arrays do not
    fit: C-contiguous, of the blocks' size, the output apart from each input or that input
    itself (an element-wise kernel in place), checked here: the job reads and writes where
    the words point."""
    cols = out.shape[1] if out.ndim == 2 else 1
    size = blocks * rows_per_block * cols
    words = np.zeros((parts, JOB_WORDS), np.int64)
    if a.size != size or b.size != size or out.size != size \
            or a.itemsize != out.itemsize or b.itemsize != out.itemsize or not (
                a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous):
        return words[:0]
    at = out.ctypes.data
    end = at + size * out.itemsize
    for start in (a.ctypes.data, b.ctypes.data):
        if start != at and start < end and at < start + size * out.itemsize:
            return words[:0]  # overlapping, not the same
    bits = np.array([scale], np.float64).view(np.int64)[0]
    for j in range(parts):
        words[j, W_KERNEL], words[j, W_DOUBLE] = kernel, out.itemsize == 8
        words[j, W_LO] = blocks * j // parts * rows_per_block
        words[j, W_HI] = blocks * (j + 1) // parts * rows_per_block
        words[j, W_COLS] = cols
        words[j, W_A], words[j, W_B], words[j, W_C] = a.ctypes.data, b.ctypes.data, at
        words[j, W_SCALE], words[j, W_CAUSAL] = bits, causal
    return words


@njit(nogil=True, cache=True)
def run_kernel(states, jobs, helpers, job_thread, set_local, job, kernel, a, b, out, scale,
               causal, blocks, rows_per_block, parts):
    """Kernel index ``kernel`` as ``job`` (``KERNEL_JOB``'s address) through
    ``handoff.run_jobs`` (its first five arguments are that function's), in the parts of
    ``kernel_words``: one compiled call, the GIL released. Returns the words, each part's
    thread id written in; no rows, with nothing run, where the arrays do not fit."""
    words = kernel_words(kernel, a, b, out, scale, causal, blocks, rows_per_block, parts)
    if words.shape[0] > 0:
        run_jobs(states, jobs, helpers, job_thread, set_local, job, words)
    return words
