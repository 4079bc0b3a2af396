"""GIL-free hand-off of work to memgrad's helper threads: OpenBLAS's parallel jobs and the
parts of memgrad's ops on one set of threads (NOTE [ One set of threads ] in memgrad/ops/parts.py).

Each helper thread has a slot: an int32 state word in ``states`` and four int64 words in
``jobs`` (a job's function, index, data and argument). A helper waits in ``serve``, compiled
without the GIL: it spins for ``spin`` rounds of the CPU's pause instruction, then sleeps on
a futex (Linux), so that an idle process uses no CPU. ``post`` hands a slot a Python part
(``serve`` then returns ``PART`` to the helper's Python loop) or, in ``blas_callback``, one of
OpenBLAS's jobs, which the helper runs inside ``serve``. A job no helper can take (more jobs
than helpers, or none alive, as in a forked child) runs on a thread of its own, made and
joined for that call: OpenBLAS's jobs of one product wait for each other, so they must all
run at once. memgrad's own jobs take the same path through ``run_jobs``, one compiled call
from Python (the callback through ctypes, and any Python on the way, ran on a cold cache
right after a large product and cost tens of microseconds there).

``PRODUCTS_JOB`` is a job of that kind for memgrad's own use: a batch of matrix products, one
``cblas_?gemm`` call per matrix (or per block of rows of a causal product), described by one
row of ``PRODUCT_WORDS`` int64 words per part; run through ``run_jobs``, its parts reach the
helpers without the GIL. ``ADDMM_JOB`` is another: a linear layer's ``bias + x @ w`` in parts
of the output's rows, each part the bias written into its rows and one ``cblas_?gemm`` that
adds its rows' product (a row of ``ADDMM_WORDS`` words per part), made and run by one
compiled call, ``run_addmm``.

Nothing here imports memgrad. The functions need numba's compiler (they are infrastructure,
not kernels: with ``NUMBA_DISABLE_JIT=1`` memgrad does not use them). An address they call
(a job, ``JOB_THREAD``, OpenBLAS's functions) is an argument, never a module global: a
function compiled with ``cache=True`` keeps a global's value from the process that compiled
it.
"""

import platform
import sys

import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from memgrad._kernels.blas import _extern, _gemm, fill_rows

__all__ = ["NONE", "IDLE", "SLEEP", "CLAIMED", "JOB", "DONE", "PART", "STOP", "SLOTS",
           "supported", "serve", "post", "stop", "blas_callback", "run_jobs", "blas_threads",
           "JOB_THREAD", "FORMS", "PRODUCT_WORDS", "W_THREAD", "PRODUCTS_JOB", "W_A", "W_B",
           "W_C", "addresses", "product_row", "product_parts", "f32_at", "f64_at", "i64_at",
           "ADDMM_WORDS", "A_THREAD", "ADDMM_JOB", "addmm_parts", "run_addmm"]

NONE, IDLE, SLEEP, CLAIMED, JOB, DONE, PART, STOP = range(8)
SLOTS = 64  # helper slots: a slot is not reused, so that a stopped helper still finishing a
# part cannot write into a new helper's state

_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())  # SYS_futex
_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE forms


def supported() -> bool:
    """Whether this platform has what the hand-off needs: Linux's futex on x86-64 or AArch64."""
    return sys.platform == "linux" and _FUTEX is not None


@intrinsic
def _futex(typingctx, addr, op, value):
    """``syscall(SYS_futex, addr, op, value, NULL, NULL, 0)``."""
    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        fn = _extern(builder, "syscall", i64, [i64], var_arg=True)
        zero = ir.Constant(i64, 0)
        builder.call(fn, [ir.Constant(i64, _FUTEX or 0), args[0],
                          context.cast(builder, args[1], sig.args[1], types.int64),
                          context.cast(builder, args[2], sig.args[2], types.int64),
                          zero, zero, zero])
        return context.get_dummy_value()

    return types.void(types.int64, op, value), codegen


@intrinsic
def _thread_start(typingctx, tid_at, fn, arg):
    """``pthread_create(tid_at, NULL, fn, arg)``: 0, or an error number."""
    def codegen(context, builder, sig, args):
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        start = _extern(builder, "pthread_create", i32, [i8p, i8p, i8p, i8p])
        ptrs = [builder.inttoptr(a, i8p) for a in args]
        return builder.call(start, [ptrs[0], ir.Constant(i8p, None), ptrs[1], ptrs[2]])

    return types.int32(types.int64, types.int64, types.int64), codegen


@intrinsic
def _thread_join(typingctx, tid):
    """``pthread_join(tid, NULL)``."""
    def codegen(context, builder, sig, args):
        i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
        join = _extern(builder, "pthread_join", i32, [i64, i8p])
        builder.call(join, [args[0], ir.Constant(i8p, None)])
        return context.get_dummy_value()

    return types.void(types.int64), codegen


def _i32_ptr(builder, addr):
    return builder.inttoptr(addr, ir.IntType(32).as_pointer())


@intrinsic
def _load(typingctx, addr):
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_i32_ptr(builder, args[0]), "acquire", 4)

    return types.int32(types.int64), codegen


@intrinsic
def _store(typingctx, addr, value):
    def codegen(context, builder, sig, args):
        value = builder.trunc(args[1], ir.IntType(32)) if args[1].type.width > 32 else args[1]
        builder.store_atomic(value, _i32_ptr(builder, args[0]), "release", 4)
        return context.get_dummy_value()

    return types.void(types.int64, value), codegen


@intrinsic
def _cas(typingctx, addr, old, new):
    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        old, new = (builder.trunc(a, i32) if a.type.width > 32 else a for a in args[1:])
        pair = builder.cmpxchg(_i32_ptr(builder, args[0]), old, new, "acq_rel", "acquire")
        return builder.extract_value(pair, 1)

    return types.boolean(types.int64, old, new), codegen


@intrinsic
def _load64(typingctx, addr):
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(types.int64), codegen


@intrinsic
def _store64(typingctx, addr, value):
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.store_atomic(args[1], ptr, "release", 8)
        return context.get_dummy_value()

    return types.void(types.int64, types.int64), codegen


@intrinsic
def _pause(typingctx):
    def codegen(context, builder, sig, args):
        if platform.machine() == "x86_64":
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def _run_job(typingctx, fn, index, data, arg):
    def codegen(context, builder, sig, args):
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i8p, i32])
        job = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(job, [builder.trunc(args[1], i32), builder.inttoptr(args[2], i8p),
                           builder.trunc(args[3], i32)])
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _set_threads(typingctx, fn, count):
    """``fn(count)`` for OpenBLAS's ``openblas_set_num_threads_local`` at address ``fn``:
    the calling thread's BLAS thread count before."""
    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(i32, [i32])
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()),
                            [builder.trunc(args[1], i32)])

    return types.int32(types.int64, types.int64), codegen


@njit(nogil=True, cache=True)
def blas_threads(set_local):
    """The calling thread's BLAS thread count, read through ``set_local`` (the address of
    ``openblas_set_num_threads_local``) in one compiled call, where two calls through
    ctypes cost some 11 us on a cold cache."""
    count = _set_threads(set_local, 1)
    _set_threads(set_local, count)
    return count


@njit(nogil=True, cache=True)
def serve(states, jobs, slot, spin):
    """Wait for work in ``slot``: run the OpenBLAS jobs posted to it; return ``PART`` when a
    Python part was posted (the caller runs it, then stores ``IDLE``) or ``STOP``."""
    state = states.ctypes.data + 4 * slot
    job = jobs.ctypes.data + 32 * slot
    rounds = 0
    while True:
        s = _load(state)
        if s == JOB:
            _run_job(_load64(job), _load64(job + 8), _load64(job + 16), _load64(job + 24))
            _store(state, DONE)
            rounds = 0
        elif s == PART or s == STOP:
            return s
        elif s == IDLE and rounds < spin:
            rounds += 1
            _pause()
        elif s == IDLE:
            if _cas(state, IDLE, SLEEP):
                _futex(state, _FUTEX_WAIT, SLEEP)
            rounds = 0
        elif s == SLEEP:  # woken for nothing
            _futex(state, _FUTEX_WAIT, SLEEP)
        else:  # CLAIMED or DONE: a caller is busy with this slot
            _pause()


@njit(nogil=True, cache=True)
def _claim(state, to):
    """Move an idle or sleeping helper's state to ``to`` (waking it), waiting while it runs
    another caller's OpenBLAS job; False when no helper serves the slot or it runs a Python
    part (which may wait for the GIL: OpenBLAS's callers do not wait for it)."""
    while True:
        s = _load(state)
        if s == NONE or s == STOP or (s == PART and to != PART):
            return False
        if (s == IDLE or s == SLEEP) and _cas(state, s, to):
            if s == SLEEP:
                _futex(state, _FUTEX_WAKE, 1)
            return True
        _pause()


@njit(nogil=True, cache=True)
def post(states, slot):
    """Hand ``slot``'s helper a Python part (waiting while it runs another thread's OpenBLAS
    job); False when no helper serves the slot."""
    return _claim(states.ctypes.data + 4 * slot, PART)


@njit(nogil=True, cache=True)
def stop(states, slot):
    """Stop ``slot``'s helper if it is waiting (idle or asleep), once it has run the
    OpenBLAS job it may be running; False when it runs a Python part (it then stops after
    it) or is gone."""
    state = states.ctypes.data + 4 * slot
    while True:
        s = _load(state)
        if s == IDLE or s == SLEEP:
            if _cas(state, s, STOP):
                if s == SLEEP:
                    _futex(state, _FUTEX_WAKE, 1)
                return True
        elif s == CLAIMED or s == JOB or s == DONE:
            _pause()
        else:
            return False


# The words of one part of PRODUCTS_JOB (int64): the cblas_?gemm (ILP64) to call and whether
# it is dgemm, the item size in bytes, the form (FORMS) and causal block, the part's range
# [lo, hi) of the batch flattened from (outer, inner) with ``inner`` inner entries; for a, b
# and c: the address of matrix 0, the byte strides of the two batch dimensions, the BLAS
# transpose flag (111 no, 112 yes) and leading dimension of a row-major matrix (c's flag is
# 111); the rows and columns of a and b; last, the id of the thread that ran the part.
(W_GEMM, W_DOUBLE, W_ITEM, W_FORM, W_BLOCK, W_LO, W_HI, W_INNER,
 W_A, W_A1, W_A2, W_TA, W_LDA, W_B, W_B1, W_B2, W_TB, W_LDB, W_C, W_C1, W_C2, W_LDC,
 W_AROWS, W_ACOLS, W_BROWS, W_BCOLS, W_THREAD) = range(27)
PRODUCT_WORDS = 27
# c = a @ b; the causal forms of NOTE [ Causal products ] in memgrad/ops/nn.py: M * (a @ b^T),
# (M * a) @ b, (M * a)^T @ b, with M the block mask of ``block`` rows
FORMS = {"mm": 0, "abT": 1, "ab": 2, "aTb": 3}
_NO_TRANS = 111


@intrinsic
def _zero(typingctx, addr, nbytes):
    def codegen(context, builder, sig, args):
        cgutils.memset(builder, builder.inttoptr(args[0], ir.IntType(8).as_pointer()),
                       args[1], 0)
        return context.get_dummy_value()

    return types.void(types.int64, types.int64), codegen


def pointer_to(dtype):
    """An intrinsic that turns an int64 address into a pointer to ``dtype`` (for
    ``numba.carray`` over the arrays a job's words point at)."""
    @intrinsic
    def at(typingctx, addr):
        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

        return types.CPointer(dtype)(types.int64), codegen

    return at


# int64 address -> pointer, for the jobs' numba.carray views (here and in the job modules)
f32_at = pointer_to(types.float32)
f64_at = pointer_to(types.float64)
i64_at = pointer_to(types.int64)


@intrinsic
def _thread_self(typingctx):
    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        return builder.call(_extern(builder, "pthread_self", i64, []), [])

    return types.int64(), codegen


@njit(nogil=True, cache=True)
def _flip(t):
    return 223 - t  # 111 <-> 112


@njit(nogil=True, cache=True)
def _matrix_products(w, a, b, c):
    """The products of one matrix of the batch (form ``w[W_FORM]``) at addresses a, b, c."""
    fn, double, item, form, block = w[W_GEMM], w[W_DOUBLE], w[W_ITEM], w[W_FORM], w[W_BLOCK]
    ta, lda, tb, ldb, ldc = w[W_TA], w[W_LDA], w[W_TB], w[W_LDB], w[W_LDC]
    rows, cols, n = w[W_AROWS], w[W_ACOLS], w[W_BCOLS]
    ars, acs = (lda * item, item) if ta == _NO_TRANS else (item, lda * item)  # bytes
    brs = ldb * item if tb == _NO_TRANS else item
    if form == 0:
        _gemm(fn, double, ta, tb, rows, n, cols, a, lda, b, ldb, 0.0, c, ldc)
    elif form == 1:  # M * (a @ b^T): the whole product, then the blocks above the diagonal 0
        s = w[W_BROWS]
        _gemm(fn, double, ta, _flip(tb), rows, s, cols, a, lda, b, ldb, 0.0, c, ldc)
        for r0 in range(0, rows, block):
            c0 = r0 + block
            if c0 >= s:
                break
            for r in range(r0, min(rows, c0)):
                _zero(c + (r * ldc + c0) * item, (s - c0) * item)
    elif form == 2:  # (M * a) @ b: row block r reads the columns of a below (r + 1) * block
        for r0 in range(0, rows, block):
            r1 = min(rows, r0 + block)
            _gemm(fn, double, ta, tb, r1 - r0, n, min(cols, r0 + block), a + r0 * ars, lda,
                  b, ldb, 0.0, c + r0 * ldc * item, ldc)
    else:  # (M * a)^T @ b: column block c of a is read from row c0 on
        for c0 in range(0, cols, block):
            if c0 >= rows:
                for r in range(c0, cols):
                    _zero(c + r * ldc * item, n * item)
                break
            c1 = min(cols, c0 + block)
            _gemm(fn, double, _flip(ta), tb, c1 - c0, n, rows - c0, a + c0 * (ars + acs), lda,
                  b + c0 * brs, ldb, 0.0, c + c0 * ldc * item, ldc)


@cfunc(types.void(types.int32, types.voidptr, types.int32), cache=True)
def _products_job(index, data, arg):
    w = carray(data, PRODUCT_WORDS, np.int64)
    w[W_THREAD] = _thread_self()
    inner = w[W_INNER]
    for i in range(w[W_LO], w[W_HI]):
        i1 = i // inner
        i2 = i - i1 * inner
        _matrix_products(w, w[W_A] + i1 * w[W_A1] + i2 * w[W_A2],
                         w[W_B] + i1 * w[W_B1] + i2 * w[W_B2],
                         w[W_C] + i1 * w[W_C1] + i2 * w[W_C2])


PRODUCTS_JOB = _products_job.address


@njit(nogil=True, cache=True)
def addresses(a, b, c):
    """The addresses of three arrays' first elements: ``x.ctypes.data`` of each, at a sixth
    of its cost from Python (which makes a ctypes object per array)."""
    return a.ctypes.data, b.ctypes.data, c.ctypes.data


def product_row(gemm, double, item, form, block, inner, a, b, c, dims):
    """The words of ``PRODUCTS_JOB`` (a list, the part's range still empty) for a batch of
    products by ``gemm`` (an address; dgemm when ``double``) of ``item``-byte numbers, in
    form ``form`` (a key of ``FORMS``), with ``inner`` entries in the inner of two batch
    dimensions: ``a`` and ``b`` are (address, batch stride 1, batch stride 2, transpose
    flag, leading dimension), ``c`` the same without the flag (c is not transposed),
    ``dims`` the rows and columns of a and of b."""
    row = [gemm, double, item, FORMS[form], block, 0, 0, inner]
    row += a
    row += b
    row += c
    row += dims
    row.append(0)
    return row


def product_parts(row, parts, batch):
    """The rows of ``PRODUCTS_JOB`` for ``parts`` parts of a batch of ``batch`` matrices,
    from ``product_row``'s words."""
    rows = []
    for j in range(parts):
        r = row.copy()
        r[W_LO], r[W_HI] = batch * j // parts, batch * (j + 1) // parts
        rows.append(r)
    return np.array(rows, np.int64)


# The words of one part of ADDMM_JOB (int64): the cblas_?gemm (ILP64) to call and whether it
# is dgemm; the BLAS transpose flag and leading dimension of x and of w (row-major operands);
# the part's rows [lo, hi) of the output, the output's columns and the inner dimension; the
# addresses of x, w, the bias and the output (C-contiguous); last, the id of the thread
# that ran the part.
(A_GEMM, A_DOUBLE, A_TA, A_LDA, A_TB, A_LDB, A_LO, A_HI, A_N, A_K, A_X, A_W, A_V, A_OUT,
 A_THREAD) = range(15)
ADDMM_WORDS = 15


@cfunc(types.void(types.int32, types.voidptr, types.int32), cache=True)
def _addmm_job(index, data, arg):
    w = carray(data, ADDMM_WORDS, np.int64)
    w[A_THREAD] = _thread_self()
    lo, hi, n, ta, lda = w[A_LO], w[A_HI], w[A_N], w[A_TA], w[A_LDA]
    if hi <= lo:
        return
    double = w[A_DOUBLE]
    item = 8 if double else 4
    out = w[A_OUT] + lo * n * item
    if double:
        fill_rows(carray(f64_at(w[A_V]), n), carray(f64_at(out), (hi - lo, n)))
    else:
        fill_rows(carray(f32_at(w[A_V]), n), carray(f32_at(out), (hi - lo, n)))
    x = w[A_X] + lo * (lda if ta == _NO_TRANS else 1) * item  # row lo of x
    _gemm(w[A_GEMM], double, ta, w[A_TB], hi - lo, n, w[A_K], x, lda, w[A_W], w[A_LDB], 1.0,
          out, n)


ADDMM_JOB = _addmm_job.address


@njit(nogil=True, cache=True)
def addmm_parts(x, wt, v, out, gemm, ta, lda, tb, ldb, ends):
    """The rows of ``ADDMM_JOB``'s words for ``out = v + x @ wt`` (x (M, K), wt (K, N), v
    (N,), out (M, N) C-contiguous, of one float dtype; their shapes checked first:
    ValueError), one part per pair of consecutive row bounds in ``ends``; ``gemm`` is the
    ILP64 ``cblas_?gemm`` of their dtype, ``ta``, ``lda``, ``tb``, ``ldb`` the BLAS transpose
    flags and leading dimensions of x and wt (the caller checks that BLAS can take them)."""
    m, k = x.shape
    n = wt.shape[1]
    if wt.shape[0] != k or v.shape[0] != n or out.shape[0] != m or out.shape[1] != n:
        raise ValueError("addmm_parts: expected x (M, K), wt (K, N), v (N,) and out (M, N)")
    words = np.zeros((ends.shape[0] - 1, ADDMM_WORDS), np.int64)
    for j in range(ends.shape[0] - 1):
        if not 0 <= ends[j] <= ends[j + 1] <= m:
            raise ValueError("addmm_parts: the row bounds must rise within the output's rows")
        words[j, A_GEMM], words[j, A_DOUBLE] = gemm, out.itemsize == 8
        words[j, A_TA], words[j, A_LDA], words[j, A_TB], words[j, A_LDB] = ta, lda, tb, ldb
        words[j, A_LO], words[j, A_HI], words[j, A_N], words[j, A_K] = ends[j], ends[j + 1], n, k
        words[j, A_X], words[j, A_W] = x.ctypes.data, wt.ctypes.data
        words[j, A_V], words[j, A_OUT] = v.ctypes.data, out.ctypes.data
    return words


@cfunc(types.voidptr(types.voidptr), cache=True)
def _job_thread(arg):
    words = carray(arg, 4, np.int64)
    _run_job(words[0], words[1], words[2], words[3])
    return arg


JOB_THREAD = _job_thread.address


@njit(nogil=True, cache=True)
def _hand_out(states_at, jobs_at, helpers_at, job_thread, dojob, numjobs, size, data, arg):
    """OpenBLAS's threads callback's work over the slots listed at ``helpers_at`` (int64, the
    first entry their count): job ``dojob``'s part 0 on the calling thread, the others on the
    helpers, on threads made for the call (starting at ``job_thread``, ``JOB_THREAD``) when no
    helper takes them; part j reads the data at ``data + j * size``. (An address is an
    argument, never a global: a cached function keeps a global's value from the process that
    compiled it.)"""
    if numjobs <= 1:
        if numjobs == 1:
            _run_job(dojob, 0, data, arg)
        return
    count = _load64(helpers_at)
    taken = np.full(numjobs, -1, np.int64)  # the helper slot of each job, or -1
    spare = np.zeros((numjobs, 5), np.int64)  # job words and thread id, for job threads
    for j in range(1, numjobs):
        if j <= count:
            slot = _load64(helpers_at + 8 * j)
            state = states_at + 4 * slot
            if _claim(state, CLAIMED):
                job = jobs_at + 32 * slot
                _store64(job, dojob)
                _store64(job + 8, j)
                _store64(job + 16, data + j * size)
                _store64(job + 24, arg)
                _store(state, JOB)
                taken[j] = slot
                continue
        spare[j, 0], spare[j, 1] = dojob, j
        spare[j, 2], spare[j, 3] = data + j * size, arg
        words = spare.ctypes.data + 40 * j
        if _thread_start(words + 32, job_thread, words) != 0:
            spare[j, 4] = -1  # no thread could be made: run it here, last
    _run_job(dojob, 0, data, arg)
    for j in range(1, numjobs):
        if taken[j] < 0 and spare[j, 4] == -1:
            _run_job(dojob, j, data + j * size, arg)
    for j in range(1, numjobs):
        if taken[j] >= 0:
            state = states_at + 4 * taken[j]
            while _load(state) != DONE:
                _pause()
            _store(state, IDLE)
        elif spare[j, 4] != -1:
            _thread_join(spare[j, 4])


def blas_callback(states: np.ndarray, jobs: np.ndarray, helpers: np.ndarray):
    """OpenBLAS's threads callback (``openblas_set_threads_callback_function``) over the
    slots listed in ``helpers`` (int64, the first entry their count): job 0 on the calling
    thread, the others on the helpers, on threads made for the call when no helper takes
    them. The arrays must outlive the callback."""
    states_at, jobs_at, helpers_at = (a.ctypes.data for a in (states, jobs, helpers))

    @cfunc(types.void(types.int32, types.int64, types.int32, types.uint64, types.int64,
                      types.int32))
    def callback(sync, dojob, numjobs, size, data, arg):
        _hand_out(states_at, jobs_at, helpers_at, JOB_THREAD, dojob, np.int64(numjobs),
                  np.int64(size), data, np.int64(arg))

    return callback


@njit(nogil=True, cache=True)
def run_jobs(states, jobs, helpers, job_thread, set_local, job, words):
    """Job ``job`` (a compiled job's address) in one part per row of ``words`` (int64,
    C-contiguous), as OpenBLAS's threads callback over ``states``, ``jobs`` and ``helpers``
    runs its jobs (``job_thread`` is ``JOB_THREAD``): part 0 on the calling thread, the
    others on the helpers, each reading its row, the calling thread's BLAS at one thread
    meanwhile (``set_local``: the address of ``openblas_set_num_threads_local``). The
    caller's compiled entry to the hand-off: one call, the GIL released, where the callback
    through ctypes cost some 30 us on a cold cache."""
    count = _set_threads(set_local, 1)
    _hand_out(states.ctypes.data, jobs.ctypes.data, helpers.ctypes.data, job_thread, job,
              words.shape[0], words.strides[0], words.ctypes.data, 0)
    _set_threads(set_local, count)


@njit(nogil=True, cache=True)
def run_addmm(states, jobs, helpers, job_thread, set_local, job, x, wt, v, out, gemm, ta, lda,
              tb, ldb, parts):
    """``out = v + x @ wt`` as ``job`` (``ADDMM_JOB``'s address) through ``run_jobs`` (its
    first five arguments are that function's) in ``parts`` parts of the output's rows, the
    words those of ``addmm_parts`` (its checks, its arguments): one compiled call, the GIL
    released. Returns the words, each part's thread id written in."""
    m = x.shape[0]
    ends = np.empty(parts + 1, np.int64)
    for j in range(parts + 1):
        ends[j] = m * j // parts
    words = addmm_parts(x, wt, v, out, gemm, ta, lda, tb, ldb, ends)
    run_jobs(states, jobs, helpers, job_thread, set_local, job, words)
    return words
