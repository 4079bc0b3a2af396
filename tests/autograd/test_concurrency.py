"""Threads and fork: backward on separate graphs at once, and in a forked child."""

import multiprocessing as mp
import sys
import threading

import numpy as np
import pytest

import memgrad as mg


def _grads(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = mg.tensor(rng.standard_normal((8, 5)), requires_grad=True)
    w = mg.tensor(rng.standard_normal((5, 3)), requires_grad=True)
    idx = mg.tensor([0, 2, 2, 7])
    y = ((x @ w).tanh()[idx] ** 2).sum()
    y.backward()
    return x.grad.numpy().copy(), w.grad.numpy().copy()


def _reference(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 5))
    w = rng.standard_normal((5, 3))
    t = np.tanh(x @ w)
    g_t = np.zeros_like(t)
    for i in [0, 2, 2, 7]:
        g_t[i] += 2 * t[i]
    g_h = g_t * (1 - t**2)
    return g_h @ w.T, x.T @ g_h


def test_threads_run_backward_on_separate_graphs():
    results = {}
    errors = []

    def worker(seed):
        try:
            for _ in range(20):
                results[seed] = _grads(seed)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for seed, (gx, gw) in results.items():
        rx, rw = _reference(seed)
        np.testing.assert_allclose(gx, rx, rtol=1e-12)
        np.testing.assert_allclose(gw, rw, rtol=1e-12)


def _child(queue):
    queue.put(_grads(3))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_backward_in_forked_child_after_parent_ran_backward():
    parent = _grads(3)  # the parent has run backward (and compiled the scatter kernel)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    child = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    np.testing.assert_array_equal(child[0], parent[0])
    np.testing.assert_array_equal(child[1], parent[1])
    rx, rw = _reference(3)
    np.testing.assert_allclose(child[0], rx, rtol=1e-12)


def _compile_in_child(queue):
    from memgrad._kernels.scatter import index_add_rows

    out = index_add_rows(
        np.zeros((2, 1), np.float32), np.array([1, 1], np.int32), np.ones((2, 1), np.float32)
    )
    queue.put(out.tolist())


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_fork_while_another_thread_holds_numba_compiler_lock():
    from numba.core.compiler_lock import global_compiler_lock

    held = threading.Event()
    done = threading.Event()

    def holder():
        with global_compiler_lock:
            held.set()
            done.wait(30)

    th = threading.Thread(target=holder)
    th.start()
    held.wait(10)
    try:
        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        proc = ctx.Process(target=_compile_in_child, args=(queue,))
        proc.start()
        proc.join(timeout=120)
        if proc.is_alive():  # pragma: no cover - the failure this test guards against
            proc.kill()
            pytest.fail("the forked child hung compiling a kernel")
        assert queue.get(timeout=5) == [[0.0], [2.0]]
    finally:
        done.set()
        th.join()


def _kernel_grads(seed: int) -> np.ndarray:
    from memgrad.nn import functional as F

    rng = np.random.default_rng(seed)
    x = mg.tensor(rng.standard_normal((6, 8)).astype(np.float32), requires_grad=True)
    h = F.layer_norm(x, (8,))
    h = F.gelu(h) + F.gelu(h, approximate="tanh") + h.sigmoid()
    loss = F.cross_entropy(F.softmax(h, dim=1), mg.tensor([0, 1, 2, 3, 4, 5]))
    loss.backward()
    return x.grad.numpy().copy()


def _kernel_child(queue):
    queue.put(_kernel_grads(5))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_numba_kernels_work_in_a_forked_child_after_the_parent_used_them():
    parent = _kernel_grads(5)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_kernel_child, args=(queue,))
    proc.start()
    proc.join(timeout=120)
    if proc.is_alive():  # pragma: no cover - the failure this test guards against
        proc.kill()
    assert proc.exitcode == 0, f"the child exited with {proc.exitcode}"
    np.testing.assert_array_equal(queue.get(timeout=5), parent)


# ---------------------------------------------------------------------------- shared leaves


def _shared_leaf_trial(use_linear: bool, n_threads: int = 8, size: int = 1024) -> bool:
    """``n_threads`` backward passes at once into one leaf ``W``; whether ``W.grad`` is the
    sum of the single-threaded gradients. A hook on each thread's output holds every thread
    at a barrier until all have reached it, so that they accumulate at the same time."""
    rng = np.random.default_rng(0)
    w = mg.tensor(rng.standard_normal((size, size)).astype(np.float32), requires_grad=True)
    if use_linear:  # an existing .grad: linear adds its weight gradient into it in place
        w.grad = mg.zeros(size, size)
    xs = [mg.tensor(rng.standard_normal((8, size)).astype(np.float32)) for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads, timeout=60)
    errors = []

    def wait(g):
        barrier.wait()

    def work(x):
        try:
            y = mg.nn.functional.linear(x, w) if use_linear else x @ w
            out = y * 1.0
            out.register_hook(wait)
            out.sum().backward()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    sums = sum(x.numpy().astype(np.float64).sum(0) for x in xs)
    want = np.broadcast_to(sums[None, :] if use_linear else sums[:, None], (size, size))
    return np.allclose(w.grad.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("use_linear", [False, True], ids=["accumulate-grad", "linear-sink"])
def test_concurrent_backward_into_a_shared_leaf_loses_no_update(use_linear):
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        wrong = sum(not _shared_leaf_trial(use_linear) for _ in range(8))
    finally:
        sys.setswitchinterval(interval)
    assert wrong == 0, f"{wrong} of 8 trials lost an update"


def test_accumulation_waits_for_the_accumulator_lock():
    w = mg.ones(3, requires_grad=True)
    y = (w * 2).sum()
    acc = y.grad_fn.next_functions[0][0].next_functions[0][0]
    assert isinstance(acc, mg.autograd.graph.AccumulateGrad)
    done = threading.Event()
    with acc.lock:
        t = threading.Thread(target=lambda: (y.backward(), done.set()))
        t.start()
        assert not done.wait(0.2)  # the update of w.grad is held back
        assert w.grad is None
    t.join(timeout=10)
    assert done.is_set()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])


def test_threads_get_one_accumulator_per_leaf():
    w = mg.ones(2, requires_grad=True)
    barrier = threading.Barrier(8)
    got = []

    def use():
        barrier.wait()
        got.append((w * 1).grad_fn.next_functions[0][0])

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(a) for a in got}) == 1
