"""One set of threads for OpenBLAS's jobs and memgrad's parts (NOTE [ One set of threads ] in
memgrad/ops/parts.py): products through the hand-off equal OpenBLAS's own threads' bit for
bit, with helpers, without them and with more jobs than helpers; the helpers' protocol
(parts, sleeping, stopping); a forked child; the switch that turns it off."""

from __future__ import annotations

import contextlib
import ctypes
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

from memgrad._kernels import handoff  # noqa: E402


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
