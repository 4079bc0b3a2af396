"""Running an op in parts of its batch or of its rows, one part per BLAS thread.

NOTE [ Batch parts ]
NumPy's OpenBLAS parallelises inside each GEMM. For a batch of small products (one
convolution's per-sample GEMMs, attention's per-head matrices) that is a thread hand-off and
a barrier per product, and the serial work between the products (im2col, col2im) leaves the
other cores idle. ``in_parts`` instead splits the batch into k contiguous parts, k the BLAS
thread count, and runs each on its own thread with single-threaded BLAS (the calling thread
takes the first part, ``k - 1`` helper threads the others; OpenBLAS's
``openblas_set_num_threads_local``, 0.3.27 or later, sets the count; in scipy-openblas
0.3.31 the count it sets is the process's, not the thread's, so the calling thread sets one
before it hands out the parts and restores it after the join): one join per op. Each part
writes its own slice of the result, or returns a partial sum that the caller adds up in
part order, so results do not depend on timing. One op runs in parts at a time (another
thread's waits), and an op inside a part runs whole. With one BLAS thread, or
a BLAS without the per-thread count, or an op under ``PARTS_MIN_MACS`` multiply-adds (the
hand-off costs tens of microseconds), everything runs on the calling thread. A forked child
makes its own helper threads.

Example:
    >>> in_parts(4, 0, lambda lo, hi: (lo, hi))  # too small to split: one part
    [(0, 4)]

NOTE [ Products in parts of their rows ]
A large product with one matrix operand (linear's forward through ``Gemm``, its gradients
through ``matmul``) runs whole on OpenBLAS's own split when OpenBLAS's threads are the
helpers (NOTE [ One set of threads ]), and in parts of its rows otherwise.

Without the hand-off, OpenBLAS left to its own threads wakes them for each product, and
after it they spin, waiting for the next one (``OPENBLAS_THREAD_TIMEOUT``, by default some
2**28 cycles): on two cores they took a core from the kernels' parts and from the NumPy
work between the products, and in a W2 step (the transformer of benchmarks/workloads.py)
OpenBLAS's threads burnt about as many CPU seconds as memgrad's own (3.7 CPU seconds per
step against 1.5 in parts, on a loaded machine). So there ``rows_in_parts`` splits the
output's rows into one contiguous part per BLAS thread, each a single-threaded BLAS call on
that part's rows of the left operand, and the large products and the kernels of an op in
parts (NOTE [ Row parts ] in ops/nn.py) run on the same helper threads of ``in_parts``.
The inner dimension is not split and the parts start at multiples of ``ROW_ALIGN`` rows,
so each element is computed as single-threaded BLAS computes it in the whole product: the
values do not depend on the split.

With the hand-off, OpenBLAS's jobs already reach the helpers without the GIL, and the parts
only cost what OpenBLAS's split does not: a Python part on the helper (which takes the GIL)
and the right operand packed once per part. W1's step (products of 256x1024x1024) took
0.86-0.91x the time whole, W2's and W3's 0.97-1.02x (Intel model 207, alternated steps).
OpenBLAS's split does not divide the inner dimension either; OpenBLAS 0.3.31's SkylakeX
kernels gave the bits of one thread on two for the shapes of W1, W2 and the small models
(another build may differ in the last bits between one and two threads).

Below ``PRODUCT_PARTS_MIN_MACS`` multiply-adds a product runs whole in either case: a part
is handed to a sleeping thread, and waking it costs tens of microseconds (on a virtual
machine whose host is busy, up to milliseconds), more than such a product gains from the
second core: a 1024x64x256 product took 0.31-0.56 ms in parts against 0.25 ms on
OpenBLAS's two threads (0.45 ms on one), and a small transformer's training step, all of
whose products are that small, 10-15% longer; the spinning after them costs the short
steps of small models little. Without the per-thread count, every product runs whole on
BLAS's own threads.

NOTE [ One set of threads ]
OpenBLAS's own threads and the helpers of ``in_parts`` are two sets of threads on the same
cores. After each product OpenBLAS's workers spin, on the core, for up to 2^28 cycles, and
a kernel in parts that follows shares a core with them: on a 2-core machine a training step
of a small transformer ran no faster with two BLAS threads than with one (the GELU kernels
and the attention softmax in parts 20-25% slower, the products 10-20% faster). Where the
platform allows it (Linux on x86-64 or AArch64, numba's compiler on, an OpenBLAS that
exports ``openblas_set_threads_callback_function``), the helpers are also OpenBLAS's
threads: they wait in a loop compiled without the GIL (memgrad/_kernels/handoff.py), OpenBLAS
hands them its parallel jobs through that callback (job 0 runs on the calling thread, as
on OpenBLAS's own threads, so a product is split and computed exactly as before), and a part
of an op reaches them through the same slot. A helper spins for ``SPIN_ROUNDS`` pauses, then
sleeps on a futex, so an idle process uses no CPU. The helpers are made by the first op
that runs in parts, as many as BLAS has threads less one (until then, and in a process
whose ops are all too small to split, OpenBLAS keeps its own threads: setting up the
callback compiles it, some 0.5 s, which a short process should not pay); a job
no helper can take (more jobs than helpers, or while helpers are replaced) runs on a
thread made for that call, since the jobs of one product wait for each
other; a forked child gives OpenBLAS its own threads back until it makes its helpers.
``MEMGRAD_BLAS_HANDOFF=0`` in the environment keeps the two sets apart.

NOTE [ Products as jobs ]
A part of ``in_parts`` is Python: a helper takes the GIL to run it, and gives it back at
each NumPy call. For a batch of small products (attention's per-head matrices, 64 products
of 64x64x16 in the ``train`` model) the turns of the GIL between the two threads cost more
than the second core saves: a causal product of 84 us ran in 81 us in two parts, the
helper's part starting 23 us after the call. ``products_in_parts`` runs such a batch as one
of OpenBLAS's kind of jobs instead (``PRODUCTS_JOB`` in memgrad/_kernels/handoff.py, through
``handoff.run_jobs``, the threads callback's work in one compiled call): each part is a row
of words (addresses, strides, leading dimensions, the form of NOTE [ Causal products ] in
ops/nn.py), checked and written here from the arrays, and the job calls ``cblas_?gemm`` once
per matrix (per row block of a causal form) with those words, without the GIL, on the
calling thread and on the helpers at once. The same product ran in 43 us (35 us for either
half alone). Each matrix is one call with the arguments NumPy's matmul passes, so the values
do not depend on the split. It needs the hand-off (else, or for operands BLAS cannot take as
they lie, the caller runs its NumPy path) and takes the parts' lock and one BLAS thread per
part, as ``in_parts``. The words of a layout (the operands' shapes, strides and dtype, the
form: all but the addresses) are checked and made once and kept, and the addresses come from
one compiled call (``handoff.addresses``; NumPy's ``ctypes.data`` makes a ctypes object per
array): a tiny batch of products as jobs took 37 us a call in all before, 13.5 after, of
which the hand-off itself is some 6 (medians of 500 calls, Intel model 207).

NOTE [ Kernels as jobs ]
The element-wise and row kernels of an op in parts (relu, GELU, float32 exp and their
backward kernels, attention's softmax forward and backward, the row softmax and log_softmax
forward and backward: NOTE [ Row parts ] in ops/nn.py; SGD's step in optim/sgd.py) run the
same way where the hand-off is set up: ``kernel_as_jobs`` checks the arrays' dtypes, and one
compiled call (``jobs.run_kernel``) checks the rest (C-contiguous, of the op's size, the
output apart from the inputs or one of them itself), writes one row of words per part (the
kernel, the part's rows, the arrays' addresses, the softmax's scale and causal block) and
runs ``KERNEL_JOB`` (memgrad/_kernels/jobs.py) through ``handoff.run_jobs``: each part is
one call of the kernel on its rows, without the GIL, so the result is the one of a single
call, whatever the split. A Python part cost some 50 us of hand-over per op (the helper
woken, then waiting for the GIL, and the caller waiting for it back); as jobs, at ``memgrad
train``'s sizes, the attention softmax took 325 against 391 us a call, its backward 116
against 187, and a GELU 362 against 420 (medians of 300 calls, Intel model 207). Without the
hand-off (or with ``NUMBA_DISABLE_JIT=1``), or for arrays the job declines,
``kernel_in_parts`` runs the kernels as Python parts of ``in_parts``. As for the products,
the addresses come from one compiled call and the words are one small array built at once: a
kernel as jobs on a tiny array took 42 us a call in all before, 13.5 after. The Python
around a job matters most right after a large product, whose operands push the interpreter's
own data out of the caches: there it ran five times slower than in a loop, and a relu job
after W1's product took 122 us with its words made in Python and the callback called through
ctypes, 91-100 with ``run_kernel`` (docs/performance-log.md, "Jobs in one compiled call"). So
kernels run as jobs from ``KERNEL_JOB_MIN_MACS``, half the ``PARTS_MIN_MACS`` of a Python
part: at nanoGPT's smallest sizes (65,536 elements) a float32 GELU took 73 against 105 us,
its backward 89 against 143 (Intel model 167).

NOTE [ A linear layer's bias in parts of its rows ]
``addmm`` (NOTE [ A linear layer's bias first ] in ops/nn.py) writes the bias into the
output, then has OpenBLAS add the product on its threads. OpenBLAS splits a product of
more rows than columns by rows, one part a core, and the bias went in on the calling thread
alone, into rows that the other core then reads and adds to. From ``ADDMM_JOB_MIN_MACS``
multiply-adds, for outputs of at least as many rows as columns, ``addmm`` runs as
``ADDMM_JOB`` on the hand-off instead (one compiled call, ``handoff.run_addmm``): one part
of the rows a thread, each writing the bias into its rows and adding its rows' product with
one single-threaded ``cblas_?gemm``. Each
element is then what one BLAS thread computes, whatever the split: OpenBLAS's own threads
give the same values where they block the inner dimension as one thread does (inner
dimensions of 64, 256, 1,024 or 4,096 in the tests and measurements), and may differ in
the last bit where they do not (2,000). (A product of fewer rows than columns, as W1's,
OpenBLAS splits by columns; there rows in parts made the product slower.)
At ``memgrad train``'s sizes (1,024 rows, 64 inputs, 192 and 256 outputs) a float32 layer
took 120 against 142 and 158 against 191 us, at W2's (2,048 rows) 3-8% less (Intel model
167, medians of 200 calls).

NOTE [ Accumulating GEMM ]
``Gemm(a, b, c)`` computes ``c = a @ b + beta * c`` for 2-D float32 or float64 views whose
rows or columns are unit-strided, through NumPy's own OpenBLAS's ``cblas_?gemm`` (ILP64, as
NumPy bundles it), called with ctypes (which releases the GIL). NumPy's matmul cannot add into
its output: a product into scratch plus ``c += scratch`` is one more pass over ``c``. Strided
views (the row-shifted windows of NOTE [ Row-shifted convolution ] in memgrad/ops/conv.py) go
to BLAS as they lie, their row stride as the leading dimension. A ``Gemm`` checks one
product's layout once and is then called with byte offsets into its operands, once per
sample and kernel row: building and checking views per call cost about three times the
ctypes call itself (some 30 against 10 microseconds, next to about 100 for a 96x1024x32
product of the W3 benchmark's weight gradient). Without that OpenBLAS, or for other dtypes
or layouts, it computes the same with NumPy.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import math
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["PARTS_MIN_MACS", "PRODUCT_PARTS_MIN_MACS", "JOB_PARTS_MIN_MACS",
           "KERNEL_JOB_MIN_MACS", "ROW_ALIGN", "Parts", "in_parts", "rows_in_parts",
           "rows_product", "products_in_parts", "kernel_in_parts", "kernel_as_jobs",
           "batch_as_jobs", "jobs_can_run", "product_words", "gemm_address", "Gemm", "addmm"]

# multiply-adds below which an op stays on the calling thread: about 0.1 ms of one core,
# against tens of microseconds for a hand-off
PARTS_MIN_MACS = 1 << 23
# multiply-adds from which a product with one matrix operand runs in parts of its rows
# where there is no hand-off; below, it runs whole on BLAS's own threads (NOTE [ Products in
# parts of their rows ])
PRODUCT_PARTS_MIN_MACS = 1 << 26
# the parts of a product's rows (rows_in_parts) start at multiples of this: a multiple of
# OpenBLAS's row unrolling, so that each part is tiled as that part of the whole product
ROW_ALIGN = 16
# multiply-adds from which a batch of products runs as jobs on the helpers (NOTE [ Products
# as jobs ]): no GIL to pass, so the hand-off costs a few microseconds
JOB_PARTS_MIN_MACS = 1 << 20
# multiply-adds from which an element-wise or row kernel of an op runs as jobs on the
# helpers (NOTE [ Kernels as jobs ]): half of PARTS_MIN_MACS, since a job's hand-off costs
# a few microseconds where a Python part's cost tens
KERNEL_JOB_MIN_MACS = 1 << 22
# multiply-adds from which addmm runs as jobs, for outputs of at least as many rows as
# columns (NOTE [ A linear layer's bias in parts of its rows ])
ADDMM_JOB_MIN_MACS = 1 << 23
# rounds of the CPU's pause instruction a hand-off helper waits for work before it sleeps
# (NOTE [ One set of threads ]): some 2 ms on a CPU whose pause takes 30 ns
SPIN_ROUNDS = 1 << 16


def _openblas_symbol(*names: str) -> Any:
    """The first of ``names`` that NumPy's bundled OpenBLAS exports, or None."""
    here = os.path.dirname(np.__file__)
    for path in glob.glob(here + ".libs/*openblas*") + glob.glob(here + "/.dylibs/*openblas*"):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in names:
            fn = getattr(lib, name, None)
            if fn is not None:
                return fn
    return None


def _find_set_local() -> Any:
    """``openblas_set_num_threads_local`` of NumPy's bundled OpenBLAS (the calling thread's
    BLAS thread count, returning the previous one), or None. scipy-openblas 0.3.27 to 0.3.31
    export it without their ``scipy_`` prefix and ``64_`` suffix."""
    fn = _openblas_symbol("openblas_set_num_threads_local")
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


_I64, _PTR, _ENUM = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int


def _find_gemms() -> dict:
    """dtype -> ``cblas_?gemm`` of NumPy's bundled OpenBLAS with 64-bit integers (``s`` for
    float32, ``d`` for float64), or None where it has none."""
    found = {}
    for dtype, letter, scalar in ((np.dtype(np.float32), "s", ctypes.c_float),
                                  (np.dtype(np.float64), "d", ctypes.c_double)):
        fn = _openblas_symbol(f"scipy_cblas_{letter}gemm64_", f"cblas_{letter}gemm64_")
        if fn is not None:
            # enums, then integers, scalars and pointers in BLAS's order
            fn.argtypes = [_ENUM, _ENUM, _ENUM, _I64, _I64, _I64, scalar, _PTR, _I64, _PTR,
                           _I64, scalar, _PTR, _I64]
            fn.restype = None
        found[dtype] = fn
    return found


class Parts:
    """The helper threads of ``in_parts``, made on first use."""

    set_local: object = False  # not looked up yet
    gemms: dict | None = None  # dtype -> cblas_?gemm or None, looked up on first use
    addmm: object = False  # the compiled addmm_into, None, or not looked up yet
    gemm_at: dict | None = None  # dtype -> the address of its cblas_?gemm, where there is one
    layouts: dict = {}  # the words of product_words by layout (None: it does not fit)
    helpers: list | None = None  # the _Helper threads, k - 1 of them
    lock = threading.Lock()  # one op in parts at a time: the helpers take one part each
    handoff: object = False  # the _Handoff of NOTE [ One set of threads ], None, or not set up


class _Inside(threading.local):
    active = False  # this thread runs a part of an op in parts


_inside = _Inside()


def _reset_after_fork() -> None:
    Parts.helpers = None  # the child has none of the parent's threads
    Parts.lock = threading.Lock()  # nor a lock another thread of the parent held
    if isinstance(Parts.handoff, _Handoff):  # OpenBLAS's own threads, until new helpers
        Parts.handoff.set_callback(None)
        Parts.handoff.register([])
        Parts.handoff.states[:] = 0  # handoff.NONE: no helper serves a slot here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


class _Helper:
    """A thread of ``in_parts`` that runs one part at a time, with one BLAS thread: ``run``
    hands it a part, ``join`` waits for its result. Two locks pass the turn back and forth,
    about a third of what a pool's futures cost the calling thread per op. The part is let
    go of before the result is reported: the arrays the work closes over must not outlive
    the op (for the memory tracker they would be alive past their last use)."""

    def __init__(self, name: str) -> None:
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.part: tuple | None = None
        self.result: tuple = (None, None)
        self.thread = thread = threading.Thread(target=self._serve, name=name, daemon=True)
        try:
            thread.start()
        except BaseException:
            # an interrupt (Ctrl-C) in start's wait for the new thread: it runs, and is
            # stopped at once
            self.stop()
            raise

    def _serve(self) -> None:
        _inside.active = True
        while True:
            self.go.acquire()
            if self.part is None:
                return  # stopped
            self._run_part()
            self.done.release()

    def _run_part(self) -> None:
        """Run the part handed over with one BLAS thread and keep its result; the part is
        let go of first."""
        part, self.part = self.part, None
        set_local, work, lo, hi = part
        del part
        prev = set_local(1)
        try:
            self.result = (work(lo, hi), None)
        except BaseException as e:
            self.result = (None, e)
        finally:
            del work
            set_local(prev)

    def run(self, set_local: Any, work: Callable[[int, int], Any], lo: int, hi: int) -> None:
        self.part = (set_local, work, lo, hi)
        self.go.release()

    def join(self) -> Any:
        self.done.acquire()
        (value, error), self.result = self.result, (None, None)
        if error is not None:
            raise error
        return value

    def stop(self) -> None:
        """End the thread once its part (if any) is done."""
        self.part = None
        if self.go.locked():  # (else a part handed over is not yet taken: it sees None)
            self.go.release()


class _HandoffHelper(_Helper):
    """A helper that waits in the hand-off loop, without the GIL, and runs OpenBLAS's jobs
    as well as parts (NOTE [ One set of threads ]); ``run``, ``join`` and ``stop`` as
    ``_Helper``'s."""

    def __init__(self, name: str, handoff: _Handoff, slot: int) -> None:
        self.handoff, self.slot, self.stopping = handoff, slot, False
        super().__init__(name)

    def _serve(self) -> None:
        kernels = _kernels()
        _inside.active = True
        states, jobs, slot = self.handoff.states, self.handoff.jobs, self.slot
        states[slot] = kernels.IDLE  # (NONE until now: OpenBLAS's jobs took threads of their own)
        if self.stopping:  # stop() came first: serve returns at once
            kernels.stop(states, slot)
        while kernels.serve(states, jobs, slot, SPIN_ROUNDS) == kernels.PART:
            self._run_part()
            states[slot] = kernels.IDLE
            if self.stopping:  # stop() may have found the helper running its part
                kernels.stop(states, slot)
            self.done.release()
        states[slot] = kernels.NONE

    def run(self, set_local: Any, work: Callable[[int, int], Any], lo: int, hi: int) -> None:
        self.part = (set_local, work, lo, hi)
        if not _kernels().post(self.handoff.states, self.slot):  # it has ended: run it here
            del work
            self._run_part()
            self.done.release()

    def stop(self) -> None:
        """End the thread once its part (if any) is done."""
        self.stopping = True
        _kernels().stop(self.handoff.states, self.slot)


class _Handoff:
    """The state of NOTE [ One set of threads ]: the helpers' slots and OpenBLAS's threads
    callback, set up once per process."""

    def __init__(self, set_callback: Any) -> None:
        kernels = _kernels()
        self.states = np.zeros(kernels.SLOTS, np.int32)
        self.jobs = np.zeros((kernels.SLOTS, 4), np.int64)
        self.helpers = np.zeros(kernels.SLOTS + 1, np.int64)  # count, then the slots
        self.callback = kernels.blas_callback(self.states, self.jobs, self.helpers)
        self.set_callback = set_callback
        # the address of openblas_set_num_threads_local, for the compiled calls
        self.set_local_at = ctypes.cast(_set_local(), ctypes.c_void_p).value
        self.next_slot = 0
        self.listed: list = []  # the helpers last registered

    @staticmethod
    def make() -> _Handoff | None:
        """The hand-off, or None where this platform, NumPy's BLAS or the environment
        (``MEMGRAD_BLAS_HANDOFF=0``, ``NUMBA_DISABLE_JIT=1``) rule it out."""
        if os.environ.get("MEMGRAD_BLAS_HANDOFF", "1") == "0" or _set_local() is None:
            return None
        from numba import config

        if config.DISABLE_JIT or not _kernels().supported():
            return None
        setter = _openblas_symbol("scipy_openblas_set_threads_callback_function64_",
                                  "openblas_set_threads_callback_function")
        if setter is None:
            return None
        setter.argtypes, setter.restype = [ctypes.c_void_p], None
        return _Handoff(setter)

    def start(self, n: int) -> list | None:
        """``n`` new helpers, listed for OpenBLAS's jobs; None once the slots are used up
        (then OpenBLAS runs its jobs on its own threads again)."""
        self.register([])  # while they change, OpenBLAS's jobs take threads of their own
        if self.next_slot + n > len(self.states):
            self.set_callback(None)
            return None
        slots = range(self.next_slot, self.next_slot + n)
        self.next_slot += n
        helpers = [_HandoffHelper(f"memgrad-parts_{i}", self, slot) for i, slot in enumerate(slots)]
        self.register(helpers)
        self.set_callback(self.callback.address)  # (again, in a forked child)
        return helpers

    def register(self, helpers: list) -> None:
        """List ``helpers`` as the ones OpenBLAS's jobs go to (the count last, so that the
        callback never reads a half-written list)."""
        slots = [h.slot for h in helpers if isinstance(h, _HandoffHelper)]
        self.helpers[0] = 0
        self.helpers[1:len(slots) + 1] = slots
        self.helpers[0] = len(slots)
        self.listed = helpers


@functools.cache
def _kernels() -> Any:
    from memgrad._kernels import handoff

    return handoff


def _handoff() -> _Handoff | None:
    if Parts.handoff is False:
        Parts.handoff = _Handoff.make()
    return Parts.handoff  # type: ignore[return-value]


def _helpers(k: int) -> list:
    """``k - 1`` helper threads, made on first use (under ``Parts.lock``): hand-off
    helpers (NOTE [ One set of threads ]) when this platform has them."""
    helpers = Parts.helpers
    if helpers is None or len(helpers) < k - 1:
        for h in helpers or ():
            h.stop()
        handoff = _handoff()
        if handoff is not None:
            helpers = handoff.start(k - 1)
        if handoff is None or helpers is None:
            helpers = [_Helper(f"memgrad-parts_{i}") for i in range(k - 1)]
        Parts.helpers = helpers
    elif isinstance(Parts.handoff, _Handoff) and Parts.handoff.listed is not helpers:
        Parts.handoff.register(helpers)  # set back from elsewhere (as tests do)
    return helpers


def _set_local() -> Any:
    if Parts.set_local is False:
        Parts.set_local = _find_set_local()
    return Parts.set_local


def _blas_threads(set_local: Any) -> int:
    """The calling thread's BLAS thread count: one compiled call where the hand-off is set
    up, else two of ``set_local`` (through ctypes, some 11 us on a cold cache)."""
    handoff = Parts.handoff
    if isinstance(handoff, _Handoff):
        return _kernels().blas_threads(handoff.set_local_at)
    threads = set_local(1)
    set_local(threads)
    return threads


def in_parts(n: int, macs: int, work: Callable[[int, int], Any]) -> list:
    """``[work(lo, hi), ...]`` over contiguous parts of the batch ``range(n)``: one part per
    BLAS thread, each on its own thread with single-threaded BLAS, or ``[work(0, n)]`` when
    NumPy's BLAS runs one thread here or offers no per-thread count, or the op's ``macs``
    multiply-adds are too few to pay for the hand-off (NOTE [ Batch parts ])."""
    set_local = _set_local()
    if set_local is None or n < 2 or macs < PARTS_MIN_MACS or _inside.active:
        return [work(0, n)]  # (a part's own ops run whole: the helpers are busy)
    threads = set_local(1)
    try:
        k = min(threads, n)
        if k < 2:
            return [work(0, n)]
        with Parts.lock:
            helpers = _helpers(threads)
            return _run_parts(helpers, set_local, work, [n * i // k for i in range(k + 1)])
    finally:
        set_local(threads)


def _run_parts(helpers: list, set_local: Any, work: Callable[[int, int], Any],
               ends: list) -> list:
    """The parts between ``ends``: the first on the calling thread, one per helper."""
    helpers = helpers[:len(ends) - 2]
    for h, lo, hi in zip(helpers, ends[1:], ends[2:]):
        h.run(set_local, work, lo, hi)
    _inside.active = True
    try:
        try:
            first = work(0, ends[1])
        finally:
            _inside.active = False
            rest = _join(helpers)
    except (KeyboardInterrupt, SystemExit):
        # an interrupt (Ctrl-C) while a helper may still run its part: each ends once its
        # part is done, and the next op makes new ones
        Parts.helpers = None
        for h in helpers:
            h.stop()
        raise
    return [first, *rest]


def _join(helpers: list) -> list:
    """Every helper's result, in order; the first error once all are done."""
    rest, error = [], None
    for h in helpers:
        try:
            rest.append(h.join())
        except Exception as e:
            error = error or e
    if error is not None:
        raise error
    return rest


def _blas_on_helpers() -> bool:
    """Whether OpenBLAS's jobs run on the helpers (NOTE [ One set of threads ]), which are
    made here if this platform has the hand-off and they are not yet; False inside a part
    (whose products run whole on its one thread anyway)."""
    set_local = _set_local()
    if set_local is None or _inside.active or _handoff() is None:
        return False
    threads = _blas_threads(set_local)
    if threads < 2:
        return False
    with Parts.lock:
        helpers = _helpers(threads)
        handoff = Parts.handoff
        return isinstance(handoff, _Handoff) and handoff.listed is helpers


def rows_in_parts(rows: int, macs: int, work: Callable[[int, int], Any]) -> None:
    """``work(lo, hi)`` over contiguous parts of ``range(rows)``, a product's rows, as
    ``in_parts`` runs them (NOTE [ Products in parts of their rows ]): each part's bounds are
    multiples of ``ROW_ALIGN``; ``macs`` is the whole product's multiply-adds. A product of
    fewer than ``PRODUCT_PARTS_MIN_MACS``, or any product when OpenBLAS's threads are the
    helpers, runs whole, on BLAS's threads.

    Example:
        >>> rows_in_parts(40, 0, lambda lo, hi: print(lo, hi))  # too small to split: one part
        0 40
    """
    if macs < PRODUCT_PARTS_MIN_MACS or _blas_on_helpers():
        work(0, rows)
        return
    blocks = -(-rows // ROW_ALIGN)
    in_parts(blocks, macs, lambda lo, hi: work(lo * ROW_ALIGN, min(rows, hi * ROW_ALIGN)))


_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def rows_product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` for a matrix ``y``, as ``np.matmul``: whole on BLAS's threads, or, large
    enough and without the hand-off, in parts of ``x``'s rows on every core (NOTE [ Products
    in parts of their rows ]), as linear's products and their gradients.

    Example:
        >>> rows_product(np.ones((2, 3)), np.ones((3, 1))).ravel().tolist()
        [3.0, 3.0]
    """
    k, n = y.shape
    rows = math.prod(x.shape[:-1])
    if rows * k * n < PRODUCT_PARTS_MIN_MACS or x.dtype != y.dtype or x.dtype not in _BLAS_DTYPES \
            or not (x.ndim == 2 or x.flags.c_contiguous):
        return np.matmul(x, y)
    x2 = x.reshape(rows, k)  # a view: x is a matrix or C-contiguous
    out = np.empty(x.shape[:-1] + (n,), x.dtype)
    out2 = out.reshape(rows, n)

    def work(lo: int, hi: int) -> None:
        np.matmul(x2[lo:hi], y, out=out2[lo:hi])

    rows_in_parts(rows, rows * k * n, work)
    return out


def products_in_parts(a: np.ndarray, b: np.ndarray, out: np.ndarray, form: str, block: int,
                      macs: int) -> bool:
    """``out`` = form ``form`` of ``a`` and ``b`` over their batch of one or two dimensions
    (``"mm"``: ``a @ b``; the causal forms of NOTE [ Causal products ] in ops/nn.py, with
    ``block``), one BLAS call per matrix, in one part per BLAS thread run as jobs on the
    helpers (NOTE [ Products as jobs ]). False, with ``out`` untouched, where that does not
    run: fewer than ``JOB_PARTS_MIN_MACS`` multiply-adds, one BLAS thread, no hand-off,
    inside a part, or operands BLAS cannot take as they lie.

    Example:
        >>> a, b = np.ones((2, 3, 4)), np.ones((2, 4, 5))
        >>> products_in_parts(a, b, np.empty((2, 3, 5)), "mm", 1, 0)  # too small
        False
    """
    if macs < JOB_PARTS_MIN_MACS:
        return False
    batch = math.prod(a.shape[:-2])
    split = _job_split(batch)
    row = product_words(a, b, out, form, block) if split is not None else None
    if row is None:
        return False
    kernels = _kernels()
    return _split_as_jobs(split, batch, lambda: kernels.PRODUCTS_JOB,
                          lambda ends: kernels.product_parts(row, len(ends) - 1, batch))


def kernel_in_parts(kernel: Callable, blocks: int, rows_per_block: int, macs: int,
                    inputs: tuple[np.ndarray, ...], out: np.ndarray, *params: Any) -> None:
    """``kernel(*inputs, *params, out)``, an element-wise or row kernel that writes into
    ``out``, over ``blocks`` blocks of ``rows_per_block`` rows (the elements of flat arrays,
    or the rows of 2-D ones), in contiguous parts of whole blocks, one part per BLAS thread:
    as jobs on the helpers where ``kernel_as_jobs`` runs it (NOTE [ Kernels as jobs ]), else
    as Python parts of ``in_parts`` (NOTE [ Batch parts ]). ``macs`` is the whole call's
    work in multiply-adds. Each part is one kernel call on its rows.

    Example:
        >>> from memgrad._kernels.activation import relu_into
        >>> x, out = np.array([-1.0, 2.0]), np.empty(2)
        >>> kernel_in_parts(relu_into, 2, 1, 0, (x,), out); out.tolist()
        [0.0, 2.0]
    """
    if macs < KERNEL_JOB_MIN_MACS and macs < PARTS_MIN_MACS:
        # one call, without the parts' machinery (about 1 us of a small op)
        kernel(*inputs, *params, out)
        return
    if kernel_as_jobs(kernel, blocks, rows_per_block, macs, inputs, out, params):
        return
    r = rows_per_block

    def work(lo: int, hi: int) -> None:
        kernel(*[a[lo * r:hi * r] for a in inputs], *params, out[lo * r:hi * r])

    in_parts(blocks, macs, work)


def kernel_as_jobs(kernel: Callable, blocks: int, rows_per_block: int, macs: int,
                   inputs: tuple[np.ndarray, ...], out: np.ndarray, params: tuple = ()) -> bool:
    """``kernel_in_parts`` as jobs on the helpers (NOTE [ Kernels as jobs ]), for a kernel of
    ``memgrad._kernels.jobs.KERNELS``; ``params`` are its parameters between the inputs and
    ``out`` (none, a scale, or a scale and a causal block). False, with ``out`` untouched,
    where that does not run: fewer than ``KERNEL_JOB_MIN_MACS`` multiply-adds, one BLAS
    thread, no hand-off, inside a part, another kernel, or arrays the job cannot take as they
    lie.

    Example:
        >>> from memgrad._kernels.activation import relu_into
        >>> x = np.ones(8, np.float32)
        >>> kernel_as_jobs(relu_into, 8, 1, 0, (x,), np.empty_like(x))  # too small
        False
    """
    split = _job_split(blocks) if macs >= KERNEL_JOB_MIN_MACS else None
    if split is None:
        return False
    threads, k = split
    jobs = _jobs()
    index = jobs.KERNEL_INDEX.get(kernel)
    if index is None or not 1 <= len(inputs) <= 2 or out.__class__ is not np.ndarray:
        return False
    dtype = out.dtype
    if dtype not in _BLAS_DTYPES or not out.flags.writeable:
        return False
    for a in inputs:
        if a.__class__ is not np.ndarray or a.dtype != dtype:
            return False
    with Parts.lock:
        handoff = _listed(threads)
        return handoff is not None and len(jobs.run_kernel(
            handoff.states, handoff.jobs, handoff.helpers, _kernels().JOB_THREAD,
            handoff.set_local_at, jobs.KERNEL_JOB, index, inputs[0], inputs[-1], out,
            float(params[0]) if params else 0.0, int(params[1]) if len(params) > 1 else 0,
            blocks, rows_per_block, k)) > 0


def batch_as_jobs(n: int, macs: int, job: Callable[[], int],
                  words_of: Callable[[list[int]], np.ndarray],
                  min_macs: int | None = None) -> bool:
    """``in_parts`` for a compiled job of the hand-off (an op's own loop over its batch, as
    ``memgrad._kernels.winograd_jobs.WINOGRAD_JOB``; ``job()`` gives its address, asked for
    only where it can run, so that its module is imported, and compiled, only then):
    ``range(n)`` in one contiguous part per BLAS thread, part j reading row j of
    ``words_of(ends)`` (``ends`` the parts' bounds), without the GIL, on the calling thread
    and the helpers at once, with single-threaded BLAS. False, with neither called, where
    that does not run: fewer than ``min_macs`` multiply-adds (by default
    ``PARTS_MIN_MACS``), one BLAS thread or one sample, no hand-off, inside a part.

    Example:
        >>> batch_as_jobs(4, 0, lambda: 0, lambda ends: np.zeros((len(ends) - 1, 1)))
        False
    """
    least = PARTS_MIN_MACS if min_macs is None else min_macs
    split = _job_split(n) if macs >= least else None
    return split is not None and _split_as_jobs(split, n, job, words_of)


def jobs_can_run(n: int) -> bool:
    """Whether a compiled job of the hand-off could run here in parts of ``range(n)``: the
    hand-off set up (this platform, NumPy's BLAS and the environment allow it), two or more
    BLAS threads and two or more of ``n``, outside a part. ``batch_as_jobs`` checks the same
    again; this is for an op that has work to do before it, wanted only where the job runs.

    Example:
        >>> jobs_can_run(1)
        False
    """
    return _handoff() is not None and _job_split(n) is not None


def _job_split(n: int) -> tuple[int, int] | None:
    """``(threads, parts)`` for a compiled job of the hand-off over ``range(n)``: the calling
    thread's BLAS thread count and ``min(threads, n)`` parts; None where no job runs here:
    fewer than two parts, inside a part, no hand-off on this platform, no per-thread BLAS
    thread count."""
    if n < 2 or _inside.active or Parts.handoff is None:
        return None
    set_local = _set_local()
    if set_local is None:
        return None
    threads = _blas_threads(set_local)
    k = min(threads, n)
    return (threads, k) if k >= 2 else None


def _split_as_jobs(split: tuple[int, int], n: int, job: Callable[[], int],
                   words_of: Callable[[list[int]], np.ndarray]) -> bool:
    """``range(n)`` in the parts of ``split`` (``_job_split``'s) as ``job()`` on the
    hand-off, part j reading row j of ``words_of(ends)``, with single-threaded BLAS
    meanwhile; False where the helpers are not the hand-off's."""
    threads, k = split
    ends = [n * i // k for i in range(k + 1)]
    return _run_jobs(threads, k, job(), lambda: words_of(ends))


def gemm_address(dtype: np.dtype) -> int | None:
    """The address of NumPy's OpenBLAS's ILP64 ``cblas_?gemm`` for ``dtype`` (float32 or
    float64), for a compiled job to call; None where there is none.

    Example:
        >>> gemm_address(np.dtype(np.int8)) is None
        True
    """
    if Parts.gemm_at is None:
        Parts.gemm_at = _gemm_addresses()
    return Parts.gemm_at.get(np.dtype(dtype))


def _listed(threads: int) -> _Handoff | None:
    """The hand-off, its helpers made for ``threads`` BLAS threads and listed, or None where
    the helpers are not the hand-off's (this platform has none); under ``Parts.lock``."""
    helpers = _helpers(threads)
    handoff = Parts.handoff
    if not isinstance(handoff, _Handoff) or handoff.listed is not helpers:
        return None
    return handoff


def _run_jobs(threads: int, k: int, job: int, words_of: Callable[[], np.ndarray]) -> bool:
    """``job`` (a compiled job of the hand-off) in ``k`` parts, the calling thread's and the
    helpers', each part reading its row of ``words_of()``, with single-threaded BLAS
    meanwhile; False where the helpers are not the hand-off's (this platform has none)."""
    with Parts.lock:
        handoff = _listed(threads)
        if handoff is None:
            return False
        words = words_of()
        if words.shape[0] != k or words.dtype != np.int64 or not words.flags.c_contiguous:
            raise ValueError(f"expected {k} C-contiguous rows of int64 words, got "
                             f"{words.shape[0]} of {words.dtype}")
        kernels = _kernels()
        kernels.run_jobs(handoff.states, handoff.jobs, handoff.helpers, kernels.JOB_THREAD,
                         handoff.set_local_at, job, words)
    return True


@functools.cache
def _jobs() -> Any:
    from memgrad._kernels import jobs

    return jobs


# form -> (the dims of a and b that must agree, the dims of a and b that make the output's)
_FORM_DIMS = {"mm": ((1, 2), (0, 3)), "abT": ((1, 3), (0, 2)), "ab": ((1, 2), (0, 3)),
              "aTb": ((0, 2), (1, 3))}


def product_words(a: np.ndarray, b: np.ndarray, out: np.ndarray, form: str,
                 block: int) -> list | None:
    """The words of ``products_in_parts``'s job (``handoff.PRODUCTS_JOB``'s row, the part's
    range still empty), or None when the operands do not fit it: one or two batch
    dimensions, one float dtype, no empty dimension, matrices whose rows or columns are
    unit-strided and an output whose rows are, the shapes the form asks for, an output apart
    from the operands.
    (Checked here, from the arrays: the job reads and writes where these words point. The
    words of a layout, all but the addresses, are made once and kept: an op's products
    repeat a few layouts, and making them cost more than the job's hand-off.)

    Example:
        >>> product_words(np.ones((2, 3)), np.ones((3, 2)), np.empty((2, 2)), "mm", 1) is None
        True
    """
    key = (a.shape, b.shape, out.shape, a.strides, b.strides, out.strides, a.dtype, b.dtype,
           out.dtype, form, block)
    row = Parts.layouts.get(key, False)
    if row is False:
        row = _layout_words(a, b, out, form, block)
        if len(Parts.layouts) >= _LAYOUTS_KEPT:
            Parts.layouts.clear()
        Parts.layouts[key] = row
    if row is None or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    row = row.copy()
    handoff = _kernels()
    row[handoff.W_A], row[handoff.W_B], row[handoff.W_C] = handoff.addresses(a, b, out)
    return row


_LAYOUTS_KEPT = 256  # the layouts of products whose words product_words keeps


def _layout_words(a: np.ndarray, b: np.ndarray, out: np.ndarray, form: str,
                  block: int) -> list | None:
    """``product_words``'s words for the layout of ``a``, ``b`` and ``out`` (their shapes,
    strides and dtypes), the addresses 0; None where the layout does not fit."""
    nd = a.ndim
    dtype = a.dtype
    if nd not in (3, 4) or b.ndim != nd or out.ndim != nd or b.dtype != dtype \
            or out.dtype != dtype or block < 1 or form not in _FORM_DIMS:
        return None
    shape = a.shape
    if shape[:-2] != b.shape[:-2] or shape[:-2] != out.shape[:-2]:
        return None
    dims = shape[-2:] + b.shape[-2:]
    (i, j), (r, c) = _FORM_DIMS[form]
    if dims[i] != dims[j] or out.shape[-2:] != (dims[r], dims[c]) or 0 in dims \
            or 0 in shape:
        return None
    gemm = gemm_address(dtype)
    item = dtype.itemsize
    ops = [_layout(v.shape[-2], v.shape[-1], v.strides[-2], v.strides[-1], item)
           for v in (a, b, out)]
    if gemm is None or None in ops or ops[2][0] != _NO_TRANS:
        return None
    words = []
    for v, op in zip((a, b, out), ops):
        s = v.strides
        words.append((0, s[0], s[1] if nd == 4 else 0) + op)
    return _kernels().product_row(gemm, int(dtype == np.float64), item, form, block,
                                  shape[1] if nd == 4 else 1, words[0], words[1],
                                  words[2][:3] + words[2][4:], dims)


def _gemms() -> dict:
    """dtype -> NumPy's OpenBLAS's ``cblas_?gemm`` (ILP64) or None, looked up once."""
    if Parts.gemms is None:
        Parts.gemms = _find_gemms()
    return Parts.gemms


def addmm(a: np.ndarray, b: np.ndarray, v: np.ndarray) -> np.ndarray | None:
    """``a @ b + v`` for matrices ``a`` (M, K), ``b`` (K, N) and a vector ``v`` (N,) of one
    float dtype, as PyTorch's addmm: ``v`` broadcast into a new output, then the product
    added to it by one ``cblas_?gemm`` with beta 1 (NOTE [ A linear layer's bias first ] in
    ops/nn.py); None, with nothing computed, where NumPy's OpenBLAS cannot take them as they
    lie (another dtype, neither rows nor columns unit-strided, an empty dimension).

    Example:
        >>> addmm(np.ones((2, 3)), np.ones((3, 2)), np.array([1.0, 2.0])).tolist()
        [[4.0, 5.0], [4.0, 5.0]]
    """
    m, k = a.shape
    n = b.shape[1]
    if not a.dtype == b.dtype == v.dtype or v.shape != (n,) or 0 in (m, n, k):
        return None
    out = np.empty((m, n), a.dtype)
    compiled = _compiled_addmm()
    fn = gemm_address(a.dtype) if compiled is not None else None
    if fn is not None and (m * n * k < PRODUCT_PARTS_MIN_MACS or _blas_on_helpers()):
        la, lb = _operand(a), _operand(b)
        if la is not None and lb is not None and v.flags.c_contiguous:
            if m < n or m * n * k < ADDMM_JOB_MIN_MACS \
                    or not _addmm_as_jobs(a, b, v, out, fn, la, lb):
                compiled(a, b, v, out, fn, la[0], la[1], lb[0], lb[1])
            return out
    product = Gemm(a, b, out)
    if not product.blas:
        return None
    out[...] = v
    product(0, 0, 0, 1.0)  # (a large one in row parts where there is no hand-off)
    return out


def _addmm_as_jobs(a: np.ndarray, b: np.ndarray, v: np.ndarray, out: np.ndarray, fn: int,
                   la: tuple[int, int], lb: tuple[int, int]) -> bool:
    """``addmm``'s ``out = v + a @ b`` as ``ADDMM_JOB`` on the hand-off (NOTE [ A linear
    layer's bias in parts of its rows ]), its words made and handed off by one compiled call
    (``handoff.run_addmm``); False, with ``out`` untouched, where that does not run: one BLAS
    thread, no hand-off, inside a part."""
    split = _job_split(a.shape[0])
    if split is None:
        return False
    threads, k = split
    kernels = _kernels()
    with Parts.lock:
        handoff = _listed(threads)
        if handoff is None:
            return False
        kernels.run_addmm(handoff.states, handoff.jobs, handoff.helpers, kernels.JOB_THREAD,
                          handoff.set_local_at, kernels.ADDMM_JOB, a, b, v, out, fn, la[0],
                          la[1], lb[0], lb[1], k)
    return True


def _compiled_addmm() -> Callable | None:
    """``memgrad._kernels.blas.addmm_into``, or None with ``NUMBA_DISABLE_JIT=1``; looked up
    on first use (it imports numba)."""
    if Parts.addmm is False:
        from numba import config

        if config.DISABLE_JIT:
            Parts.addmm = None
        else:
            from memgrad._kernels.blas import addmm_into

            Parts.addmm = addmm_into
    return Parts.addmm  # type: ignore[return-value]


def _gemm_addresses() -> dict:
    """dtype -> the address of NumPy's OpenBLAS's ``cblas_?gemm`` (ILP64), where it has one."""
    return {dt: ctypes.cast(fn, ctypes.c_void_p).value for dt, fn in _gemms().items()
            if fn is not None}


_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _operand(a: np.ndarray) -> tuple[int, int] | None:
    """``(transpose flag, leading dimension)`` of a 2-D view as a row-major BLAS operand, or
    None when neither its rows nor its columns are unit-strided."""
    return _layout(a.shape[0], a.shape[1], a.strides[0], a.strides[1], a.itemsize)


def _layout(rows: int, cols: int, b0: int, b1: int, item: int) -> tuple[int, int] | None:
    """``_operand`` of a matrix of ``rows`` x ``cols`` with byte strides ``b0``, ``b1``."""
    if b0 % item or b1 % item:
        return None
    s0, s1 = b0 // item, b1 // item
    if (s1 == 1 or cols == 1) and (rows == 1 or s0 >= max(cols, 1)):
        return _NO_TRANS, max(s0, cols, 1)
    if (s0 == 1 or rows == 1) and (cols == 1 or s1 >= max(rows, 1)):
        return _TRANS, max(s1, rows, 1)
    return None


class Gemm:
    """``c = a @ b + beta * c`` over views at byte offsets from fixed 2-D operands: one
    product's layout (shapes, strides, dtype) checked once, then called per sample without
    building views (NOTE [ Accumulating GEMM ]). With ``beta`` 0, ``c``'s old contents are
    ignored (NaN included).

    Example:
        >>> a, b, c = np.eye(2), np.full((2, 4), 3.0), np.ones((2, 4))
        >>> g = Gemm(a, b[:, :2], c[:, :2])  # the left and right halves, in two calls
        >>> g(0, 0, 0, 1.0); g(0, 16, 16, 0.0)
        >>> c
        array([[4., 4., 3., 3.],
               [4., 4., 3., 3.]])
    """

    __slots__ = ("fn", "head", "ptrs", "lds", "row_bytes", "views", "bounds")

    def __init__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        fn = _gemms().get(c.dtype)
        self.bounds: tuple | None = None  # the offsets' ranges, found on the first offset
        m, k = a.shape
        n = b.shape[1]
        ops = (_operand(a), _operand(b), _operand(c)) if fn is not None else (None,)
        if None in ops or a.dtype != c.dtype or b.dtype != c.dtype or ops[2][0] != _NO_TRANS \
                or 0 in (m, n, k):
            self.fn = None
            self.views = (a, b, c)
            return
        (ta, lda), (tb, ldb), (_, ldc) = ops
        self.fn = fn
        self.head = (_ROW_MAJOR, ta, tb, m, n, k, 1.0)
        self.ptrs = (a.ctypes.data, b.ctypes.data, c.ctypes.data)
        self.lds = (lda, ldb, ldc)
        self.row_bytes = (a.strides[0], c.strides[0])  # from one row of a and c to the next
        self.views = (a, b, c)  # kept alive for the pointers

    @property
    def blas(self) -> bool:
        """Whether the product runs in BLAS (False: NumPy, with a temporary of ``c``'s
        size)."""
        return self.fn is not None

    def __call__(self, da: int, db: int, dc: int, beta: float) -> None:
        if da or db or dc:  # (offsets 0 are the views themselves)
            self._check(da, db, dc)
        if self.fn is not None:
            pa, pb, pc = self.ptrs
            lda, ldb, ldc = self.lds
            order, ta, tb, m, n, k, alpha = self.head
            if m * n * k < PRODUCT_PARTS_MIN_MACS:
                self.fn(order, ta, tb, m, n, k, alpha, pa + da, lda, pb + db, ldb, beta,
                        pc + dc, ldc)
                return
            fn, (sa, sc) = self.fn, self.row_bytes

            def work(lo: int, hi: int) -> None:
                fn(order, ta, tb, hi - lo, n, k, alpha, pa + da + lo * sa, lda, pb + db, ldb,
                   beta, pc + dc + lo * sc, ldc)

            rows_in_parts(m, m * n * k, work)
            return
        a, b, c = (_shifted(v, d) for v, d in zip(self.views, (da, db, dc)))
        if beta == 0:
            np.matmul(a, b, out=c)
        else:
            if beta != 1:
                c *= beta
            c += a @ b

    def _check(self, da: int, db: int, dc: int) -> None:
        """An IndexError unless the byte offsets keep each view inside its base array."""
        if self.bounds is None:
            self.bounds = tuple(_offset_range(v) for v in self.views)
        (alo, ahi), (blo, bhi), (clo, chi) = self.bounds
        if not (alo <= da <= ahi and blo <= db <= bhi and clo <= dc <= chi):
            raise IndexError(
                f"Gemm: byte offsets ({da}, {db}, {dc}) move the operands outside their "
                f"buffers (allowed ranges {self.bounds}); the offsets must keep each view "
                "inside the array it was made from"
            )


def _offset_range(view: np.ndarray) -> tuple[int, int]:
    """The byte offsets ``d`` (multiples of the item size) for which ``view`` moved ``d``
    bytes further into its base array stays inside it."""
    base = view
    while isinstance(base.base, np.ndarray):
        base = base.base
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    low = sum((n - 1) * s for n, s in zip(view.shape, view.strides) if s < 0 and n > 0)
    high = sum((n - 1) * s for n, s in zip(view.shape, view.strides) if s > 0 and n > 0)
    return -(start + low), base.nbytes - view.itemsize - (start + high)


def _shifted(view: np.ndarray, offset: int) -> np.ndarray:
    """The view of ``view``'s shape and strides ``offset`` bytes further into its base."""
    if offset == 0:
        return view
    base = view
    while base.base is not None:
        base = base.base
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return np.ndarray(view.shape, view.dtype, buffer=base, offset=start + offset,
                      strides=view.strides)
