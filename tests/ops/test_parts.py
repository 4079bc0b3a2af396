"""Batched matrix products in parts of the batch (NOTE [ Batch parts ]): with a stand-in
BLAS thread count, each part runs on its own thread with one BLAS thread, and values and
gradients are those of NumPy's matmul. ``Gemm`` (NOTE [ Accumulating GEMM ]) against NumPy,
through OpenBLAS and without it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import memgrad as mg
from memgrad.ops import parts as parts_mod


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
    monkeypatch.setattr(parts_mod.Parts, "pool", None)
    monkeypatch.setattr(parts_mod.Parts, "size", 0)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    yield calls
    if parts_mod.Parts.pool is not None:
        parts_mod.Parts.pool.shutdown()


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
