"""conv2d and max_pool2d: values against direct NumPy sums over the window, gradients against
finite differences (first and second order), gradient routing, saved values, scratch reuse
and error messages."""

from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

import memgrad as mg
from memgrad.ops import conv as conv_ops
from memgrad.ops import parts as parts_mod
from memgrad.ops.conv import conv2d, max_pool2d
from tests.helpers.forked import in_forked_child
from tests.helpers.parts import stop_helpers


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def np_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """out[n, o, i, j] = sum over c, ki, kj of w[o, c, ki, kj] * x_pad[n, c, i*s + ki*d, ...]."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    oh, ow = _out(h, kh, sh, ph, dh), _out(wd, kw, sw, pw, dw)
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, co, oh, ow))
    og = co // groups
    for o in range(co):
        g = o // og
        for i in range(oh):
            for j in range(ow):
                win = xp[:, g * cg:(g + 1) * cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                         j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, o, i, j] = np.sum(win * w[o], axis=(1, 2, 3))
    if b is not None:
        out += b[:, None, None]
    return out


def np_max_pool2d(x, kernel, stride=None, padding=0, dilation=1):
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel), _pair(padding), _pair(dilation)
    sh, sw = _pair(kernel if stride is None else stride)
    n, c, h, w = x.shape
    oh, ow = _out(h, kh, sh, ph, dh), _out(w, kw, sw, pw, dw)
    xp = np.full((n, c, h + 2 * ph, w + 2 * pw), -np.inf)
    xp[:, :, ph:ph + h, pw:pw + w] = x
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                     j * sw:j * sw + dw * (kw - 1) + 1:dw]
            out[:, :, i, j] = win.max(axis=(2, 3))
    return out


def _distinct(rng, shape):
    """Values at least 0.05 apart in random order: no ties for max pooling."""
    n = int(np.prod(shape))
    return rng.permutation(np.arange(n) * 0.05 - 0.025 * n).reshape(shape)


CONV_CASES = [
    # x shape, w shape, stride, padding, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1, 1),
    ((1, 2, 8, 9), (3, 2, 3, 2), (2, 1), (1, 0), 1, 1),
    ((2, 2, 9, 9), (3, 2, 3, 3), 2, 2, 2, 1),
    ((1, 4, 6, 5), (6, 2, 2, 3), 1, (0, 1), (2, 1), 2),
    ((2, 3, 5, 5), (3, 1, 3, 3), 3, 1, 1, 3),
    ((1, 3, 4, 4), (2, 3, 1, 1), 1, 0, 1, 1),
    ((1, 1, 3, 3), (1, 1, 3, 3), 1, 0, 1, 1),
    ((2, 2, 6, 9), (3, 2, 2, 3), (1, 2), (2, 1), (2, 2), 1),  # row-shifted, stride 2 across
]


@pytest.fixture(autouse=True)
def _per_sample_paths(monkeypatch):
    """The tests here take the per-sample paths (columns, row-shifted, Winograd) on their
    small images, which by default take one product per chunk of samples (NOTE [ Few output
    positions ]); ``_force_forward(monkeypatch, "batched")`` takes that one."""
    monkeypatch.setattr(conv_ops, "_BATCHED_MAX_POSITIONS", 0)


def _force_forward(monkeypatch, path):
    """Make the row-shifted forward take one of its two products whatever the shapes, and
    the weight gradient transpose ``g`` or not with it (NOTE [ Row-shifted convolution ]):
    ``"stacked"`` (and transposed), ``"windows"`` (``g`` as it lies), or ``"auto"``; or
    ``"batched"``: one product per chunk of samples, for the forward and the weight
    gradient, whatever the number of output positions (NOTE [ Few output positions ])."""
    if path == "stacked":
        monkeypatch.setattr(conv_ops, "_STACKED_MAX_CO", 1 << 30)
        monkeypatch.setattr(conv_ops, "_STACKED_MIN_K", 0)
    elif path == "windows":
        monkeypatch.setattr(conv_ops, "_STACKED_MAX_CO", 0)
    elif path == "batched":
        monkeypatch.setattr(conv_ops, "_BATCHED_MAX_POSITIONS", 1 << 30)


PATHS = ["stacked", "windows"]
ALL_PATHS = PATHS + ["batched"]


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", CONV_CASES)
def test_conv2d_matches_direct_sum(monkeypatch, xs, ws, stride, padding, dilation, groups, bias,
                                   path):
    _force_forward(monkeypatch, path)
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[0])
    out = conv2d(mg.tensor(x), mg.tensor(w), mg.tensor(b) if bias else None, stride, padding,
                 dilation, groups)
    want = np_conv2d(x, w, b if bias else None, stride, padding, dilation, groups)
    assert out.shape == want.shape and out.dtype == mg.float64
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)


def test_conv2d_float32_stays_float32():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    xt, wt, bt = (mg.tensor(a, requires_grad=True) for a in (x, w, b))
    out = conv2d(xt, wt, bt, padding=1)
    assert out.dtype == mg.float32
    np.testing.assert_allclose(out.numpy(), np_conv2d(x, w, b, padding=1), rtol=1e-4, atol=1e-4)
    out.sum().backward()
    assert xt.grad.dtype == wt.grad.dtype == bt.grad.dtype == mg.float32


def test_conv2d_unbatched_and_non_contiguous_input():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 6, 3))  # (H, W, C): made (C, H, W) by a non-contiguous view
    w = rng.standard_normal((2, 3, 2, 2))
    xt = mg.tensor(x).permute(2, 0, 1)
    out = conv2d(xt, mg.tensor(w), stride=2)
    assert out.shape == (2, 2, 3)
    np.testing.assert_allclose(out.numpy(), np_conv2d(x.transpose(2, 0, 1)[None], w, stride=2)[0],
                               rtol=1e-12, atol=1e-12)


CHECK_CASES = [
    ((2, 2, 5, 5), (3, 2, 3, 3), 1, 1, 1, 1, True),
    ((1, 2, 6, 5), (2, 2, 2, 3), (2, 1), (0, 1), (1, 2), 1, True),
    ((2, 4, 4, 4), (4, 2, 3, 2), 2, 1, 1, 2, False),
    ((1, 1, 7, 7), (2, 1, 3, 3), 3, 2, 2, 1, True),  # rows the stride never reaches
    # row-shifted forward and weight gradient (NOTE [ Row-shifted convolution ]) with a
    # stride across, so the input gradient takes the columns
    ((2, 2, 5, 6), (3, 2, 3, 2), (1, 2), (1, 2), (2, 1), 1, True),
    ((1, 2, 4, 4), (2, 2, 1, 1), 1, 1, 1, 1, True),  # padding past the kernel: col2im
    ((2, 3, 6, 5), (2, 3, 2, 3), 1, (1, 0), (2, 1), 1, False),  # dilated, flipped kernel
]


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups, bias", CHECK_CASES)
def test_conv2d_gradcheck_and_gradgradcheck(monkeypatch, xs, ws, stride, padding, dilation,
                                            groups, bias, path):
    _force_forward(monkeypatch, path)
    rng = np.random.default_rng(3)
    args = [mg.tensor(rng.standard_normal(xs), requires_grad=True),
            mg.tensor(rng.standard_normal(ws), requires_grad=True)]
    if bias:
        args.append(mg.tensor(rng.standard_normal(ws[0]), requires_grad=True))

    def fn(*a):
        return conv2d(*a, stride=stride, padding=padding, dilation=dilation, groups=groups)

    assert mg.autograd.gradcheck(fn, args)
    assert mg.autograd.gradgradcheck(fn, args)


def test_conv2d_gradients_match_numpy():
    """Analytic gradients against formulas written in NumPy, on a float32 layer."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = rng.standard_normal((2, 4, 6, 5)).astype(np.float32)
    xt, wt, bt = (mg.tensor(a, requires_grad=True) for a in (x, w, np.zeros(4, np.float32)))
    conv2d(xt, wt, bt, padding=1).backward(mg.tensor(g))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    gw = np.zeros(w.shape)
    gxp = np.zeros(xp.shape)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + 6, j:j + 5]
            gw[:, :, i, j] = np.einsum("nohw,nchw->oc", g, patch)
            gxp[:, :, i:i + 6, j:j + 5] += np.einsum("nohw,oc->nchw", g, w[:, :, i, j])
    np.testing.assert_allclose(wt.grad.numpy(), gw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(xt.grad.numpy(), gxp[:, :, 1:-1, 1:-1], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(bt.grad.numpy(), g.sum(axis=(0, 2, 3)), rtol=1e-4, atol=1e-3)


def test_conv2d_batch_chunks_give_the_same_values_and_gradients(monkeypatch):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((5, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3)),
              rng.standard_normal(3)]

    def run():
        ts = [mg.tensor(a, requires_grad=True) for a in arrays]
        out = conv2d(*ts, stride=1, padding=1)
        out.backward(mg.tensor(np.cos(out.numpy())))
        return [out.numpy()] + [t.grad.numpy() for t in ts]

    whole = run()
    monkeypatch.setattr(conv_ops, "_CHUNK_BYTES", 1)  # one sample per chunk
    for got, want in zip(run(), whole):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _fake_blas_threads(threads, calls):
    """A stand-in for OpenBLAS's per-thread thread count: ``threads`` until set, recording
    each call as (thread name, value)."""
    local = threading.local()

    def set_local(value):
        calls.append((threading.current_thread().name, value))
        prev = getattr(local, "value", threads)
        local.value = value
        return prev

    return set_local


def _conv_values_and_grads(arrays, **params):
    ts = [mg.tensor(a, requires_grad=True) for a in arrays]
    out = conv2d(*ts, **params)
    out.backward(mg.tensor(np.cos(out.numpy())))
    return [out.numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("threads", [2, 3])
def test_conv2d_batch_parts_on_helper_threads_match_the_direct_sum(monkeypatch, threads):
    """With k BLAS threads the batch is split into k parts, each on its own thread with
    single-threaded BLAS (NOTE [ Batch-parallel convolution ]); values and gradients are
    those of one part and of the direct sum."""
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((7, 4, 6, 5)), rng.standard_normal((6, 2, 3, 3)),
              rng.standard_normal(6)]
    params = dict(stride=(2, 1), padding=1, groups=2)
    monkeypatch.setattr(parts_mod.Parts, "set_local", None)
    whole = _conv_values_and_grads(arrays, **params)
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(threads, calls))
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    monkeypatch.setattr(conv_ops, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    parts = _conv_values_and_grads(arrays, **params)
    for got, want in zip(parts, whole):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parts[0], np_conv2d(*arrays, **params), rtol=1e-12, atol=1e-12)
    # per op run: one BLAS thread for each part, the first on the calling thread; restored
    runs = [calls[i:i + 2 * threads] for i in range(0, len(calls), 2 * threads)]
    assert len(runs) == 3  # conv2d, its input gradient and its weight gradient
    for run in runs:
        assert sorted(v for _, v in run) == [1] * threads + [threads] * threads
        assert run[0] == (threading.current_thread().name, 1)
        assert sum(name.startswith("memgrad-parts") for name, _ in run) == 2 * (threads - 1)
    stop_helpers()


@pytest.mark.parametrize("threads,min_macs", [(1, 0), (2, 4 * 3 * 18 * 9 + 1)])
def test_conv2d_batch_parts_stay_on_the_calling_thread(monkeypatch, threads, min_macs):
    """With one BLAS thread, or fewer multiply-adds than ``PARTS_MIN_MACS``."""
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(threads, calls))
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", min_macs)
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((4, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    np.testing.assert_allclose(conv2d(mg.tensor(x), mg.tensor(w)).numpy(), np_conv2d(x, w),
                               rtol=1e-12, atol=1e-12)
    assert {name for name, _ in calls} <= {threading.current_thread().name}


def test_conv2d_saves_its_input_and_weight_not_the_columns():
    saved = []

    def pack(t):
        saved.append(t.shape)
        return t

    x = mg.randn(2, 3, 8, 8, requires_grad=True)
    w = mg.randn(4, 3, 3, 3, requires_grad=True)
    b = mg.randn(4, requires_grad=True)
    with mg.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        conv2d(x, w, b, padding=1)
    assert sorted(saved) == sorted([(2, 3, 8, 8), (4, 3, 3, 3)])


def test_conv2d_outputs_never_share_memory_with_scratch():
    rng = np.random.default_rng(6)
    x1, x2 = (mg.tensor(rng.standard_normal((2, 3, 6, 6)), requires_grad=True) for _ in "ab")
    w = mg.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    y1 = conv2d(x1, w, padding=1)
    first = y1.numpy().copy()
    y1.sum().backward()
    g1 = x1.grad.numpy().copy(), w.grad.numpy().copy()
    w.grad = None
    conv2d(x2, w, padding=1).sum().backward()  # reuses the same scratch buffers
    np.testing.assert_array_equal(y1.numpy(), first)
    np.testing.assert_array_equal(x1.grad.numpy(), g1[0])


def test_conv2d_threads_use_their_own_scratch():
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((3, 2, 9, 9)) for _ in range(4)]
    w = rng.standard_normal((3, 2, 3, 3))
    want = [np_conv2d(x, w, padding=1) for x in xs]
    got: list = [None] * 4

    def work(i):
        for _ in range(20):
            got[i] = conv2d(mg.tensor(xs[i]), mg.tensor(w), padding=1).numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, wnt in zip(got, want):
        np.testing.assert_allclose(g, wnt, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- max_pool2d


POOL_CASES = [
    # x shape, kernel, stride, padding, dilation
    ((2, 3, 6, 6), 2, None, 0, 1),
    ((1, 2, 7, 5), 3, 2, 1, 1),
    ((2, 1, 5, 7), (2, 3), (1, 2), (1, 1), 1),
    ((1, 2, 8, 8), 3, 1, 1, 2),
    ((1, 1, 5, 5), 5, 1, 2, 1),
]


@pytest.mark.parametrize("xs, kernel, stride, padding, dilation", POOL_CASES)
def test_max_pool2d_matches_numpy(xs, kernel, stride, padding, dilation):
    x = np.random.default_rng(8).standard_normal(xs)
    out = max_pool2d(mg.tensor(x), kernel, stride, padding, dilation)
    want = np_max_pool2d(x, kernel, stride, padding, dilation)
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("xs, kernel, stride, padding, dilation", POOL_CASES)
def test_max_pool2d_gradcheck_away_from_ties(xs, kernel, stride, padding, dilation):
    x = mg.tensor(_distinct(np.random.default_rng(9), xs), requires_grad=True)

    def fn(x):
        return max_pool2d(x, kernel, stride, padding, dilation)

    assert mg.autograd.gradcheck(fn, [x])
    assert mg.autograd.gradgradcheck(fn, [x])


def test_max_pool2d_routes_the_gradient_to_the_argmax():
    x = mg.tensor([[[[1.0, 9.0, 2.0],
                     [3.0, 4.0, 5.0],
                     [8.0, 0.0, 7.0]]]], requires_grad=True)
    out = max_pool2d(x, 2, stride=1)  # windows overlap: 9 is the max of two of them
    np.testing.assert_array_equal(out.numpy(), [[[[9.0, 9.0], [8.0, 7.0]]]])
    out.backward(mg.tensor([[[[1.0, 10.0], [100.0, 1000.0]]]]))
    np.testing.assert_array_equal(x.grad.numpy(), [[[[0, 11, 0], [0, 0, 0], [100, 0, 1000]]]])


def test_max_pool2d_tie_goes_to_the_first_element():
    x = mg.tensor(np.ones((1, 1, 2, 2)), requires_grad=True)
    max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[[[1, 0], [0, 0]]]])


def test_max_pool2d_double_backward_gathers_at_the_argmax():
    rng = np.random.default_rng(10)
    x = mg.tensor(_distinct(rng, (1, 2, 4, 4)), requires_grad=True)
    g = mg.tensor(rng.standard_normal((1, 2, 2, 2)), requires_grad=True)
    (gx,) = mg.autograd.grad(max_pool2d(x, 2), [x], [g], create_graph=True)
    v = rng.standard_normal(gx.shape)
    (gg,) = mg.autograd.grad((gx * mg.tensor(v)).sum(), [g])

    def windows(a):  # (1, 2, 4, 4) -> (1, 2, 2, 2, 4): the 2x2 windows, flattened
        return a.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)

    at = windows(x.numpy()).argmax(-1)
    picked = np.take_along_axis(windows(v), at[..., None], -1)[..., 0]
    np.testing.assert_array_equal(gg.numpy(), picked)


def test_max_pool2d_unbatched_float32():
    x = mg.tensor(np.arange(32, dtype=np.float32).reshape(2, 4, 4), requires_grad=True)
    out = max_pool2d(x, 2)
    assert out.shape == (2, 2, 2) and out.dtype == mg.float32
    out.sum().backward()
    assert x.grad.dtype == mg.float32 and x.grad.numpy().sum() == 8


def test_max_pool2d_saves_only_its_argmax():
    saved = []
    x = mg.randn(2, 3, 4, 4, requires_grad=True)
    with mg.autograd.graph.saved_tensors_hooks(lambda t: saved.append((t.shape, t.dtype)) or t,
                                               lambda t: t):
        max_pool2d(x, 2)
    assert saved == [((2, 3, 2, 2), mg.int64)]


def test_max_pool2d_backward_scatters_to_the_kept_argmax_without_pooling_again():
    calls = []
    prim = mg.ops.REGISTRY["max_pool2d_indices"]
    original = prim.forward

    def counting(x, **params):
        calls.append(1)
        return original(x, **params)

    x = mg.tensor(np.arange(16.0).reshape(1, 1, 4, 4), requires_grad=True)
    prim.forward = counting
    try:
        y = max_pool2d(x, 2)
        assert calls == [1]
        y.backward(mg.tensor([[[[1.0, 2.0], [3.0, 4.0]]]]))
        assert calls == [1]
    finally:
        prim.forward = original
    expected = np.zeros((4, 4))
    expected[1, 1], expected[1, 3], expected[3, 1], expected[3, 3] = 1, 2, 3, 4
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], expected)


def test_max_pool2d_argmax_changed_in_place_is_an_error():
    x = mg.randn(1, 2, 4, 4, requires_grad=True)
    y = max_pool2d(x, 2)
    argmax = y.grad_fn._saved[0]  # the argmax, kept for backward as it is (no version yet)
    argmax.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_max_pool2d_rejects_indices_that_do_not_fit():
    x = mg.randn(1, 2, 2, 2)
    with pytest.raises(IndexError, match=r"max_pool2d: an index is out of range .* 2 x 2"):
        conv_ops._max_pool2d(x, mg.tensor(np.full((1, 2, 1, 1), 4)))
    with pytest.raises(mg.ShapeError, match=r"max_pool2d: indices must be an integer array"):
        conv_ops._max_pool2d(x, mg.zeros(1, 2, 1, 1))


# ---------------------------------------------------------------------------- errors


def _conv_error(exc, match, x=(2, 3, 8, 8), w=(4, 3, 3, 3), b=None, **kw):
    with pytest.raises(exc, match=match):
        conv2d(mg.zeros(*x), mg.zeros(*w), None if b is None else mg.zeros(*b), **kw)


def test_conv2d_errors():
    _conv_error(mg.ShapeError, r"3-D \(unbatched C, H, W\) or 4-D .* got shape \(3, 8\)",
                x=(3, 8))
    _conv_error(mg.ShapeError, r"4-D weight .* got shape \(4, 3, 3\)", w=(4, 3, 3))
    _conv_error(mg.ShapeError, r"weight of shape \(4, 5, 3, 3\) with groups=1 expects an input "
                r"with 5 channels .* input of shape \(2, 3, 8, 8\) has 3", w=(4, 5, 3, 3))
    _conv_error(mg.ShapeError, r"kernel \(3, 3\) .* spans \(5, 5\), larger than the padded "
                r"input \(4, 4\)", x=(1, 3, 2, 2), dilation=2, padding=1)
    _conv_error(mg.ShapeError, r"bias must have shape \(4,\) .* got \(3,\)", b=(3,))
    _conv_error(mg.ShapeError, "groups=2 does not divide", w=(3, 3, 3, 3), groups=2)
    _conv_error(mg.ShapeError, r"expects an input with 4 channels", w=(4, 2, 3, 3), groups=2)
    _conv_error(ValueError, "stride must be positive", stride=0)
    _conv_error(ValueError, "padding must be non-negative", padding=(1, -1))
    _conv_error(TypeError, r"dilation must be an int or a pair of ints, got 1.5", dilation=1.5)
    _conv_error(TypeError, "stride must be an int or a pair", stride=(1, 2, 3))
    _conv_error(ValueError, "groups must be a positive int", groups=0)
    with pytest.raises(TypeError, match=r"input \(float64\) and weight \(float32\) must have "
                       "the same dtype"):
        conv2d(mg.zeros(1, 3, 4, 4, dtype=mg.float64), mg.zeros(2, 3, 3, 3))
    with pytest.raises(TypeError, match="floating-point input"):
        conv2d(mg.zeros(1, 3, 4, 4, dtype=mg.int64), mg.zeros(2, 3, 3, 3))
    with pytest.raises(TypeError, match="weight must be a Tensor"):
        conv2d(mg.zeros(1, 3, 4, 4), np.zeros((2, 3, 3, 3)))


def test_max_pool2d_errors():
    x = mg.zeros(1, 2, 4, 4)
    with pytest.raises(mg.ShapeError, match=r"got shape \(4, 4\)"):
        max_pool2d(mg.zeros(4, 4), 2)
    with pytest.raises(ValueError, match=r"padding \(2, 2\) must be at most half of "
                       r"kernel_size \(3, 3\)"):
        max_pool2d(x, 3, padding=2)
    with pytest.raises(mg.ShapeError, match=r"kernel \(5, 5\) .* larger than the padded input "
                       r"\(4, 4\)"):
        max_pool2d(x, 5)
    with pytest.raises(ValueError, match="kernel_size must be positive"):
        max_pool2d(x, 0)
    with pytest.raises(TypeError, match="floating-point input"):
        max_pool2d(mg.zeros(1, 1, 2, 2, dtype=mg.int64), 2)


def _conv_in_child(x, w):
    return max_pool2d(conv2d(mg.tensor(x), mg.tensor(w), padding=1), 2).numpy()


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_conv2d_and_max_pool2d_in_a_forked_child():
    """A data-loader worker forked after the parent ran the kernels can run them too (GNU
    OpenMP kills such a child if a kernel is compiled with parallel=True)."""
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((4, 8, 16, 16)), rng.standard_normal((8, 8, 3, 3))
    want = max_pool2d(conv2d(mg.tensor(x), mg.tensor(w), padding=1), 2).numpy()
    got = in_forked_child(_conv_in_child, x, w)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_conv2d_batch_parts_in_a_forked_child(monkeypatch):
    """A child forked after the parent's convolution started its helper threads makes its
    own (the parent's threads do not exist there: using their pool would hang)."""
    rng = np.random.default_rng(14)
    x, w = rng.standard_normal((4, 3, 8, 8)), rng.standard_normal((5, 3, 3, 3))
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, []))
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    want = max_pool2d(conv2d(mg.tensor(x), mg.tensor(w), padding=1), 2).numpy()
    assert parts_mod.Parts.helpers is not None
    got = in_forked_child(_conv_in_child, x, w)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    stop_helpers()


def _no_columns(*args):
    raise AssertionError("im2col or col2im ran")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", ["cblas", "numpy"])
def test_stride_one_convolution_builds_no_columns(monkeypatch, dtype, backend, path):
    """A stride-1 convolution, its input and its weight gradient take the row-shifted path
    (NOTE [ Row-shifted convolution ]): no im2col or col2im, values and gradients those of
    the direct sum, through OpenBLAS and with NumPy's matmul instead, with either forward
    product."""
    from memgrad._kernels import conv as kernels

    _force_forward(monkeypatch, path)

    if backend == "numpy":
        monkeypatch.setattr(parts_mod.Parts, "gemms", {})
    monkeypatch.setattr(kernels, "im2col", _no_columns)
    monkeypatch.setattr(kernels, "col2im", _no_columns)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4, 7, 6))
    w, b = rng.standard_normal((5, 4, 3, 3)), rng.standard_normal(5)
    xt, wt, bt = (mg.tensor(a.astype(dtype), requires_grad=True) for a in (x, w, b))
    out = conv2d(xt, wt, bt, padding=1)
    g = rng.standard_normal(out.shape)
    out.backward(mg.tensor(g.astype(dtype)))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out.numpy(), np_conv2d(x, w, b, padding=1), rtol=tol, atol=tol)
    gx, gw = _conv_grads_numpy(x, w, g, padding=1)
    np.testing.assert_allclose(xt.grad.numpy(), gx, rtol=tol, atol=tol)
    np.testing.assert_allclose(wt.grad.numpy(), gw, rtol=tol, atol=tol)
    np.testing.assert_allclose(bt.grad.numpy(), g.sum(axis=(0, 2, 3)), rtol=tol, atol=tol)
    assert out.dtype == xt.grad.dtype == wt.grad.dtype == dtype


def _conv_grads_numpy(x, w, g, padding):
    """The input and weight gradients of a stride-1 conv2d by direct sums: each output
    position's g times its window."""
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    gxp, gw = np.zeros_like(xp), np.zeros_like(w)
    for i in range(g.shape[2]):
        for j in range(g.shape[3]):
            win = xp[:, :, i:i + kh, j:j + kw]
            gw += np.einsum("no,nchw->ochw", g[:, :, i, j], win)
            gxp[:, :, i:i + kh, j:j + kw] += np.einsum("no,ochw->nchw", g[:, :, i, j], w)
    return gxp[:, :, padding:padding + h, padding:padding + wd], gw


@pytest.mark.parametrize("path", PATHS)
def test_row_shifted_convolution_in_batch_parts(monkeypatch, path):
    """The row-shifted path split over helper threads, one sample per chunk: the values and
    gradients of one part, with either forward product."""
    _force_forward(monkeypatch, path)
    rng = np.random.default_rng(12)
    arrays = [rng.standard_normal((5, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3)),
              rng.standard_normal(4)]
    params = dict(padding=1)
    monkeypatch.setattr(parts_mod.Parts, "set_local", None)
    whole = _conv_values_and_grads(arrays, **params)
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, calls))
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    monkeypatch.setattr(conv_ops, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    parts = _conv_values_and_grads(arrays, **params)
    for got, want in zip(parts, whole):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parts[0], np_conv2d(*arrays, **params), rtol=1e-12, atol=1e-12)
    assert any(name.startswith("memgrad-parts") for name, _ in calls)
    stop_helpers()


def test_row_shifted_forward_picks_the_stacked_product_for_few_output_channels(monkeypatch):
    """W3's layers (32 channels, 3x3) take the stacked product, 64 output channels or 2
    input channels the window products; both give the direct sum (the Winograd path off)."""
    monkeypatch.setattr(conv_ops.WINOGRAD, "enabled", False)
    taken = _spy(monkeypatch, ("_forward_stacked", "_forward_windows"))
    rng = np.random.default_rng(13)
    for c, co in ((32, 32), (32, 64), (2, 32)):
        x, w = rng.standard_normal((2, c, 5, 5)), rng.standard_normal((co, c, 3, 3))
        np.testing.assert_allclose(conv2d(mg.tensor(x), mg.tensor(w), padding=1).numpy(),
                                   np_conv2d(x, w, padding=1), rtol=1e-12, atol=1e-12)
    assert taken == ["_forward_stacked", "_forward_windows", "_forward_windows"]


# ---------------------------------------------------------------------------- few positions


def test_few_output_positions_take_one_product_per_chunk_of_samples(monkeypatch):
    """NOTE [ Few output positions ]: groups 1 and at most 64 output positions a sample."""
    monkeypatch.undo()  # the module's default, not this file's fixture
    assert conv_ops._batched(8, 8, 1) and conv_ops._batched(1, 1, 1)
    assert not conv_ops._batched(9, 8, 1) and not conv_ops._batched(16, 16, 1)
    assert not conv_ops._batched(4, 4, 2) and not conv_ops._batched(0, 4, 1)


@pytest.mark.parametrize("chunk", [1, 1 << 25])  # one sample a chunk, or the whole batch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_products_give_the_direct_sums_and_their_gradients(monkeypatch, chunk, dtype):
    monkeypatch.setattr(conv_ops, "_BATCHED_MAX_POSITIONS", 64)
    monkeypatch.setattr(conv_ops, "_BATCHED_CHUNK_BYTES", chunk)
    taken = _spy(monkeypatch, ("_forward_batched", "_weight_grad_batched"))
    rng = np.random.default_rng(21)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for xs, ws, params in [((3, 4, 6, 5), (5, 4, 3, 3), dict(padding=1)),
                           ((4, 3, 7, 7), (2, 3, 3, 2), dict(stride=2, padding=(1, 0))),
                           ((2, 2, 9, 8), (3, 2, 2, 3), dict(stride=(2, 1), dilation=(2, 1)))]:
        x, w, b = (rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))
        ts = [mg.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = conv2d(*ts, **params)
        g = rng.standard_normal(out.shape).astype(dtype)
        out.backward(mg.tensor(g))
        np.testing.assert_allclose(out.numpy(), np_conv2d(x, w, b, **params), rtol=tol, atol=tol)
        # the gradients against the per-sample paths', in float64
        monkeypatch.setattr(conv_ops, "_BATCHED_MAX_POSITIONS", 0)
        ref = [mg.tensor(a.astype(np.float64), requires_grad=True) for a in (x, w, b)]
        conv2d(*ref, **params).backward(mg.tensor(g.astype(np.float64)))
        monkeypatch.setattr(conv_ops, "_BATCHED_MAX_POSITIONS", 64)
        for t, r in zip(ts, ref):
            assert t.grad.dtype == t.dtype
            np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), rtol=tol, atol=tol)
    assert taken.count("_weight_grad_batched") == 3
    assert taken.count("_forward_batched") == 4  # and the stride-1 input gradient


# ---------------------------------------------------------------------------- Winograd


def test_winograd_path_is_taken_only_where_it_paid():
    """NOTE [ Winograd convolution ]: 3x3, stride and dilation 1, groups 1, 16 to 256
    channels (128 for the weight gradient), at least 64 tiles a sample (256 for the weight
    gradient), at most 8 MiB (6 MiB) of transformed tiles a sample."""
    def taken(x, w, stride=(1, 1), dilation=(1, 1), groups=1, itemsize=4, weight_grad=False):
        return conv_ops._winograd(x, w, stride, (1, 1), dilation, groups, itemsize,
                                  weight_grad)

    for weight_grad in (False, True):
        assert taken((16, 32, 32, 32), (32, 32, 3, 3), weight_grad=weight_grad)  # W3
        assert taken((16, 32, 32, 32), (32, 32, 3, 3), itemsize=8, weight_grad=weight_grad)
        assert taken((16, 16, 32, 32), (16, 16, 3, 3), weight_grad=weight_grad)
        assert taken((8, 128, 32, 32), (128, 128, 3, 3), weight_grad=weight_grad)
        assert taken((4, 64, 64, 64), (64, 64, 3, 3), weight_grad=weight_grad)  # 4.1 MiB
        assert not taken((16, 8, 32, 32), (32, 8, 3, 3), weight_grad=weight_grad)  # thin
        assert not taken((4, 512, 32, 32), (512, 512, 3, 3), weight_grad=weight_grad)
    assert taken((16, 64, 16, 16), (64, 64, 3, 3))
    assert not taken((16, 64, 16, 16), (64, 64, 3, 3), weight_grad=True)  # 72 tiles
    assert taken((8, 256, 16, 16), (256, 256, 3, 3))
    assert not taken((8, 256, 32, 32), (256, 256, 3, 3), weight_grad=True)  # 256 channels
    assert taken((2, 64, 88, 88), (64, 64, 3, 3))  # 7.7 MiB of tiles
    assert not taken((2, 64, 88, 88), (64, 64, 3, 3), weight_grad=True)
    assert not taken((2, 64, 88, 88), (64, 64, 3, 3), itemsize=8)
    assert not taken((16, 64, 8, 8), (64, 64, 3, 3))  # 20 tiles
    assert not taken((16, 32, 32, 32), (32, 32, 5, 5))
    assert not taken((16, 32, 32, 32), (32, 32, 3, 3), stride=(2, 1))
    assert not taken((16, 32, 32, 32), (32, 32, 3, 3), dilation=(1, 2))
    assert not taken((16, 32, 32, 32), (32, 16, 3, 3), groups=2)


def _force_winograd(monkeypatch):
    """Make every 3x3 stride-1 convolution take the Winograd path, whatever its size."""
    monkeypatch.setattr(conv_ops, "_WINOGRAD_CHANNELS", ((1, 1 << 30),) * 2)
    monkeypatch.setattr(conv_ops, "_WINOGRAD_MIN_TILES", (1, 1))
    monkeypatch.setattr(conv_ops, "_WINOGRAD_MAX_BYTES", (1 << 60, 1 << 60))


def _spy(monkeypatch, names):
    taken = []
    for name in names:
        real = getattr(conv_ops, name)
        monkeypatch.setattr(conv_ops, name,
                            lambda *a, _real=real, _name=name: taken.append(_name) or _real(*a))
    return taken


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, padding", [
    ((2, 3, 7, 5), 1),  # odd output sizes: the last tiles overhang
    ((1, 4, 6, 6), 0),
    ((2, 3, 4, 9), 2),  # the input gradient's flipped padding is 0
    ((1, 2, 3, 3), 1),
])
def test_winograd_convolution_matches_the_direct_sum(monkeypatch, dtype, shape, padding):
    """Values and input, weight and bias gradients of the Winograd path against direct sums
    in NumPy, within float32 rounding (float64: 1e-10), and all three ops take the path."""
    _force_winograd(monkeypatch)
    taken = _spy(monkeypatch, ["_forward_winograd", "_weight_grad_winograd"])
    rng = np.random.default_rng(21)
    co = 5
    x = rng.standard_normal(shape)
    w, b = rng.standard_normal((co, shape[1], 3, 3)) / 6, rng.standard_normal(co)
    xt, wt, bt = (mg.tensor(a.astype(dtype), requires_grad=True) for a in (x, w, b))
    out = conv2d(xt, wt, bt, padding=padding)
    g = rng.standard_normal(out.shape)
    out.backward(mg.tensor(g.astype(dtype)))
    assert taken == ["_forward_winograd", "_forward_winograd", "_weight_grad_winograd"]
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out.numpy(), np_conv2d(x, w, b, padding=padding), rtol=tol,
                               atol=tol)
    gx, gw = _conv_grads_numpy(x, w, g, padding=padding)
    np.testing.assert_allclose(xt.grad.numpy(), gx, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(wt.grad.numpy(), gw, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(bt.grad.numpy(), g.sum(axis=(0, 2, 3)), rtol=tol, atol=tol * 10)
    assert out.dtype == xt.grad.dtype == wt.grad.dtype == dtype


def test_winograd_float32_agrees_with_the_direct_path_on_w3_shapes(monkeypatch):
    """On a W3 layer (32 channels, 32x32) the float32 results of the two paths differ by
    rounding only: relative to the largest value, under 1e-5."""
    assert conv_ops._winograd((2, 32, 32, 32), (32, 32, 3, 3), (1, 1), (1, 1), (1, 1), 1, 4,
                              True)
    rng = np.random.default_rng(22)
    x = rng.standard_normal((2, 32, 32, 32)).astype(np.float32)
    w = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    g = rng.standard_normal((2, 32, 32, 32)).astype(np.float32)
    results = {}
    for on in (True, False):
        monkeypatch.setattr(conv_ops.WINOGRAD, "enabled", on)
        ts = [mg.tensor(a, requires_grad=True) for a in (x, w, b)]
        out = conv2d(*ts, padding=1)
        out.backward(mg.tensor(g))
        results[on] = [out.numpy()] + [t.grad.numpy() for t in ts]
    for fast, direct in zip(results[True], results[False]):
        assert np.abs(fast - direct).max() <= 1e-5 * np.abs(direct).max()


def test_winograd_gradcheck_and_gradgradcheck(monkeypatch):
    """First and second derivatives of the Winograd path (float64) against finite
    differences."""
    _force_winograd(monkeypatch)
    taken = _spy(monkeypatch, ["_forward_winograd", "_weight_grad_winograd"])
    rng = np.random.default_rng(23)
    args = [mg.tensor(rng.standard_normal((2, 3, 3, 4)), requires_grad=True),
            mg.tensor(rng.standard_normal((2, 3, 3, 3)), requires_grad=True),
            mg.tensor(rng.standard_normal(2), requires_grad=True)]

    def fn(*a):
        return conv2d(*a, padding=1)

    assert mg.autograd.gradcheck(fn, args)
    assert mg.autograd.gradgradcheck(fn, args)
    assert set(taken) == {"_forward_winograd", "_weight_grad_winograd"}


def test_winograd_convolution_in_batch_parts(monkeypatch):
    """The Winograd path split over helper threads as Python parts: the values and gradients
    of one part (the weight gradient's parts summed in order). (Its parts as jobs: in
    tests/ops/test_handoff.py.)"""
    _force_winograd(monkeypatch)
    monkeypatch.setattr(conv_ops, "_winograd_as_jobs", lambda *args: None)
    rng = np.random.default_rng(24)
    arrays = [rng.standard_normal((5, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3)),
              rng.standard_normal(4)]
    monkeypatch.setattr(parts_mod.Parts, "set_local", None)
    whole = _conv_values_and_grads(arrays, padding=1)
    calls = []
    monkeypatch.setattr(parts_mod.Parts, "set_local", _fake_blas_threads(2, calls))
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    parts = _conv_values_and_grads(arrays, padding=1)
    for got, want in zip(parts, whole):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parts[0], np_conv2d(*arrays, padding=1), rtol=1e-12,
                               atol=1e-12)
    assert any(name.startswith("memgrad-parts") for name, _ in calls)
    stop_helpers()


def test_conv2d_bias_gradient_comes_with_the_winograd_weight_gradient(monkeypatch):
    """With the weight and the bias both needing gradients, conv2d's backward on the Winograd
    path runs one conv2d_weight_grad for both, the bias gradient summed from the copy of
    ``g`` the transform reads anyway (no sum of ``g`` on its own): ``g`` summed over all but
    its channels in float64 and rounded once; the weight gradient as without the bias."""
    _force_winograd(monkeypatch)
    taken = _spy(monkeypatch, ["_weight_grad_winograd"])

    def no_sum(*args, **kwargs):
        raise AssertionError("the bias gradient was summed on its own")

    rng = np.random.default_rng(31)
    x = rng.standard_normal((3, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    g = rng.standard_normal((3, 5, 7, 6)).astype(np.float32)
    ts = [mg.tensor(a, requires_grad=True) for a in (x, w, b)]
    without_bias = [mg.tensor(a, requires_grad=True) for a in (x, w)]
    conv2d(*without_bias, padding=1).backward(mg.tensor(g))
    monkeypatch.setattr(conv_ops, "_sum", no_sum)
    conv2d(*ts, padding=1).backward(mg.tensor(g))
    assert taken == ["_weight_grad_winograd"] * 2
    np.testing.assert_array_equal(ts[2].grad.numpy(),
                                  g.astype(np.float64).sum(axis=(0, 2, 3)).astype(np.float32))
    np.testing.assert_array_equal(ts[1].grad.numpy(), without_bias[1].grad.numpy())
    np.testing.assert_array_equal(ts[0].grad.numpy(), without_bias[0].grad.numpy())
    assert ts[1].grad.numpy().flags.c_contiguous and ts[1].grad.numpy().base is None


def test_conv2d_bias_gradient_off_the_winograd_path_is_its_own_sum(monkeypatch):
    """Off the Winograd path (whose weight gradient can outgrow ``g``) the bias gradient stays
    a sum of ``g`` on its own, and the weight gradient is not copied out of a joint array."""
    monkeypatch.setattr(conv_ops.WINOGRAD, "enabled", False)
    sums = []
    real = conv_ops._sum
    monkeypatch.setattr(conv_ops, "_sum", lambda *a, **k: sums.append(k) or real(*a, **k))
    rng = np.random.default_rng(32)
    ts = [mg.tensor(rng.standard_normal(s), requires_grad=True)
          for s in ((2, 3, 5, 5), (4, 3, 3, 3), (4,))]
    conv2d(*ts, padding=1).backward(mg.ones(2, 4, 5, 5))
    assert sums == [{"dim": (0, 2, 3)}]
    np.testing.assert_allclose(ts[2].grad.numpy(), np.full(4, 50.0))
