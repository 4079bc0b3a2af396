"""One set of threads for OpenBLAS's jobs and memgrad's parts (NOTE [ One set of threads ] in
memgrad/ops/parts.py): products through the hand-off equal OpenBLAS's own threads' bit for
bit, with helpers, without them and with more jobs than helpers; the helpers' protocol
(parts, sleeping, stopping); a forked child; the switch that turns it off. Batches of
products as jobs on the helpers (NOTE [ Products as jobs ]) against their masked NumPy
reference, split or whole, and attention's values and gradients through them."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from memgrad.ops import parts as parts_mod
from tests.helpers.forked import in_forked_child
from tests.helpers.parts import stop_helpers

if parts_mod._handoff() is None:  # pragma: no cover - another platform, or no OpenBLAS
    pytest.skip("the hand-off needs Linux, numba's compiler and NumPy's OpenBLAS with "
                "openblas_set_threads_callback_function", allow_module_level=True)

from memgrad._kernels import activation, handoff, jobs  # noqa: E402


@contextlib.contextmanager
def _blas(threads):
    """NumPy's OpenBLAS at ``threads`` threads for the block."""
    set_local = parts_mod._set_local()
    before = set_local(threads)
    try:
        yield
    finally:
        set_local(before)


def _products(dtype):
    rng = np.random.default_rng(0)
    shapes = [(1024, 64, 256), (256, 1024, 512), (300, 200, 100), (4, 5, 6)]
    return [(rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype))
            for m, k, n in shapes]


def _own_threads(pairs):
    """The products on OpenBLAS's own threads (the callback off for the call)."""
    handoff_ = parts_mod.Parts.handoff
    handoff_.set_callback(None)
    try:
        return [a @ b for a, b in pairs]
    finally:
        handoff_.set_callback(handoff_.callback.address)


@pytest.fixture
def blas_threads(monkeypatch):
    """Two BLAS threads and new helpers (as on the 2-core machines CI runs on); after the
    test, the helpers of before are OpenBLAS's again."""
    previous = parts_mod.Parts.helpers
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    with _blas(2):
        parts_mod.in_parts(4, parts_mod.PARTS_MIN_MACS, lambda lo, hi: None)  # makes them
        yield parts_mod.Parts.handoff
    stop_helpers()
    parts_mod.Parts.handoff.register(previous or [])  # (the next op in parts would, too)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_through_the_helpers_equal_openblas_own_threads(blas_threads, dtype):
    pairs = _products(dtype)
    assert blas_threads.helpers[0] >= 1
    got = [a @ b for a, b in pairs]
    for g, want in zip(got, _own_threads(pairs)):
        assert np.array_equal(g, want)


def test_more_jobs_than_helpers_run_on_threads_of_their_own(blas_threads):
    pairs = _products(np.float32)
    with _blas(4):
        want = _own_threads(pairs)
        got = [a @ b for a, b in pairs]
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_without_helpers_every_job_runs_on_a_thread_of_its_own(blas_threads):
    pairs = _products(np.float32)
    count = int(blas_threads.helpers[0])
    blas_threads.helpers[0] = 0  # as while helpers are replaced, or in a forked child
    try:
        got = [a @ b for a, b in pairs]
    finally:
        blas_threads.helpers[0] = count
    for g, w in zip(got, _own_threads(pairs)):
        assert np.array_equal(g, w)


def test_parts_run_on_the_handoff_helpers(blas_threads):
    seen = []

    def work(lo, hi):
        seen.append(threading.current_thread().name)
        return hi - lo

    with _blas(2):
        assert parts_mod.in_parts(4, parts_mod.PARTS_MIN_MACS, work) == [2, 2]
    assert any(name.startswith("memgrad-parts") for name in seen)
    assert all(isinstance(h, parts_mod._HandoffHelper) for h in parts_mod.Parts.helpers)


def test_an_idle_helper_sleeps_and_wakes_for_the_next_job(blas_threads):
    (slot,) = blas_threads.helpers[1:2]
    deadline = time.monotonic() + 30
    while blas_threads.states[slot] != handoff.SLEEP and time.monotonic() < deadline:
        time.sleep(0.01)  # it spins for SPIN_ROUNDS pauses, then sleeps on its futex
    assert blas_threads.states[slot] == handoff.SLEEP
    a, b = _products(np.float32)[0]
    assert np.array_equal(a @ b, _own_threads([(a, b)])[0])


def _loop(states, jobs, slot, returned):
    while True:
        s = handoff.serve(states, jobs, slot, 1000)
        returned.append(s)
        if s == handoff.STOP:
            return
        states[slot] = handoff.IDLE


def test_the_serve_loop_returns_parts_and_stops():
    states = np.zeros(handoff.SLOTS, np.int32)
    jobs = np.zeros((handoff.SLOTS, 4), np.int64)
    assert not handoff.post(states, 3)  # no helper serves the slot
    states[3] = handoff.IDLE
    returned: list = []
    t = threading.Thread(target=_loop, args=(states, jobs, 3, returned), daemon=True)
    t.start()
    assert handoff.post(states, 3)
    deadline = time.monotonic() + 30
    while not handoff.stop(states, 3) and time.monotonic() < deadline:
        time.sleep(0.001)  # the part must be over (the loop back in serve) to stop it
    t.join(timeout=30)
    assert not t.is_alive() and returned == [handoff.PART, handoff.STOP]
    assert not handoff.post(states, 3)  # stopped: a part is not taken


def test_a_helper_running_an_openblas_job_is_stopped_once_the_job_is_done():
    states = np.zeros(handoff.SLOTS, np.int32)
    states[2] = handoff.JOB  # another thread's job in flight
    done = threading.Timer(0.05, lambda: states.__setitem__(2, handoff.IDLE))
    done.start()
    assert handoff.stop(states, 2)  # waits for the job, not a no-op that leaves it serving
    assert states[2] == handoff.STOP
    states[2] = handoff.PART
    assert not handoff.stop(states, 2)  # a Python part: it stops itself after the part


def _child_products():
    pairs = _products(np.float32)
    with _blas(2):
        before = [a @ b for a, b in pairs]  # OpenBLAS's own threads: no helpers here yet
        parts_mod.in_parts(4, parts_mod.PARTS_MIN_MACS, lambda lo, hi: None)  # its own
        after = [a @ b for a, b in pairs]
    return [np.array_equal(x, y) for x, y in zip(before, after)], parts_mod.Parts.helpers[0].slot


def test_a_forked_child_computes_products_and_makes_its_own_helpers(blas_threads):
    pairs = _products(np.float32)
    want = _own_threads(pairs)
    same, slot = in_forked_child(_child_products)
    assert all(same)
    assert slot not in blas_threads.helpers[1:blas_threads.helpers[0] + 1]  # a new slot
    assert all(np.array_equal(a @ b, w) for (a, b), w in zip(pairs, want))


def test_the_environment_turns_the_handoff_off():
    code = ("from memgrad.ops import parts; "
            "parts.in_parts(4, parts.PARTS_MIN_MACS, lambda lo, hi: None); "
            "print(parts.Parts.handoff, [type(h).__name__ for h in parts.Parts.helpers or ()])")
    env = dict(os.environ, MEMGRAD_BLAS_HANDOFF="0", OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=300).stdout.split()
    assert out[0] == "None" and "_HandoffHelper" not in " ".join(out)


def test_a_process_that_loads_the_compiled_hand_off_runs_parts_on_threads_of_its_own(tmp_path):
    # the compiled hand-off is cached; an address it calls (a job thread's start) is an
    # argument, since a cached function keeps a global's value from the process that
    # compiled it: the second process here loads the first one's cache and runs three parts
    # with one helper, the third on a thread made for it
    code = ("import numpy as np; from memgrad.ops import parts; "
            "from memgrad._kernels import activation, handoff, jobs; "
            "parts.in_parts(4, parts.PARTS_MIN_MACS, lambda lo, hi: None); "
            "h = parts.Parts.handoff; x = np.arange(-6.0, 6.0); out = np.empty_like(x); "
            "words = jobs.run_kernel(h.states, h.jobs, h.helpers, handoff.JOB_THREAD, "
            "h.set_local_at, jobs.KERNEL_JOB, jobs.KERNEL_INDEX[activation.relu_into], "
            "x, x, out, 0.0, 0, 12, 1, 3); "
            "print(np.array_equal(out, np.maximum(x, 0)), len(set(words[:, -1].tolist())))")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", NUMBA_CACHE_DIR=str(tmp_path))
    for _ in range(2):  # the first compiles and caches, the second loads
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == ["True", "3"]


def test_the_compiled_thread_count_and_a_job_leave_the_blas_count_as_it_was(blas_threads):
    # blas_threads reads the calling thread's count in one compiled call; run_jobs sets it
    # to one for the job (a part that calls BLAS on the calling thread runs it whole, as
    # OpenBLAS runs it inside its own jobs) and back after
    set_local = parts_mod._set_local()
    x = np.arange(-8.0, 8.0)
    out = np.empty_like(x)
    for n in (1, 2, 3):
        with _blas(n):
            assert handoff.blas_threads(blas_threads.set_local_at) == n
            words = jobs.run_kernel(blas_threads.states, blas_threads.jobs, blas_threads.helpers,
                                    handoff.JOB_THREAD, blas_threads.set_local_at,
                                    jobs.KERNEL_JOB, jobs.KERNEL_INDEX[activation.relu_into],
                                    x, x, out, 0.0, 0, 16, 1, 2)
            assert words.shape == (2, jobs.JOB_WORDS)
            np.testing.assert_array_equal(out, np.maximum(x, 0))
            assert set_local(n) == n


@pytest.mark.parametrize("helper", [handoff.NONE, handoff.PART])
def test_the_callback_is_openblas_own_signature(helper):
    # the job function OpenBLAS passes: void dojob(int, void *, int); the callback must run
    # each index once with its element of the job data. A helper that is gone (NONE) or runs
    # a Python part (PART, which may wait for the GIL) is not waited for: the jobs take
    # threads of their own
    calls = []
    proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    data = (ctypes.c_int64 * 3)(10, 20, 30)

    def job(i, at, arg):
        calls.append((i, ctypes.c_int64.from_address(at).value, arg))

    fn = proto(job)
    states = np.zeros(handoff.SLOTS, np.int32)
    jobs = np.zeros((handoff.SLOTS, 4), np.int64)
    helpers = np.zeros(handoff.SLOTS + 1, np.int64)
    helpers[:2] = 1, 5  # one helper, in slot 5
    states[5] = helper
    callback = handoff.blas_callback(states, jobs, helpers)
    run = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                           ctypes.c_void_p, ctypes.c_int)(callback.address)
    run(1, ctypes.cast(fn, ctypes.c_void_p), 3, 8, ctypes.addressof(data), 7)
    assert sorted(calls) == [(0, 10, 7), (1, 20, 7), (2, 30, 7)]
    assert states[5] == helper


# ---------------------------------------------------------------- products as jobs

def _masked_reference(a, b, form, block):
    """NOTE [ Causal products ] by its masks, in float64: M * (a @ b^T), (M * a) @ b,
    (M * a)^T @ b, with M's rows i keeping the columns below (i // block + 1) * block."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    if form == "mm":
        return a @ b
    rows, cols = (a.shape[-2], b.shape[-2]) if form == "abT" else a.shape[-2:]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    mask = j < (i // block + 1) * block
    if form == "abT":
        return mask * (a @ np.swapaxes(b, -1, -2))
    if form == "ab":
        return (mask * a) @ b
    return np.swapaxes(mask * a, -1, -2) @ b


def _heads(rng, n, t, h, d, dtype):
    """(n, h, t, d) heads split from contiguous (n, t, h * d) rows, as attention makes them."""
    return rng.standard_normal((n, t, h * d)).astype(dtype).reshape(n, t, h, d).swapaxes(1, 2)


def _job_case(name, dtype):
    rng = np.random.default_rng(len(name))
    if name == "mm":
        return "mm", 1, rng.standard_normal((3, 5, 7)).astype(dtype), \
            rng.standard_normal((3, 7, 4)).astype(dtype)
    if name == "mm-4d-transposed":
        return "mm", 1, rng.standard_normal((2, 3, 5, 7)).astype(dtype), \
            np.swapaxes(rng.standard_normal((2, 3, 4, 7)).astype(dtype), -1, -2)
    if name == "abT-heads":
        return "abT", 4, _heads(rng, 3, 9, 2, 4, dtype), _heads(rng, 3, 9, 2, 4, dtype)
    if name == "abT-wide":
        return "abT", 3, rng.standard_normal((2, 4, 3)).astype(dtype), \
            rng.standard_normal((2, 10, 3)).astype(dtype)
    if name == "ab-heads":
        return "ab", 4, rng.standard_normal((3, 2, 9, 9)).astype(dtype), \
            _heads(rng, 3, 9, 2, 4, dtype)
    if name == "aTb-heads":
        return "aTb", 4, rng.standard_normal((3, 2, 9, 9)).astype(dtype), \
            _heads(rng, 3, 9, 2, 4, dtype)
    # more columns than rows: the column blocks past the rows are zero
    return "aTb", 2, rng.standard_normal((2, 5, 11)).astype(dtype), \
        rng.standard_normal((2, 5, 3)).astype(dtype)


JOB_CASES = ["mm", "mm-4d-transposed", "abT-heads", "abT-wide", "ab-heads", "aTb-heads",
             "aTb-wide"]


def _job_out(form, a, b):
    from memgrad.ops.nn import _causal_shape, _like_heads

    shape = a.shape[:-2] + (a.shape[-2], b.shape[-1]) if form == "mm" else \
        _causal_shape(a, b, form)
    return _like_heads(b, shape, a.dtype) if form in ("ab", "aTb") else np.empty(shape, a.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", JOB_CASES)
def test_products_as_jobs_equal_their_masked_reference(blas_threads, name, dtype):
    form, block, a, b = _job_case(name, dtype)
    out = _job_out(form, a, b)
    assert parts_mod.products_in_parts(a, b, out, form, block, 1 << 62)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(out, _masked_reference(a, b, form, block), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", JOB_CASES)
def test_products_as_jobs_do_not_depend_on_the_split_and_use_both_threads(blas_threads, name):
    form, block, a, b = _job_case(name, np.float32)
    batch = int(np.prod(a.shape[:-2]))
    outs, threads = [], []
    for k in (1, 2, 3):  # three parts: one more than there are helpers and callers
        out = _job_out(form, a, b)
        row = parts_mod.product_words(a, b, out, form, block)
        words = handoff.product_parts(row, k, batch)
        handoff.run_jobs(blas_threads.states, blas_threads.jobs, blas_threads.helpers,
                         handoff.JOB_THREAD, blas_threads.set_local_at, handoff.PRODUCTS_JOB,
                         words)
        outs.append(out)
        threads.append(set(words[:, handoff.W_THREAD].tolist()))
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    assert len(threads[1]) == 2 and len(threads[2]) == 3 and 0 not in threads[2]


def test_products_as_jobs_decline_what_they_cannot_run(blas_threads):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 6, 5)), rng.standard_normal((4, 5, 3))
    out = np.full((4, 6, 3), 7.0)
    run = parts_mod.products_in_parts
    big = 1 << 62
    assert not run(a, b, out, "mm", 1, 0)  # too small
    assert not run(rng.standard_normal((4, 12, 10))[:, ::2, ::2], b, out, "mm", 1, big)
    assert not run(a.astype(np.float32), b, out, "mm", 1, big)  # mixed dtypes
    assert not run(a.astype(np.int64), b.astype(np.int64), out.astype(np.int64), "mm", 1, big)
    assert not run(a[None, None], b[None, None], out[None, None], "mm", 1, big)  # 5-D
    assert not run(a, b, np.full((4, 3, 6), 7.0).swapaxes(-1, -2), "mm", 1, big)  # out by columns
    assert not run(a, b, out, "abT", 1, big)  # the shapes do not fit the form
    assert not run(a, b, out, "ba", 1, big)
    square = rng.standard_normal((4, 5, 5))
    assert not run(square, square, square, "mm", 1, big)  # out is an operand
    with _blas(1):
        assert not run(a, b, out, "mm", 1, big)  # one BLAS thread: NumPy's own path
    assert np.all(out == 7.0)
    assert run(a, b, out, "mm", 1, big)
    np.testing.assert_allclose(out, a @ b, rtol=1e-13, atol=1e-13)


def test_products_of_one_layout_use_each_call_s_own_arrays(blas_threads):
    # the words of a layout are made once and kept (product_words): a second call with other
    # arrays of that layout writes into its own output, and an output that overlaps an
    # operand is still declined
    rng = np.random.default_rng(4)
    big = 1 << 62
    for _ in range(2):
        a, b = rng.standard_normal((4, 6, 5)), rng.standard_normal((4, 5, 6))
        out = np.full((4, 6, 6), 7.0)
        assert parts_mod.products_in_parts(a, b, out, "mm", 1, big)
        np.testing.assert_allclose(out, a @ b, rtol=1e-13, atol=1e-13)
    shared = rng.standard_normal((4, 6, 6))
    before = shared.copy()
    assert not parts_mod.products_in_parts(a, shared[:, :5], shared, "mm", 1, big)
    np.testing.assert_array_equal(shared, before)


def test_addresses_are_the_arrays_own():
    a, b = np.ones(3, np.float32), np.zeros((2, 4))
    assert handoff.addresses(a, b, b[1]) == (a.ctypes.data, b.ctypes.data, b[1].ctypes.data)


def _without_and_with_jobs(run, monkeypatch):
    """``run()`` with products as jobs off, then on (every size) with ``products_in_parts``
    watched: the two results and whether each call ran as jobs."""
    monkeypatch.setattr(parts_mod, "JOB_PARTS_MIN_MACS", 1 << 62)
    want = run()
    monkeypatch.setattr(parts_mod, "JOB_PARTS_MIN_MACS", 0)
    calls = []
    real = parts_mod.products_in_parts
    monkeypatch.setattr(parts_mod, "products_in_parts",
                        lambda *args: calls.append(real(*args)) or calls[-1])
    return want, run(), calls


@pytest.mark.parametrize("causal", [True, False])
def test_attention_through_the_jobs_has_numpy_values_and_gradients(blas_threads, monkeypatch,
                                                                   causal):
    import memgrad as mg

    rng = np.random.default_rng(5)
    q, k, v = (_heads(rng, 2, 9, 2, 3, np.float64) for _ in range(3))

    def run():
        ts = [mg.tensor(x, requires_grad=True) for x in (q, k, v)]
        out = mg.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal)
        (out * mg.tensor(np.cos(out.numpy()))).sum().backward()
        return [out.numpy()] + [t.grad.numpy() for t in ts]

    want, got, calls = _without_and_with_jobs(run, monkeypatch)
    assert calls and all(calls)  # every product ran as jobs
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def _child_jobs(name):
    form, block, a, b = _job_case(name, np.float64)
    out = _job_out(form, a, b)
    with _blas(2):
        ran = parts_mod.products_in_parts(a, b, out, form, block, 1 << 62)
    return ran, out


def test_a_forked_child_runs_products_as_jobs_on_helpers_of_its_own(blas_threads):
    form, block, a, b = _job_case("ab-heads", np.float64)
    want = _job_out(form, a, b)
    assert parts_mod.products_in_parts(a, b, want, form, block, 1 << 62)
    ran, got = in_forked_child(_child_jobs, "ab-heads")
    assert ran and np.array_equal(got, want)


def test_products_as_jobs_take_reversed_and_broadcast_batches(blas_threads):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4, 3, 6, 5))[::-1, ::-1]  # negative batch strides
    b = np.broadcast_to(rng.standard_normal((1, 3, 5, 7)), (4, 3, 5, 7))  # batch stride 0
    out = np.empty((4, 3, 6, 7))
    assert parts_mod.products_in_parts(a, b, out, "mm", 1, 1 << 62)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-13, atol=1e-13)
    causal = np.empty((4, 3, 6, 6))
    assert parts_mod.products_in_parts(a, a.copy(), causal, "abT", 2, 1 << 62)
    np.testing.assert_allclose(causal, _masked_reference(a, a, "abT", 2), rtol=1e-13,
                               atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_self_attention_through_jobs_equals_the_numpy_path(blas_threads, monkeypatch, dtype):
    from memgrad.ops import nn as nn_ops
    from memgrad.ops.nn import self_attention, self_attention_backward

    # its separate products (not the one job per part of NOTE [ Fused self-attention as jobs ])
    monkeypatch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 1 << 62)
    rng = np.random.default_rng(5)
    qkv = rng.standard_normal((6, 40, 3 * 48)).astype(dtype)
    g = rng.standard_normal((6, 40, 48)).astype(dtype)

    def run():
        return [f(*args, heads=3, causal=causal, scale=0.2)
                for causal in (True, False)
                for f, args in ((self_attention, (qkv,)), (self_attention_backward, (g, qkv)))]

    want, got, calls = _without_and_with_jobs(run, monkeypatch)
    assert len(calls) == 2 * (2 + 5) and all(calls)  # every product ran as jobs
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


def test_large_products_run_whole_on_openblas_jobs_through_the_helpers(blas_threads,
                                                                       monkeypatch):
    # NOTE [ Products in parts of their rows ]: with the hand-off, no row parts
    monkeypatch.setattr(parts_mod, "PRODUCT_PARTS_MIN_MACS", 0)
    seen = []
    parts_mod.rows_in_parts(40, 1 << 30, lambda lo, hi: seen.append((lo, hi)))
    assert seen == [(0, 40)]
    split = []
    real = parts_mod.in_parts
    monkeypatch.setattr(parts_mod, "in_parts", lambda *a: split.append(a) or real(*a))
    rng = np.random.default_rng(6)
    a = rng.standard_normal((512, 256)).astype(np.float32)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    assert np.array_equal(parts_mod.rows_product(a, w.T), np.matmul(a, w.T))
    out = np.empty((512, 128), np.float32)
    out[...] = b
    parts_mod.Gemm(a, w.T, out)(0, 0, 0, 1.0)
    np.testing.assert_allclose(out, a.astype(np.float64) @ w.T.astype(np.float64) + b,
                               rtol=1e-4, atol=1e-4)
    assert not split
    assert blas_threads.helpers[0] >= 1  # OpenBLAS's jobs had the helpers to go to


# ------------------------------------------------------------------------------- addmm as jobs


def _addmm_case(dtype, layout, rows, cols, rng):
    """(x, wt, v) of ``parts.addmm`` with 64 inputs in one of the layouts BLAS takes as they
    lie."""
    x = rng.standard_normal((rows, 64)).astype(dtype)
    w = rng.standard_normal((cols, 64)).astype(dtype)
    v = rng.standard_normal(cols).astype(dtype)
    if layout == "w.T":  # a linear layer's weight, transposed
        return x, w.T, v
    if layout == "C":
        return x, np.ascontiguousarray(w.T), v
    if layout == "x.T":
        return np.ascontiguousarray(x.T).T, w.T, v
    wide = np.zeros((rows, 80), dtype)  # rows 80 apart: a leading dimension of 80
    wide[:, :64] = x
    return wide[:, :64], w.T, v


@pytest.mark.parametrize("layout", ["w.T", "C", "x.T", "strided rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_addmm_as_jobs_equals_one_compiled_call(blas_threads, monkeypatch, dtype, layout):
    # from ADDMM_JOB_MIN_MACS (2^23: 512 x 64 x 256) parts of the rows on both threads, each
    # the bias and one single-threaded gemm, give the whole call's values bit for bit; an
    # output of fewer rows than columns, or a product below the threshold, is one call
    from memgrad._kernels import handoff as kernels

    assert parts_mod.ADDMM_JOB_MIN_MACS == 512 * 64 * 256
    rng = np.random.default_rng(12)
    words = []
    real = kernels.run_addmm
    monkeypatch.setattr(kernels, "run_addmm", lambda *args: words.append(real(*args)) or words[-1])
    for rows, cols, jobs_run in ((512, 256, 1), (520, 520, 1), (256, 512, 0), (511, 256, 0)):
        x, wt, v = _addmm_case(dtype, layout, rows, cols, rng)
        got = parts_mod.addmm(x, wt, v)
        assert len(words) == jobs_run
        if jobs_run:
            threads = words.pop()[:, kernels.A_THREAD]
            assert len(threads) == 2 and len(set(threads.tolist())) == 2 and 0 not in threads
        with monkeypatch.context() as patch:
            patch.setattr(parts_mod, "ADDMM_JOB_MIN_MACS", 1 << 62)
            want = parts_mod.addmm(x, wt, v)
        assert not words
        np.testing.assert_array_equal(got, want)
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, x.astype(np.float64) @ wt.astype(np.float64) + v,
                                   rtol=tol, atol=tol)


def test_addmm_parts_checks_shapes_and_row_bounds():
    from memgrad._kernels import handoff as kernels

    x, wt, v = (np.ones(s, np.float32) for s in ((6, 3), (3, 4), (4,)))
    out = np.empty((6, 4), np.float32)
    fn = parts_mod.gemm_address(x.dtype)
    words = kernels.addmm_parts(x, wt, v, out, fn, 111, 3, 111, 4, np.array([0, 3, 6]))
    assert words[:, kernels.A_THREAD].tolist() == [0, 0] and words.shape[0] == 2
    for args, ends in (((x, wt, v[:3], out), [0, 6]), ((x, wt, v, out[:5]), [0, 6]),
                       ((x, wt, v, out), [0, 7]), ((x, wt, v, out), [4, 2, 6])):
        with pytest.raises(ValueError, match="addmm_parts: "):
            kernels.addmm_parts(*args, fn, 111, 3, 111, 4, np.array(ends))


# ---------------------------------------------------------------------------- kernels as jobs


def _kernel_case(kernel, dtype):
    """(inputs, keyword parameters, the one-call result) of a kernel of ``jobs.KERNELS`` on
    12 causal matrices of 8 x 8 (rows of 8 for the row kernels, 768 elements for the others)."""
    from memgrad._kernels import loss, optim, softmax

    rng = np.random.default_rng(7)
    x = (3 * rng.standard_normal((96, 8))).astype(dtype)
    x[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    g = rng.standard_normal((96, 8)).astype(dtype)
    if kernel is softmax.scaled_softmax_forward_into:
        return (x,), {"scale": 0.5, "causal": 8}, softmax.scaled_softmax_forward(x, 0.5, 8)
    if kernel is softmax.scaled_softmax_backward_into:
        y = softmax.scaled_softmax_forward(x, 0.5, 8)
        return (g, y), {"scale": 0.5}, softmax.scaled_softmax_backward(g, y, 0.5)
    rows = {softmax.softmax_forward_into: (softmax.softmax_forward, (x,)),
            softmax.log_softmax_forward_into: (softmax.log_softmax_forward, (x,)),
            softmax.softmax_backward_into: (softmax.softmax_backward,
                                            (g, softmax.softmax_forward(x))),
            softmax.log_softmax_backward_into: (softmax.log_softmax_backward,
                                                (g, softmax.log_softmax_forward(x)))}
    if kernel in rows:
        whole, inputs = rows[kernel]
        return inputs, {}, whole(*inputs)
    if kernel is loss.squared_error_grad_into:
        inputs = (x.reshape(-1), g.reshape(-1))
        return inputs, {"scale": 0.75}, loss.squared_error_grad_reference(*inputs, 0.75)
    if kernel is optim.sgd_step_into:  # in place: the output starts as x
        return (g.reshape(-1),), {"scale": 0.37, "out": x.reshape(-1)}, \
            optim.sgd_step_reference(x.reshape(-1), g.reshape(-1), 0.37)
    one = {activation.relu_into: activation.relu, activation.gelu_into: activation.gelu,
           activation.gelu_tanh_into: activation.gelu_tanh, activation.exp_into: activation.exp,
           activation.relu_backward_into: activation.relu_backward,
           activation.gelu_backward_into: activation.gelu_backward,
           activation.gelu_tanh_backward_into: activation.gelu_tanh_backward}[kernel]
    inputs = (x.reshape(-1),) if kernel in jobs.KERNELS[:4] else (g.reshape(-1), x.reshape(-1))
    return inputs, {}, one(*inputs)


def test_kernels_as_jobs_equal_one_call_whatever_the_split(blas_threads):
    for index, dtype in itertools.product(range(len(jobs.KERNELS)), (np.float32, np.float64)):
        _check_kernel_job(blas_threads, index, dtype)


def _check_kernel_job(blas_threads, index, dtype):
    """Kernel ``index`` of ``jobs.KERNELS`` as jobs in one, two and three parts."""
    kernel = jobs.KERNELS[index]
    inputs, params, want = _kernel_case(kernel, dtype)
    rows = inputs[0].shape[0] if inputs[0].ndim == 2 else inputs[0].size
    block = params.get("causal", 0) or 1
    for k in (1, 2, 3):  # three parts: one more than there are helpers and callers
        out = params["out"].copy() if "out" in params else np.full_like(want, 7)
        words = jobs.kernel_words(index, inputs[0], inputs[-1], out, params.get("scale", 0.0),
                                  params.get("causal", 0), rows // block, block, k)
        assert words.shape == (k, jobs.JOB_WORDS)
        handoff.run_jobs(blas_threads.states, blas_threads.jobs, blas_threads.helpers,
                         handoff.JOB_THREAD, blas_threads.set_local_at, jobs.KERNEL_JOB, words)
        np.testing.assert_array_equal(out, want)
        assert len(set(words[:, jobs.W_THREAD].tolist())) == k and 0 not in words[:, -1]


def _watched_kernel_jobs(monkeypatch):
    """The part counts of the kernel jobs run from now on (``jobs.run_kernel``'s calls that
    ran)."""
    from memgrad._kernels import jobs

    ran = []
    real = jobs.run_kernel

    def watched(*args):
        words = real(*args)
        if len(words):
            ran.append(args[-1])
        return words

    monkeypatch.setattr(jobs, "run_kernel", watched)
    return ran


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_a_gelu_of_the_jobs_threshold_runs_as_jobs_and_a_smaller_one_whole(blas_threads,
                                                                          monkeypatch,
                                                                          approximate):
    # 65,536 float32 elements at 64 multiply-adds each: KERNEL_JOB_MIN_MACS, nanoGPT's
    # smallest MLP; half of them run in one call on the calling thread
    from memgrad.ops import nn as nn_ops

    assert 65536 * nn_ops._GELU_COST == parts_mod.KERNEL_JOB_MIN_MACS
    ran = _watched_kernel_jobs(monkeypatch)
    rng = np.random.default_rng(9)
    one = activation.gelu_tanh if approximate == "tanh" else activation.gelu
    for n, jobs_run in ((65536, [2]), (32768, [])):
        x = rng.standard_normal((8, n // 8)).astype(np.float32)
        got = nn_ops._gelu.forward(x, approximate=approximate)
        np.testing.assert_array_equal(got, one(x.reshape(-1)).reshape(x.shape))
        assert ran == jobs_run
        ran.clear()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_sgd_step_of_the_jobs_threshold_runs_as_jobs_and_a_smaller_one_whole(blas_threads,
                                                                               monkeypatch,
                                                                               dtype):
    # 104,858 elements at 40 multiply-adds each reach KERNEL_JOB_MIN_MACS; the step in place
    # in two parts gives NumPy's two ufuncs' bits
    import memgrad as mg
    from memgrad import optim
    from memgrad.optim import sgd

    assert -(-parts_mod.KERNEL_JOB_MIN_MACS // sgd._STEP_COST) == 104858
    ran = _watched_kernel_jobs(monkeypatch)
    rng = np.random.default_rng(10)
    for n, jobs_run in ((104858, [2]), (104857, [])):
        p0, g = (rng.standard_normal(n).astype(dtype) for _ in range(2))
        w = mg.tensor(p0.copy(), requires_grad=True)
        w.grad = mg.tensor(g)
        optim.SGD([w], lr=0.37).step()
        np.testing.assert_array_equal(w.numpy(), np.subtract(p0, np.multiply(g, 0.37,
                                                                              dtype=dtype)))
        assert ran == jobs_run
        ran.clear()


def test_kernels_as_jobs_decline_what_the_job_cannot_take(blas_threads, monkeypatch):
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    monkeypatch.setattr(parts_mod, "KERNEL_JOB_MIN_MACS", 0)
    rng = np.random.default_rng(8)
    g, y = rng.standard_normal((2, 64)), rng.standard_normal(64)
    out = np.full(64, 7.0)
    run = parts_mod.kernel_as_jobs
    relu_b = activation.relu_backward_into
    big = 1 << 62
    assert not run(relu_b, 64, 1, -1, (g[0], y), out)  # too small
    assert not run(relu_b, 64, 1, big, (g[0], y), out[:32])  # sizes differ
    assert not run(relu_b, 32, 1, big, (g[:, ::2][0], y[::2]), out[::2])  # strided
    assert not run(relu_b, 64, 1, big, (g[0].astype(np.float32), y), out)  # mixed dtypes
    assert not run(relu_b, 64, 1, big, (g[0].astype(np.float16), y.astype(np.float16)),
                   out.astype(np.float16))
    buf = np.concatenate([g[0], g[1]])
    assert not run(relu_b, 64, 1, big, (buf[:64], y), buf[8:72])  # out overlaps an input
    assert not run(activation.relu, 64, 1, big, (y,), out)  # not a job's kernel
    assert not run(relu_b, 64, 1, big, (list(g[0]), y), out)  # not an array
    assert not run(relu_b, 64, 1, big, (g[0], y), list(out))
    frozen = out.copy()
    frozen.flags.writeable = False
    assert not run(relu_b, 64, 1, big, (g[0], y), frozen)
    with _blas(1):
        assert not run(relu_b, 64, 1, big, (g[0], y), out)  # one BLAS thread
    assert np.all(out == 7.0)
    assert run(relu_b, 64, 1, big, (g[0], y), out)
    np.testing.assert_array_equal(out, g[0] * (y > 0))
    before = y.copy()
    assert run(activation.relu_into, 64, 1, big, (y,), y)  # in place
    np.testing.assert_array_equal(y, np.maximum(before, 0))


def _watched_batch_jobs(monkeypatch, module):
    """``module.batch_as_jobs`` replaced by one that records what each call returned: the
    list it appends to."""
    calls = []
    ran = module.batch_as_jobs
    monkeypatch.setattr(module, "batch_as_jobs",
                        lambda *args, **kw: calls.append(ran(*args, **kw)) or calls[-1])
    return calls


# -------------------------------------------------------------------- Winograd convolution as jobs

# (N, C, CO, H, W, padding): odd and even output sizes, more channels out than in and fewer
_WINOGRAD_CASES = [(3, 5, 4, 7, 9, (1, 1)), (4, 3, 6, 8, 8, (0, 0)), (5, 4, 2, 6, 5, (1, 0))]


def _winograd_both_ways(monkeypatch, run):
    """``run()`` with the Winograd jobs off, then on (every size) with ``batch_as_jobs``
    watched: the two results and whether each call ran as jobs."""
    from memgrad.ops import conv as conv_ops

    monkeypatch.setattr(conv_ops, "_WINOGRAD_CHANNELS", ((1, 1 << 30),) * 2)
    monkeypatch.setattr(conv_ops, "_WINOGRAD_MIN_TILES", (1, 1))
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    real = conv_ops._winograd_as_jobs
    monkeypatch.setattr(conv_ops, "_winograd_as_jobs", lambda *args: None)
    want = run()
    monkeypatch.setattr(conv_ops, "_winograd_as_jobs", real)
    calls = _watched_batch_jobs(monkeypatch, conv_ops)
    return want, run(), calls


@pytest.mark.parametrize("threads", [2, 3])  # three parts: one more than there are helpers
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_winograd_as_jobs_equals_its_python_parts_bit_for_bit(blas_threads, monkeypatch, dtype,
                                                              threads):
    from memgrad.ops import conv as conv_ops

    rng = np.random.default_rng(10)

    def run():
        got = []
        for n, c, co, h, w, pad in _WINOGRAD_CASES:
            x = rng.standard_normal((n, c, h, w)).astype(dtype)
            weight = rng.standard_normal((co, c, 3, 3)).astype(dtype)
            bias = rng.standard_normal(co).astype(dtype)
            g = rng.standard_normal((n, co, h + 2 * pad[0] - 2, w + 2 * pad[1] - 2)).astype(dtype)
            sums = np.zeros(co)
            got += [conv_ops._forward_winograd(x, weight, bias, pad),
                    conv_ops._forward_winograd(x, weight, None, pad),
                    conv_ops._weight_grad_winograd(x, g, weight.shape, pad, sums), sums,
                    conv_ops._weight_grad_winograd(x, g, weight.shape, pad, np.zeros(0))]
        rng.bit_generator.state = np.random.default_rng(10).bit_generator.state
        return got

    with _blas(threads):
        want, got, calls = _winograd_both_ways(monkeypatch, run)
    assert len(calls) == 4 * len(_WINOGRAD_CASES) and all(calls)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_convolution_through_the_winograd_jobs_has_the_python_parts_values_and_gradients(
        blas_threads, monkeypatch):
    import memgrad as mg

    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((4, 6, 10, 10)), rng.standard_normal((5, 6, 3, 3))
    b, g = rng.standard_normal(5), rng.standard_normal((4, 5, 10, 10))

    def run():
        ts = [mg.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = mg.nn.functional.conv2d(*ts, padding=1)
        out.backward(mg.tensor(g))
        return [out.numpy()] + [t.grad.numpy() for t in ts]

    want, got, calls = _winograd_both_ways(monkeypatch, run)
    assert calls == [True] * 3  # the forward, the input gradient, the weight gradient
    for a, b_ in zip(got, want):
        assert np.array_equal(a, b_)


def test_winograd_jobs_decline_what_they_cannot_take(blas_threads, monkeypatch):
    from memgrad.ops import conv as conv_ops

    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 6, 6))
    u = rng.standard_normal((16, 4, 3))
    b, out = np.zeros(4), np.full((2, 4, 6, 6), 7.0)
    run = conv_ops._winograd_as_jobs
    big = 1 << 62
    assert run(True, x, u, b, out, (1, 1), -1) is None  # too small
    assert run(True, x[:, :, :, ::2].copy(), u, b, out, (1, 1), big) is None  # out's shape
    assert run(True, x, u.astype(np.float32), b, out, (1, 1), big) is None  # mixed dtypes
    assert run(True, x.astype(np.float16), u.astype(np.float16), b.astype(np.float16),
               out.astype(np.float16), (1, 1), big) is None  # no BLAS for the dtype
    assert run(True, x, u, b, out[:, :, :, ::-1], (1, 1), big) is None  # strided out
    assert run(True, x[:, :, ::-1], u, b, out, (1, 1), big) is None  # strided x
    frozen = out.copy()
    frozen.flags.writeable = False
    assert run(True, x, u, b, frozen, (1, 1), big) is None
    g = rng.standard_normal((2, 4, 6, 6))
    assert run(False, x, g, np.zeros(3), None, (1, 1), big) is None  # sums of another size
    assert run(False, x, g, np.zeros(4, np.float32), None, (1, 1), big) is None  # not float64
    with _blas(1):
        assert run(True, x, u, b, out, (1, 1), big) is None  # one BLAS thread
    assert np.all(out == 7.0)
    assert run(True, x, u, b, out, (1, 1), big) == []
    assert not np.any(out == 7.0)
    parts = run(False, x, g, np.zeros(4), None, (1, 1), big)
    assert len(parts) == 2 and parts[0][0].shape == (16, 3, 4) and parts[0][1].shape == (4,)


# -------------------------------------------------------------------- self-attention as jobs

# (N, T, heads, D): a length that is not a multiple of the causal block, one head, one sample
_ATTENTION_CASES = [(3, 40, 2, 8), (1, 16, 3, 4), (2, 64, 4, 16), (4, 5, 1, 2)]


def _attention_both_ways(monkeypatch, run):
    """``run()`` with self-attention's separate products and softmax kernels (the products
    as jobs at every size), then as one job per part (every size) with ``batch_as_jobs``
    watched: the two results and whether each call ran as jobs."""
    from memgrad.ops import nn as nn_ops

    monkeypatch.setattr(parts_mod, "JOB_PARTS_MIN_MACS", 0)
    monkeypatch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 1 << 62)
    want = run()
    monkeypatch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 0)
    calls = _watched_batch_jobs(monkeypatch, parts_mod)
    return want, run(), calls


@pytest.mark.parametrize("threads", [2, 3])  # three parts: one more than there are helpers
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_self_attention_as_jobs_equals_its_separate_products_bit_for_bit(blas_threads,
                                                                         monkeypatch, dtype,
                                                                         threads):
    from memgrad.ops import nn as nn_ops

    def run():
        rng = np.random.default_rng(13)
        got = []
        for (n, t, heads, d), causal in itertools.product(_ATTENTION_CASES, (True, False)):
            qkv = rng.standard_normal((n, t, 3 * heads * d)).astype(dtype)
            g = rng.standard_normal((n, t, heads * d)).astype(dtype)
            args = dict(heads=heads, causal=causal, scale=0.37)
            got += [nn_ops.self_attention.forward(qkv, **args),
                    nn_ops.self_attention_backward.forward(g, qkv, **args),
                    nn_ops.self_attention_backward.forward(g.transpose(1, 0, 2).copy()
                                                           .transpose(1, 0, 2), qkv, **args)]
        return got

    with _blas(threads):
        want, got, calls = _attention_both_ways(monkeypatch, run)
    # every case of two or more (sample, head) pairs ran as jobs; one pair cannot be split
    assert calls == [n * h >= 2 for (n, _, h, _), _ in
                     itertools.product(_ATTENTION_CASES, (True, False)) for _ in range(3)]
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_self_attention_jobs_of_one_layout_point_at_each_calls_own_arrays(blas_threads,
                                                                          monkeypatch):
    # NOTE [ Attention's job rows by layout ]: the rows made for the first call of a layout
    # serve later calls of the same layout with other arrays (here views at other offsets of
    # larger buffers, with the same strides, and fresh arrays), which must each get their
    # own values, bit for bit those of the separate products
    from memgrad.ops import nn as nn_ops

    monkeypatch.setattr(nn_ops, "_ATTENTION_LAYOUTS", {})
    rng = np.random.default_rng(16)
    n, t, heads, d = 3, 40, 2, 8
    args = dict(heads=heads, causal=True, scale=0.37)
    buffers = [rng.standard_normal((n + 2, t, 3 * heads * d), np.float32) for _ in range(2)]
    grads = [rng.standard_normal((n + 1, t, heads * d), np.float32) for _ in range(2)]
    cases = [(buffers[0][:n], grads[0][:n]), (buffers[0][2:], grads[0][1:]),
             (buffers[1][1:n + 1], grads[1][1:]),
             (rng.standard_normal((n, t, 3 * heads * d), np.float32),
              rng.standard_normal((n, t, heads * d), np.float32))]

    def run():
        return [f for qkv, g in cases
                for f in (nn_ops.self_attention.forward(qkv, **args),
                          nn_ops.self_attention_backward.forward(g, qkv, **args))]

    want, got, calls = _attention_both_ways(monkeypatch, run)
    assert calls == [True] * 8
    assert len(nn_ops._ATTENTION_LAYOUTS) == 2  # the forward's layout and the backward's
    for a, b in zip(got, want):
        assert np.array_equal(a, b)
    assert not np.array_equal(got[0], got[2])  # the calls read their own arrays


def test_attention_through_the_jobs_has_the_separate_values_and_gradients(blas_threads,
                                                                          monkeypatch):
    import memgrad as mg
    from tests.helpers.op_samples import _np_self_attention, _np_self_attention_backward

    rng = np.random.default_rng(14)
    qkv, g = rng.standard_normal((3, 24, 36)), rng.standard_normal((3, 24, 12))

    def run():
        x = mg.tensor(qkv, requires_grad=True)
        out = mg.ops.nn.self_attention(x, heads=3, causal=True, scale=0.4)
        out.backward(mg.tensor(g))
        return [out.numpy(), x.grad.numpy()]

    want, got, calls = _attention_both_ways(monkeypatch, run)
    assert calls == [True, True]  # the forward, the backward
    for a, b in zip(got, want):
        assert np.array_equal(a, b)
    np.testing.assert_allclose(got[0], _np_self_attention(qkv, 3, True, 0.4), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(got[1], _np_self_attention_backward(g, qkv, 3, True, 0.4),
                               rtol=1e-11, atol=1e-11)
    # and the jobs' gradient is the derivative of the jobs' forward
    small = mg.tensor(rng.standard_normal((2, 5, 12)), requires_grad=True)
    assert mg.autograd.gradcheck(
        lambda v: mg.ops.nn.self_attention(v, heads=2, causal=True, scale=0.6), (small,))


def test_self_attention_jobs_decline_what_they_cannot_take(blas_threads, monkeypatch):
    from memgrad.ops import nn as nn_ops

    monkeypatch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 0)
    rng = np.random.default_rng(15)
    qkv, g = rng.standard_normal((2, 8, 12)), rng.standard_normal((2, 8, 4))
    run = nn_ops._attention_as_jobs
    out, grad = np.full((2, 8, 4), 7.0), np.full((2, 8, 12), 7.0)
    assert not run(qkv[:1], None, out[:1], 1, True, 0.5, 2)  # one (sample, head) pair
    assert not run(qkv, np.asfortranarray(g), grad, 2, True, 0.5, 2)  # g's heads: no unit stride
    monkeypatch.setattr(nn_ops, "_ATTENTION_LAYOUTS", {})
    with _blas(1):
        assert not run(qkv, None, out, 2, True, 0.5, 2)  # one BLAS thread
    assert nn_ops._ATTENTION_LAYOUTS == {}  # and no rows made for a job that cannot run
    monkeypatch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 1 << 62)
    assert not run(qkv, None, out, 2, True, 0.5, 2)  # too small
    assert np.all(out == 7.0) and np.all(grad == 7.0)
    monkeypatch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 0)
    assert run(qkv, None, out, 2, True, 0.5, 2) and run(qkv, g, grad, 2, True, 0.5, 2)
    assert not np.any(out == 7.0) and not np.any(grad == 7.0)


# -------------------------------------------------------------------- layer norm as jobs

# (rows, D): rows that are not a multiple of the weight gradient's chunks of 64, one chunk
_NORM_CASES = [(130, 24), (192, 8), (5, 7), (64, 33)]


def _norm_ops(x, g, w, b):
    from memgrad.ops import nn as nn_ops

    args = dict(ndim=1, eps=1e-5)
    return [nn_ops._layer_norm.forward(x, w, b, **args),
            nn_ops.layer_norm_backward.forward(g, x, w, **args),
            nn_ops.layer_norm_weight_grad.forward(g, x, **args),
            nn_ops.layer_norm_grads.forward(g, x, w, **args)]


def _norm_both_ways(monkeypatch, run):
    """``run()`` with the layer norm kernels in Python parts (every size), then as jobs
    (every size) with ``batch_as_jobs`` watched: the two results and whether each call ran
    as jobs."""
    from memgrad.ops import nn as nn_ops

    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    real = nn_ops._norm_as_jobs
    monkeypatch.setattr(nn_ops, "_norm_as_jobs", lambda *args: False)
    want = run()
    monkeypatch.setattr(nn_ops, "_norm_as_jobs", real)
    monkeypatch.setattr(nn_ops, "NORM_JOB_MIN_MACS", 0)
    calls = _watched_batch_jobs(monkeypatch, parts_mod)
    return want, run(), calls


@pytest.mark.parametrize("threads", [2, 3])  # three parts: one more than there are helpers
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_as_jobs_equals_its_python_parts_bit_for_bit(blas_threads, monkeypatch,
                                                                dtype, threads):
    def run():
        rng = np.random.default_rng(16)
        got = []
        for n, d in _NORM_CASES:
            x = (rng.standard_normal((n, d)) * 3 + 100).astype(dtype)  # far from 0
            g, w, b = (rng.standard_normal(s).astype(dtype) for s in ((n, d), d, d))
            got += _norm_ops(x, g, w, b)
        return got

    with _blas(threads):
        want, got, calls = _norm_both_ways(monkeypatch, run)
    # every kernel call of two or more blocks (rows; chunks of 64 rows for the sums) ran so
    assert calls == [k >= 2 for n, _ in _NORM_CASES for k in (n, n, -(-n // 64), -(-n // 64))]
    for a, b_ in zip(got, want):
        assert a.dtype == b_.dtype and np.array_equal(a, b_)


def test_layer_norm_through_the_jobs_has_the_python_parts_values_and_gradients(blas_threads,
                                                                               monkeypatch):
    import memgrad as mg
    from memgrad._kernels import norm

    rng = np.random.default_rng(17)
    x, w, b, g = (rng.standard_normal(s) for s in ((3, 50, 16), 16, 16, (3, 50, 16)))

    def run():
        ts = [mg.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = mg.nn.functional.layer_norm(ts[0], (16,), ts[1], ts[2])
        out.backward(mg.tensor(g))
        return [out.numpy()] + [t.grad.numpy() for t in ts]

    want, got, calls = _norm_both_ways(monkeypatch, run)
    assert calls == [True, True]  # the forward, the three gradients in one op
    for a, b_ in zip(got, want):
        assert np.array_equal(a, b_)
    rows, grows = x.reshape(-1, 16), g.reshape(-1, 16)
    np.testing.assert_allclose(got[0].reshape(-1, 16),
                               norm.layer_norm_forward_reference(rows, w, b, 1e-5), rtol=1e-12,
                               atol=1e-12)
    gx, gw, gb = norm.layer_norm_grads_reference(grows, rows, w, 1e-5)
    np.testing.assert_allclose(got[1].reshape(-1, 16), gx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[2], gw, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[3], gb, rtol=1e-10, atol=1e-10)


def test_layer_norm_jobs_decline_what_they_cannot_take(blas_threads, monkeypatch):
    from memgrad.ops import nn as nn_ops

    monkeypatch.setattr(nn_ops, "NORM_JOB_MIN_MACS", 0)
    rng = np.random.default_rng(18)
    x, g = rng.standard_normal((130, 8)), rng.standard_normal((130, 8))
    w, b = rng.standard_normal(8), rng.standard_normal(8)
    out, partial = np.full((130, 8), 7.0), np.zeros((3, 2, 8))
    run = nn_ops._norm_as_jobs
    assert not run("forward", 130, 1, x[:, ::2].copy(), None, w[::2], b[::2], out, None, 1e-5)
    assert not run("forward", 130, 1, x, None, w.astype(np.float32), b, out, None, 1e-5)
    assert not run("forward", 130, 1, x.astype(np.float16), None, w.astype(np.float16),
                   b.astype(np.float16), out.astype(np.float16), None, 1e-5)  # no float16
    assert not run("forward", 130, 1, x[::-1], None, w, b, out, None, 1e-5)  # strided x
    assert not run("forward", 130, 1, x, None, w, b, x, None, 1e-5)  # out is x
    assert not run("forward", 129, 1, x, None, w, b, out, None, 1e-5)  # blocks miss a row
    assert not run("grads", 3, 64, x, g, w, None, out, np.zeros((3, 8)), 1e-5)  # partial's size
    assert not run("grads", 3, 64, x, g, w, None, out, partial.astype(np.float32), 1e-5)
    frozen = out.copy()
    frozen.flags.writeable = False
    assert not run("forward", 130, 1, x, None, w, b, frozen, None, 1e-5)
    with _blas(1):
        assert not run("forward", 130, 1, x, None, w, b, out, None, 1e-5)  # one BLAS thread
    monkeypatch.setattr(nn_ops, "NORM_JOB_MIN_MACS", 1 << 62)
    assert not run("forward", 130, 1, x, None, w, b, out, None, 1e-5)  # too small
    assert np.all(out == 7.0) and np.all(partial == 0)
    monkeypatch.setattr(nn_ops, "NORM_JOB_MIN_MACS", 0)
    assert run("forward", 130, 1, x, None, w, b, out, None, 1e-5)
    assert run("grads", 3, 64, x, g, w, None, out, partial, 1e-5)
    assert not np.any(out == 7.0) and np.any(partial != 0)
