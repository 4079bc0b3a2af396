"""The Winograd F(2x2, 3x3) transforms against their NumPy references over drawn shapes,
paddings and dtypes, composed into a convolution and its weight gradient against direct
sums, and their shape checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels.winograd import (
    G,
    winograd_grad,
    winograd_grad_reference,
    winograd_input,
    winograd_input_reference,
    winograd_output,
    winograd_output_reference,
)


@st.composite
def layers(draw):
    """``(C, CO, H, W, ph, pw)`` of a 3x3 stride-1 convolution with an output."""
    c, co = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    h = draw(st.integers(max(1, 3 - 2 * ph), 9))
    w = draw(st.integers(max(1, 3 - 2 * pw), 9))
    return c, co, h, w, ph, pw


def _tiles(oh, ow):
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    return th, tw, th * (tw + 1)


def _entries(a, channels, th, tw):
    """The (16, channels, TH, TW) entries of a kernel's (16, L) array, spares dropped."""
    per = th * (tw + 1)
    return a[:, : channels * per].reshape(16, channels, th, tw + 1)[..., :tw]


def _direct(x, w, b, ph, pw):
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))
    return np.einsum("cyxij,ocij->oyx", win, w) + b[:, None, None]


@settings(max_examples=40, deadline=None)
@given(layer=layers(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_winograd_input_matches_numpy(layer, dtype, seed):
    c, _, h, w, ph, pw = layer
    th, tw, per = _tiles(h + 2 * ph - 2, w + 2 * pw - 2)
    x = np.random.default_rng(seed).standard_normal((c, h, w)).astype(dtype)
    v = np.full((16, c * per + 3), np.nan, dtype=dtype)
    got = winograd_input(x, v, ph, pw, th, tw)
    assert got is v
    assert np.isfinite(v[:, : c * per]).all()  # the spares too
    tol = 1e-6 if dtype == np.float32 else 1e-14  # sums of four terms, in another order
    np.testing.assert_allclose(_entries(v, c, th, tw),
                               winograd_input_reference(x, ph, pw, th, tw), rtol=tol, atol=tol)
    assert np.isnan(v[:, c * per:]).all()  # nothing past C*T written


@settings(max_examples=40, deadline=None)
@given(layer=layers(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_winograd_output_and_grad_match_numpy(layer, dtype, seed):
    _, co, h, w, ph, pw = layer
    oh, ow = h + 2 * ph - 2, w + 2 * pw - 2
    th, tw, per = _tiles(oh, ow)
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((16, co * per)).astype(dtype)
    bias = rng.standard_normal(co).astype(dtype)
    out = np.full((co, oh, ow), np.nan, dtype=dtype)
    assert winograd_output(m, bias, out) is out
    want = winograd_output_reference(_entries(m, co, th, tw), bias, oh, ow)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    g = rng.standard_normal((co, oh, ow)).astype(dtype)
    mg = np.full((16, co * per), np.nan, dtype=dtype)
    assert winograd_grad(g, mg) is mg
    np.testing.assert_allclose(_entries(mg, co, th, tw), winograd_grad_reference(g), rtol=tol,
                               atol=tol)
    assert (mg.reshape(16, co, th, tw + 1)[..., tw] == 0).all()  # the spares add nothing
    # each channel's sum of g added into sums (the bias gradient), the tiles the same
    sums = np.full(co, 0.5)
    again = np.full((16, co * per), np.nan, dtype=dtype)
    assert winograd_grad(g, again, sums) is again
    np.testing.assert_array_equal(again, mg)
    np.testing.assert_allclose(sums, 0.5 + g.astype(np.float64).sum(axis=(1, 2)), rtol=1e-12,
                               atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(layer=layers(), seed=st.integers(0, 2**32 - 1))
def test_winograd_transforms_compose_into_the_convolution_and_its_weight_gradient(layer, seed):
    """``A^T [(G w G^T) * (B^T d B)] A`` is the direct convolution, and ``G^T [sum_t
    (A g A^T) * (B^T d B)] G`` its weight gradient (float64)."""
    c, co, h, w, ph, pw = layer
    oh, ow = h + 2 * ph - 2, w + 2 * pw - 2
    th, tw, per = _tiles(oh, ow)
    rng = np.random.default_rng(seed)
    x, wt = rng.standard_normal((c, h, w)), rng.standard_normal((co, c, 3, 3))
    b, g = rng.standard_normal(co), rng.standard_normal((co, oh, ow))
    v = winograd_input(x, np.empty((16, c * per)), ph, pw, th, tw).reshape(16, c, per)
    u = np.einsum("ik,ockl,jl->ijoc", G, wt, G).reshape(16, co, c)
    out = winograd_output((u @ v).reshape(16, -1), b, np.empty((co, oh, ow)))
    np.testing.assert_allclose(out, _direct(x, wt, b, ph, pw), rtol=1e-10, atol=1e-10)
    mg = winograd_grad(g, np.empty((16, co * per))).reshape(16, co, per)
    s = (v @ mg.transpose(0, 2, 1)).reshape(4, 4, c, co)
    gw = np.einsum("ki,klco,lj->ocij", G, s, G)
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))
    np.testing.assert_allclose(gw, np.einsum("cyxij,oyx->ocij", win, g), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("kernel, args, match", [
    ("input", ((2, 4, 4), (16, 11), 1, 1, 2, 2), "v must be"),  # 2 channels need 12 entries
    ("input", ((1, 4, 4), (15, 6), 1, 1, 2, 2), "v must be"),
    ("input", ((1, 4, 4), (16, 6), -1, 1, 2, 2), "non-negative"),
    ("input", ((1, 9, 4), (16, 6), 1, 1, 2, 2), "do not cover"),
    ("output", ((16, 5), 1, (1, 4, 4)), "m must be"),
    ("output", ((16, 6), 2, (1, 4, 4)), "bias"),
    ("grad", ((1, 4, 4), (16, 5)), "mg must be"),
    ("grad-sums", ((2, 4, 4), (16, 12), 3), "sums must be"),
])
def test_winograd_kernels_check_their_shapes_first(kernel, args, match):
    """A shape that does not fit raises ValueError before anything is written."""
    if kernel == "input":
        xs, vs, *rest = args
        written = np.full(vs, 7.0)
        call = lambda: winograd_input(np.zeros(xs), written, *rest)  # noqa: E731
    elif kernel == "output":
        ms, nb, outs = args
        written = np.full(outs, 7.0)
        call = lambda: winograd_output(np.zeros(ms), np.zeros(nb), written)  # noqa: E731
    elif kernel == "grad":
        gs, ms = args
        written = np.full(ms, 7.0)
        call = lambda: winograd_grad(np.zeros(gs), written)  # noqa: E731
    else:
        gs, ms, ns = args
        written = np.full(ms, 7.0)
        sums = np.full(ns, 7.0)
        call = lambda: winograd_grad(np.zeros(gs), written, sums)  # noqa: E731
    with pytest.raises(ValueError, match=match):
        call()
    assert (written == 7.0).all()
    if kernel == "grad-sums":
        assert (sums == 7.0).all()
