"""Batched matrix products in parts of the batch (NOTE [ Batch parts ]): with a stand-in
BLAS thread count, each part runs on its own thread with one BLAS thread, and values and
gradients are those of NumPy's matmul. ``Gemm`` (NOTE [ Accumulating GEMM ]) against NumPy,
through OpenBLAS and without it."""

from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

import memgrad as mg
from memgrad.ops import parts as parts_mod
from tests.helpers.forked import in_forked_child
from tests.helpers.parts import stop_helpers


def _fake_blas_threads(threads, calls):
    """A stand-in for openblas_set_num_threads_local: per-thread counts, recorded."""
    counts = threading.local()

    def set_local(n):
        prev = getattr(counts, "n", threads)
        counts.n = n
        calls.append((threading.current_thread().name, n))
        return prev

    return set_local


@pytest.fixture
def two_threads(monkeypatch):
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, calls))
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    monkeypatch.setattr(parts_mod, "KERNEL_JOB_MIN_MACS", 0)
    monkeypatch.setattr(parts_mod, "PRODUCT_PARTS_MIN_MACS", 0)
    yield calls
    stop_helpers()


class _KernelParts:
    """What ``kernel_parts`` yields: ``check()`` asserts that the ops since ran in parts on
    two threads, as Python parts or as jobs (NOTE [ Kernels as jobs ])."""

    def __init__(self, calls: list, words: list) -> None:
        self.calls, self.words = calls, words

    def check(self) -> None:
        helpers = {name for name, _ in self.calls if name.startswith("memgrad-parts")}
        threads = [set(w[:, -1].tolist()) for w in self.words]
        assert helpers or any(len(t) == 2 for t in threads), "no part ran on a helper thread"


@pytest.fixture(params=["python", "jobs"])
def kernel_parts(request, monkeypatch):
    """An element-wise or row kernel in two parts: Python parts on helper threads (with a
    stand-in BLAS thread count, without the hand-off), or jobs of the hand-off on NumPy's
    OpenBLAS at two threads (NOTE [ Kernels as jobs ])."""
    calls, words = [], []
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    monkeypatch.setattr(parts_mod, "KERNEL_JOB_MIN_MACS", 0)
    if request.param == "python":
        monkeypatch.setattr(parts_mod.Parts, "helpers", None)
        monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, calls))
        monkeypatch.setattr(parts_mod.Parts, "handoff", None)
        yield _KernelParts(calls, words)
        stop_helpers()
        return
    if parts_mod._handoff() is None:  # pragma: no cover - another platform, or no OpenBLAS
        pytest.skip("kernels as jobs need the hand-off")
    from memgrad._kernels import jobs

    make = jobs.run_kernel

    def spy(*args):
        words.append(make(*args))
        return words[-1]

    monkeypatch.setattr(jobs, "run_kernel", spy)
    set_local = parts_mod._set_local()
    before = set_local(2)  # (the helpers of before, or new ones kept as an op would keep them)
    try:
        yield _KernelParts(calls, words)
    finally:
        set_local(before)


@pytest.fixture
def row_parts(two_threads, monkeypatch):
    """``two_threads`` without the hand-off: large products then run in parts of their rows
    (NOTE [ Products in parts of their rows ])."""
    monkeypatch.setattr(parts_mod.Parts, "handoff", None)
    yield two_threads


@pytest.mark.parametrize("batch", [(5,), (2, 3)])
def test_batched_matmul_in_parts_equals_numpy(two_threads, batch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(batch + (4, 3))
    b = rng.standard_normal(batch + (3, 6))
    x, y = mg.tensor(a, requires_grad=True), mg.tensor(b, requires_grad=True)
    out = x @ y
    np.testing.assert_allclose(out.numpy(), np.matmul(a, b), rtol=1e-13, atol=1e-13)
    g = rng.standard_normal(out.shape)
    out.backward(mg.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), g @ np.swapaxes(b, -1, -2), rtol=1e-13,
                               atol=1e-13)
    np.testing.assert_allclose(y.grad.numpy(), np.swapaxes(a, -1, -2) @ g, rtol=1e-13,
                               atol=1e-13)
    helpers = {name for name, _ in two_threads if name.startswith("memgrad-parts")}
    assert helpers, "no part ran on a helper thread"


def test_a_part_lets_go_of_its_work_before_it_reports_done(two_threads):
    # a helper thread keeps its last part until the next one: the work (and the arrays it
    # closes over) must already be gone from it when the op returns, or they outlive the op
    # for the memory tracker
    import weakref

    data = np.ones(1000)
    ref = weakref.ref(data)
    work = lambda lo, hi, d=data: float(d[lo:hi].sum())  # noqa: E731
    del data
    assert parts_mod.in_parts(4, parts_mod.PARTS_MIN_MACS, work) == [2.0, 2.0]
    assert any(name.startswith("memgrad-parts") for name, _ in two_threads)
    del work
    assert ref() is None


def test_an_error_in_a_part_is_raised_once_every_part_is_done(two_threads):
    def work(lo, hi):
        if lo:
            raise ValueError("part failed")
        return hi - lo

    with pytest.raises(ValueError, match="part failed"):
        parts_mod.in_parts(4, 0, work)
    helpers = parts_mod.Parts.helpers
    assert parts_mod.in_parts(6, 0, lambda lo, hi: (lo, hi)) == [(0, 3), (3, 6)]
    assert parts_mod.Parts.helpers is helpers  # the same threads, in step again


def test_an_op_inside_a_part_runs_whole(two_threads):
    inner = parts_mod.in_parts(4, 0, lambda lo, hi: parts_mod.in_parts(
        6, 0, lambda a, b: (a, b)))
    assert inner == [[(0, 6)], [(0, 6)]]


def test_an_interrupt_while_parts_run_ends_the_helpers(two_threads, monkeypatch):
    # Ctrl-C lands while the calling thread waits for a helper still running its part
    release = threading.Event()

    def work(lo, hi):
        if lo:
            release.wait(timeout=60)
        return hi - lo

    parts_mod.in_parts(2, 0, lambda lo, hi: None)  # the helpers exist
    (helper,) = parts_mod.Parts.helpers

    def interrupted():
        release.set()
        raise KeyboardInterrupt

    monkeypatch.setattr(helper, "join", interrupted)
    with pytest.raises(KeyboardInterrupt):
        parts_mod.in_parts(4, 0, work)
    assert parts_mod.Parts.helpers is None
    helper.thread.join(timeout=60)
    assert not helper.thread.is_alive()  # it finished its part, then ended
    assert parts_mod.in_parts(4, 0, lambda lo, hi: hi - lo) == [2, 2]  # new helpers


def test_transposed_operands_and_the_calling_threads_count_restored(two_threads):
    rng = np.random.default_rng(1)
    k = rng.standard_normal((2, 3, 5, 4))
    q = rng.standard_normal((2, 3, 5, 4))
    got = (mg.tensor(q) @ mg.tensor(k).mT).numpy()  # a transposed view, as attention has
    np.testing.assert_allclose(got, q @ np.swapaxes(k, -1, -2), rtol=1e-13, atol=1e-13)
    mine = [n for name, n in two_threads if name == threading.current_thread().name]
    assert mine[0] == 1 and mine[-1] == 2  # one BLAS thread during the op, two after


def test_small_or_broadcast_products_stay_on_the_calling_thread(monkeypatch):
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, calls))
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 2))
    np.testing.assert_allclose((mg.tensor(a) @ mg.tensor(b)).numpy(), a @ b, rtol=1e-13)
    small = rng.standard_normal((3, 2, 2))
    np.testing.assert_allclose((mg.tensor(small) @ mg.tensor(small)).numpy(), small @ small,
                               rtol=1e-13)
    assert calls == []


@pytest.fixture(params=["cblas", "numpy"])
def gemm_backend(request, monkeypatch):
    """Gemm through OpenBLAS's cblas_?gemm, and with that lookup failed (NumPy instead)."""
    if request.param == "numpy":
        monkeypatch.setattr(parts_mod.Parts, "gemms", {})
    else:
        parts_mod.Gemm(np.eye(1), np.eye(1), np.eye(1))  # looks the functions up
        if parts_mod.Parts.gemms.get(np.dtype(np.float64)) is None:
            pytest.skip("NumPy's BLAS is not an OpenBLAS with cblas_dgemm64_")
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_gemm_on_strided_and_transposed_views_at_offsets(gemm_backend, dtype, beta):
    rng = np.random.default_rng(4)
    base_a = rng.standard_normal((3, 5, 9)).astype(dtype)  # windows of rows, as im2row's
    base_b = rng.standard_normal((3, 6, 4)).astype(dtype)  # used transposed
    c0 = rng.standard_normal((2, 5, 6)).astype(dtype)
    c = c0.copy()
    if beta == 0:
        c[1] = np.nan  # ignored, as BLAS ignores C when beta is 0
    product = parts_mod.Gemm(base_a[0, :, :4], base_b[0].T, c[0])
    item = np.dtype(dtype).itemsize
    for i, (ai, shift, bi) in enumerate([(1, 3, 2), (2, 5, 0)]):
        product(ai * base_a.strides[0] + shift * item, bi * base_b.strides[0],
                i * c.strides[0], beta)
        want = base_a[ai, :, shift:shift + 4] @ base_b[bi].T + (beta * c0[i] if beta else 0)
        tol = 1e-5 if dtype == np.float32 else 1e-13
        np.testing.assert_allclose(c[i], want, rtol=tol, atol=tol)


def test_gemm_takes_numpy_for_other_dtypes_and_layouts():
    rng = np.random.default_rng(5)
    a16 = rng.standard_normal((3, 4)).astype(np.float16)
    b16 = rng.standard_normal((4, 2)).astype(np.float16)
    c16 = np.full((3, 2), np.nan, np.float16)
    parts_mod.Gemm(a16, b16, c16)(0, 0, 0, 0.0)
    np.testing.assert_allclose(c16, a16.astype(np.float64) @ b16, rtol=1e-2, atol=1e-2)
    a = rng.standard_normal((6, 8))
    view = a[::2, ::2]  # neither rows nor columns unit-strided
    c = np.ones((3, 3))
    parts_mod.Gemm(view[:, :3], view[:, 1:], c)(0, 0, 0, 1.0)
    np.testing.assert_allclose(c, 1 + view[:, :3] @ view[:, 1:], rtol=1e-13)


def test_gemm_refuses_offsets_that_leave_the_operands_buffers(gemm_backend):
    base_a = np.ones((3, 5, 9))
    base_b = np.ones((3, 6, 4))
    c = np.zeros((2, 5, 6))
    product = parts_mod.Gemm(base_a[0, :, :4], base_b[0].T, c[0])
    last_a = 2 * base_a.strides[0] + 5 * 8  # the last window that fits: columns 5..8
    product(last_a, 2 * base_b.strides[0], c.strides[0], 0.0)
    np.testing.assert_array_equal(c[1], np.full((5, 6), 4.0))
    for offsets in [(last_a + 8, 0, 0), (0, 3 * base_b.strides[0], 0), (0, 0, 2 * c.strides[0]),
                    (-8, 0, 0)]:
        with pytest.raises(IndexError, match="outside their buffers"):
            product(*offsets, 0.0)
    np.testing.assert_array_equal(c[0], np.zeros((5, 6)))  # nothing written


def test_strided_heads_in_parts_of_the_first_batch_dimension(two_threads):
    # (batch, heads, seq, head_dim) views of one (batch, seq, heads * head_dim) array, as
    # attention makes them: split over the batch without a copy, values as NumPy's
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 6, 2, 4))
    q = mg.tensor(a, requires_grad=True).transpose(1, 2)
    out = q @ q.mT
    want = np.swapaxes(a, 1, 2) @ np.swapaxes(np.swapaxes(a, 1, 2), -1, -2)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-13, atol=1e-13)
    helpers = {name for name, _ in two_threads if name.startswith("memgrad-parts")}
    assert helpers, "no part ran on a helper thread"


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_kernels_in_parts_equal_one_call(kernel_parts, approximate):
    from memgrad._kernels import activation

    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((5, 7))
    t = mg.tensor(x, requires_grad=True)
    y = mg.nn.functional.gelu(t, approximate=approximate)
    y.backward(mg.tensor(g.astype(np.float32)))
    tanh = approximate == "tanh"
    fwd = (activation.gelu_tanh if tanh else activation.gelu)(x.reshape(-1))
    bwd = (activation.gelu_tanh_backward if tanh else activation.gelu_backward)(
        g.astype(np.float32).reshape(-1), x.reshape(-1))
    np.testing.assert_array_equal(y.numpy().reshape(-1), fwd)
    np.testing.assert_array_equal(t.grad.numpy().reshape(-1), bwd)
    kernel_parts.check()


def test_layer_norm_in_parts_equals_one_kernel_call(two_threads):
    # parts of whole rows (forward, input gradient) and of whole 64-row chunks (the weight
    # gradient, its chunk sums added in order after): bitwise the kernels' one-call results
    from memgrad._kernels import norm

    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal((2, 100, 6)) + 1).astype(np.float32)
    g = rng.standard_normal((2, 100, 6)).astype(np.float32)
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    xt, wt, bt = (mg.tensor(a, requires_grad=True) for a in (x, w, b))
    y = mg.nn.functional.layer_norm(xt, 6, wt, bt)
    y.backward(mg.tensor(g))
    x2, g2 = x.reshape(200, 6), g.reshape(200, 6)
    np.testing.assert_array_equal(y.numpy().reshape(200, 6),
                                  norm.layer_norm_forward(x2, w, b, 1e-5))
    np.testing.assert_array_equal(xt.grad.numpy().reshape(200, 6),
                                  norm.layer_norm_backward(g2, x2, w, 1e-5))
    np.testing.assert_array_equal(wt.grad.numpy(), norm.layer_norm_weight_grad(g2, x2, 1e-5))
    np.testing.assert_array_equal(bt.grad.numpy(), norm.layer_norm_grads(g2, x2, w, 1e-5)[2])
    np.testing.assert_allclose(wt.grad.numpy(),
                               norm.layer_norm_weight_grad_reference(g2, x2, 1e-5), rtol=1e-5)
    helpers = {name for name, _ in two_threads if name.startswith("memgrad-parts")}
    assert helpers, "no part ran on a helper thread"


@pytest.mark.parametrize("causal", [False, True])
def test_attention_softmax_in_parts_of_whole_matrices(kernel_parts, causal):
    from memgrad._kernels import softmax
    from memgrad.ops.nn import _attention_softmax

    rng = np.random.default_rng(6)
    s = rng.standard_normal((3, 2, 5, 5)).astype(np.float32)
    g = rng.standard_normal((3, 2, 5, 5)).astype(np.float32)
    st = mg.tensor(s, requires_grad=True)
    y = _attention_softmax(st, scale=0.5, causal=causal)
    y.backward(mg.tensor(g))
    want = softmax.scaled_softmax_forward(s.reshape(30, 5), 0.5, 5 if causal else 0)
    np.testing.assert_array_equal(y.numpy().reshape(30, 5), want)
    np.testing.assert_array_equal(st.grad.numpy().reshape(30, 5),
                                  softmax.scaled_softmax_backward(g.reshape(30, 5), want, 0.5))
    kernel_parts.check()


@pytest.mark.parametrize("form", ["abT", "ab", "aTb"])
def test_causal_matmul_in_parts_equals_one_call(two_threads, form):
    from memgrad.ops.nn import _causal_blocks, causal_matmul

    rng = np.random.default_rng(8)
    a = rng.standard_normal((5, 2, 7, 3 if form == "abT" else 7)).astype(np.float32)
    b = rng.standard_normal((5, 2, 7, 3)).astype(np.float32)
    out = causal_matmul(mg.tensor(a), mg.tensor(b), form=form, block=3)
    whole = np.empty(out.shape, np.float32)
    _causal_blocks(a, b, whole, form, 3)  # the whole batch in one call, on this thread
    np.testing.assert_array_equal(out.numpy(), whole)
    helpers = {name for name, _ in two_threads if name.startswith("memgrad-parts")}
    assert helpers, "no part ran on a helper thread"


def test_the_gradient_of_a_transposed_right_operand_comes_in_its_own_layout():
    # scores = q @ k.mT: k's gradient is computed as (g.mT @ q).mT, so that it reaches k
    # untransposed; values as NumPy's
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 5, 3, 4)), rng.standard_normal((2, 5, 3, 4))
    g = rng.standard_normal((2, 3, 5, 5))
    q, k = mg.tensor(a, requires_grad=True), mg.tensor(b, requires_grad=True)
    (q.transpose(1, 2) @ k.transpose(1, 2).mT).backward(mg.tensor(g))
    qa, kb = np.swapaxes(a, 1, 2), np.swapaxes(b, 1, 2)
    np.testing.assert_allclose(q.grad.numpy(), np.swapaxes(g @ kb, 1, 2), rtol=1e-13)
    np.testing.assert_allclose(k.grad.numpy(), np.swapaxes(np.swapaxes(g, -1, -2) @ qa, 1, 2),
                               rtol=1e-13)
    y = mg.tensor(b[0, 0], requires_grad=True)
    (mg.tensor(a[0, 0]) @ y.mT).backward(mg.tensor(g[0, 0, :3, :3]))
    np.testing.assert_allclose(y.grad.numpy(), g[0, 0, :3, :3].T @ a[0, 0], rtol=1e-13)


def test_relu_backward_in_parts_equals_one_kernel_call(kernel_parts):
    from memgrad._kernels import activation

    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    g = rng.standard_normal((6, 5)).astype(np.float32)
    t = mg.tensor(x, requires_grad=True)
    mg.relu(t).backward(mg.tensor(g))
    np.testing.assert_array_equal(t.grad.numpy(), g * (x > 0))
    want = activation.relu_backward(g.reshape(-1), np.maximum(x, 0).reshape(-1))
    np.testing.assert_array_equal(t.grad.numpy().reshape(-1), want)
    kernel_parts.check()


def test_relu_and_relu_in_place_in_parts_equal_numpys_maximum(kernel_parts, monkeypatch):
    monkeypatch.setattr(mg.ops.elementwise, "_KERNEL_MIN", 0)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 5))
    x[0, :4] = [np.nan, -0.0, np.inf, -np.inf]
    for a in (x, x.astype(np.float32), x.T):
        want = np.maximum(a, 0)
        for got in (mg.relu(mg.tensor(a)).numpy(), mg.tensor(a.copy()).relu_().numpy()):
            assert got.dtype == a.dtype
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    kernel_parts.check()
    view = mg.tensor(x.copy())[:, 1:4]  # relu_ on a strided view: NumPy's maximum in place
    view.relu_()
    np.testing.assert_array_equal(view.numpy(), np.maximum(x[:, 1:4], 0))


def test_where_in_parts_equals_numpys_where(two_threads, monkeypatch):
    monkeypatch.setattr(mg.ops.elementwise, "_KERNEL_MIN", 0)
    rng = np.random.default_rng(10)
    x, y = rng.standard_normal((9, 7)), rng.standard_normal((9, 7))
    x[0, :3] = [np.nan, -0.0, np.inf]
    cond = rng.random((9, 7)) > 0.5
    for a, b in ((x, y), (x, 0.0), (-0.0, y.astype(np.float32))):
        got = mg.where(mg.tensor(cond), mg.tensor(a) if isinstance(a, np.ndarray) else a,
                       mg.tensor(b) if isinstance(b, np.ndarray) else b).numpy()
        want = np.where(cond, a, b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    helpers = {name for name, _ in two_threads if name.startswith("memgrad-parts")}
    assert helpers, "no part ran on a helper thread"


def test_float32_exp_in_parts_equals_one_kernel_call(kernel_parts, monkeypatch):
    from memgrad._kernels import activation

    monkeypatch.setattr(mg.ops.elementwise, "_KERNEL_MIN", 0)
    x = (4 * np.random.default_rng(12).standard_normal((9, 7))).astype(np.float32)
    np.testing.assert_array_equal(mg.tensor(x).exp().numpy(),
                                  activation.exp(x.reshape(-1)).reshape(x.shape))
    kernel_parts.check()

# ---------------------------------------------------------------------------- row parts

def test_row_parts_start_at_multiples_of_the_row_alignment(row_parts, monkeypatch):
    seen = []
    parts_mod.rows_in_parts(40, 0, lambda lo, hi: seen.append((lo, hi)))
    assert sorted(seen) == [(0, 16), (16, 40)]  # three blocks of 16 rows in two parts
    seen.clear()
    parts_mod.rows_in_parts(16, 0, lambda lo, hi: seen.append((lo, hi)))
    assert seen == [(0, 16)]  # one block: no split
    monkeypatch.setattr(parts_mod.Parts, "set_local", None)  # no per-thread count
    seen.clear()
    parts_mod.rows_in_parts(40, 0, lambda lo, hi: seen.append((lo, hi)))
    assert seen == [(0, 40)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["rows", "transposed", "strided", "batch"])
def test_products_with_a_matrix_in_parts_of_rows_equal_numpy(row_parts, dtype, layout):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 20, 7) if layout == "batch" else (60, 7)).astype(dtype)
    if layout == "transposed":  # as linear's weight gradient, g.mT @ x
        a = np.ascontiguousarray(a.T).T
    elif layout == "strided":  # rows of a wider array
        a = rng.standard_normal((60, 2, 7)).astype(dtype)[:, 1]
    b = rng.standard_normal((5, 7)).astype(dtype).T  # a transposed weight, as linear's
    x, y = mg.tensor(a, requires_grad=True), mg.tensor(b, requires_grad=True)
    out = x @ y
    np.testing.assert_array_equal(out.numpy(), np.matmul(a, b))
    g = rng.standard_normal(out.shape).astype(dtype)
    out.backward(mg.tensor(g))
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(x.grad.numpy(), g @ b.T, rtol=tol, atol=tol)
    np.testing.assert_allclose(y.grad.numpy(), (a.reshape(-1, 7).T @ g.reshape(-1, 5)),
                               rtol=tol, atol=tol)
    helpers = {name for name, _ in row_parts if name.startswith("memgrad-parts")}
    assert helpers, "no part ran on a helper thread"


def test_other_products_with_a_matrix_stay_whole(two_threads):
    rng = np.random.default_rng(10)
    ints = rng.integers(-5, 5, (40, 6))
    np.testing.assert_array_equal((mg.tensor(ints) @ mg.tensor(ints.T)).numpy(), ints @ ints.T)
    mixed = (mg.tensor(ints.astype(np.float32)) @ mg.tensor(ints.T.astype(np.float64))).numpy()
    assert mixed.dtype == np.float64
    np.testing.assert_array_equal(mixed, ints @ ints.T)
    heads = rng.standard_normal((2, 40, 3, 6)).swapaxes(1, 2)  # its rows do not flatten
    w = rng.standard_normal((6, 4))
    np.testing.assert_array_equal((mg.tensor(heads) @ mg.tensor(w)).numpy(), heads @ w)
    assert not {name for name, _ in two_threads if name.startswith("memgrad-parts")}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_in_parts_of_rows_at_offsets(row_parts, gemm_backend, dtype, beta):
    rng = np.random.default_rng(11)
    base_a = rng.standard_normal((2, 9, 40)).astype(dtype)  # used transposed: a's rows strided
    b = rng.standard_normal((6, 5)).astype(dtype)
    c0 = rng.standard_normal((2, 40, 5)).astype(dtype)
    c = c0.copy()
    if beta == 0:
        c[1] = np.nan
    product = parts_mod.Gemm(base_a[0, :6].T, b, c[0])
    product(base_a.strides[0] + 3 * base_a.strides[1], 0, c.strides[0], beta)
    want = base_a[1, 3:9].T @ b + (beta * c0[1] if beta else 0)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(c[1], want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(c[0], c0[0])  # the other block untouched
    helpers = {name for name, _ in row_parts if name.startswith("memgrad-parts")}
    assert bool(helpers) == (gemm_backend == "cblas")  # NumPy's fallback runs whole


def _addmm_operands(dtype, layout, rng):
    """(a, b, v) of ``addmm`` in one of the layouts BLAS takes as they lie: rows or columns
    unit-strided, a leading dimension longer than the matrix."""
    a = rng.standard_normal((37, 24)).astype(dtype)
    w = rng.standard_normal((19, 24)).astype(dtype)
    v = rng.standard_normal(19).astype(dtype)
    if layout == "w.T":  # a linear layer's weight, transposed: columns unit-strided
        return a, w.T, v
    if layout == "C":
        return a, np.ascontiguousarray(w.T), v
    if layout == "a.T":
        return np.ascontiguousarray(a.T).T, w.T, v
    wide = np.zeros((37, 40), dtype)  # rows 40 apart: a leading dimension of 40
    wide[:, :24] = a
    return wide[:, :24], w.T, v


@pytest.mark.parametrize("layout", ["w.T", "C", "a.T", "strided rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_addmm_is_the_product_plus_the_vector_compiled_and_through_gemm(dtype, layout,
                                                                          monkeypatch):
    rng = np.random.default_rng(13)
    a, b, v = _addmm_operands(dtype, layout, rng)
    want = a.astype(np.float64) @ b.astype(np.float64) + v
    tol = 1e-5 if dtype == np.float32 else 1e-13
    compiled = parts_mod.addmm(a, b, v)
    assert compiled.dtype == dtype and compiled.flags.c_contiguous
    np.testing.assert_allclose(compiled, want, rtol=tol, atol=tol)
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "addmm", None)  # as with NUMBA_DISABLE_JIT=1
    real_gemm = parts_mod.Gemm
    monkeypatch.setattr(parts_mod, "Gemm", lambda *arrays: calls.append(1) or real_gemm(*arrays))
    through_gemm = parts_mod.addmm(a, b, v)
    assert calls == [1]
    np.testing.assert_array_equal(through_gemm, compiled)  # the same BLAS call, bit for bit


def test_addmm_runs_compiled_and_declines_what_blas_cannot_take(monkeypatch):
    rng = np.random.default_rng(14)
    a, b, v = _addmm_operands(np.float32, "w.T", rng)
    if parts_mod._compiled_addmm() is None or parts_mod.gemm_address(a.dtype) is None:
        pytest.skip("needs numba's compiler and NumPy's OpenBLAS")
    ran = []
    real = parts_mod.Parts.addmm
    monkeypatch.setattr(parts_mod.Parts, "addmm", lambda *args: ran.append(1) or real(*args))
    parts_mod.addmm(a, b, v)
    assert ran == [1]
    strided = v.repeat(2)[::2]  # a vector that is not contiguous: NumPy fills, Gemm adds
    np.testing.assert_array_equal(parts_mod.addmm(a, b, strided), parts_mod.addmm(a, b, v))
    assert ran == [1, 1]
    assert parts_mod.addmm(a.astype(np.float16), b.astype(np.float16),
                           v.astype(np.float16)) is None
    assert parts_mod.addmm(a, b.astype(np.float64), v) is None  # dtypes differ
    assert parts_mod.addmm(a[:, :0], b[:0], v) is None  # an empty inner dimension
    assert parts_mod.addmm(a, b, v[:5]) is None  # a vector of the wrong length
    chequer = np.zeros((74, 48), np.float32)[::2, ::2]  # neither rows nor columns unit-strided
    chequer[...] = a
    assert parts_mod.addmm(chequer, b, v) is None


def test_addmm_into_checks_its_shapes():
    from memgrad._kernels.blas import addmm_into

    if parts_mod._compiled_addmm() is None:
        pytest.skip("needs numba's compiler")
    a, b, v = (np.ones(s, np.float32) for s in ((4, 3), (3, 5), (5,)))
    fn = parts_mod.gemm_address(a.dtype)
    for out, vec in ((np.empty((4, 4), np.float32), v), (np.empty((4, 5), np.float32), v[:4])):
        with pytest.raises(ValueError, match="addmm_into: expected"):
            addmm_into(a, b, vec, out, fn, 111, 3, 111, 5)


def test_fill_rows_writes_the_vector_into_every_row_and_checks_its_length():
    from memgrad._kernels.blas import fill_rows

    v = np.arange(5.0, dtype=np.float32)
    out = np.full((3, 5), 7.0, np.float32)
    fill_rows(v, out)
    np.testing.assert_array_equal(out, np.broadcast_to(v, (3, 5)))
    with pytest.raises(ValueError, match="fill_rows: "):
        fill_rows(v[:4], out)


def test_linear_in_parts_with_numpys_openblas():
    # the real per-thread count (when NumPy's OpenBLAS has it), products large enough to
    # split: values and gradients as NumPy's, and the calling thread's count restored
    set_local = parts_mod._find_set_local()
    if set_local is None:
        pytest.skip("NumPy's BLAS has no openblas_set_num_threads_local")
    before = set_local(1)
    set_local(before)
    rng = np.random.default_rng(12)
    a = rng.standard_normal((1024, 256)).astype(np.float32)  # PRODUCT_PARTS_MIN_MACS
    w = (rng.standard_normal((256, 256)) / 8).astype(np.float32)
    bias = rng.standard_normal(256).astype(np.float32)
    x, wt, bt = (mg.tensor(v, requires_grad=True) for v in (a, w, bias))
    out = mg.nn.functional.linear(x, wt, bt)
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), a64 @ w64.T + bias, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(mg.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), g @ w64, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wt.grad.numpy(), g.T.astype(np.float64) @ a64, rtol=1e-4,
                               atol=1e-3)
    assert set_local(before) == before  # the calling thread's count is as it was


def _linear_and_grad(a, w):
    x = mg.tensor(a, requires_grad=True)
    out = mg.nn.functional.linear(x, mg.tensor(w))
    out.sum().backward()
    return out.numpy(), x.grad.numpy()


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_products_in_parts_in_a_forked_child():
    """A child forked after the parent's products in parts started the helper threads makes
    its own, and its values are the parent's (NumPy's own OpenBLAS, when it has the
    per-thread count)."""
    rng = np.random.default_rng(13)
    a = rng.standard_normal((512, 128)).astype(np.float32)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    want = _linear_and_grad(a, w)
    got = in_forked_child(_linear_and_grad, a, w)
    for g, v in zip(got, want):
        np.testing.assert_array_equal(g, v)


def test_an_interrupt_while_the_pool_starts_a_thread_leaves_no_thread_behind(two_threads,
                                                                            monkeypatch):
    # Ctrl-C in Thread.start's wait for the new thread: the thread runs but the exit hook
    # that stops the pool's threads does not know it, so the pool is shut down at once (else
    # the interpreter waits for the thread at exit forever)
    started = []
    real_start = threading.Thread.start

    def start(self):
        real_start(self)
        started.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(KeyboardInterrupt):
        parts_mod.in_parts(4, 0, lambda lo, hi: hi - lo)
    monkeypatch.setattr(threading.Thread, "start", real_start)
    assert len(started) == 1 and parts_mod.Parts.helpers is None
    started[0].join(timeout=60)
    assert not started[0].is_alive()
    assert parts_mod.in_parts(4, 0, lambda lo, hi: hi - lo) == [2, 2]  # a new pool


def test_a_product_too_small_for_row_parts_runs_whole_on_blas_threads(monkeypatch):
    # below PRODUCT_PARTS_MIN_MACS: on the calling thread, the BLAS count left alone
    # (OpenBLAS's own threads); from it on, in parts (without the hand-off)
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, calls))
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    monkeypatch.setattr(parts_mod.Parts, "handoff", None)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((40, 6)), rng.standard_normal((6, 4))
    monkeypatch.setattr(parts_mod, "PRODUCT_PARTS_MIN_MACS", a.shape[0] * 6 * 4 + 1)
    np.testing.assert_array_equal(parts_mod.rows_product(a, b), np.matmul(a, b))
    x = mg.tensor(a, requires_grad=True)
    mg.nn.functional.linear(x, mg.tensor(b.T)).sum().backward()  # forward and input gradient
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((40, 4)) @ b.T)
    assert calls == []
    monkeypatch.setattr(parts_mod, "PRODUCT_PARTS_MIN_MACS", a.shape[0] * 6 * 4)
    try:
        np.testing.assert_array_equal(parts_mod.rows_product(a, b), np.matmul(a, b))
        assert {name for name, _ in calls if name.startswith("memgrad-parts")}
    finally:
        stop_helpers()
