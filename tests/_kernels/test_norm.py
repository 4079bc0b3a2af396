"""The layer-norm kernels against their NumPy references, over drawn shapes, offsets and
dtypes (the references run in float64)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import norm as N

SETTINGS = settings(max_examples=25, deadline=None)


def _close(got, want, dtype):
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-11 if dtype == np.float64 else 5e-5
    scale = float(np.max(np.abs(want), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


@st.composite
def rows(draw):
    """(N, D) rows whose mean may be far from 0 relative to their spread (the case a
    one-pass variance gets wrong), the gradient, weight and bias, and eps."""
    n, d = draw(st.integers(0, 150)), draw(st.integers(1, 70))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    spread = draw(st.sampled_from([1e-2, 1.0, 30.0]))
    offset = draw(st.sampled_from([0.0, 5.0, -100.0]))
    x = (offset + spread * rng.standard_normal((n, d))).astype(dtype)
    g = rng.standard_normal((n, d)).astype(dtype)
    w, b = rng.standard_normal((2, d)).astype(dtype)
    return x, g, w, b, draw(st.sampled_from([1e-5, 1e-2]))


def _f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


@SETTINGS
@given(rows())
def test_layer_norm_forward_matches_reference(case):
    x, _, w, b, eps = case
    want = N.layer_norm_forward_reference(*_f64(x, w, b), eps)
    _close(N.layer_norm_forward(x, w, b, eps), want, x.dtype)


@SETTINGS
@given(rows())
def test_layer_norm_backward_matches_reference(case):
    x, g, w, _, eps = case
    want = N.layer_norm_backward_reference(*_f64(g, x, w), eps)
    _close(N.layer_norm_backward(g, x, w, eps), want, x.dtype)


@SETTINGS
@given(rows())
def test_layer_norm_weight_grad_matches_reference(case):
    x, g, _, _, eps = case
    want = N.layer_norm_weight_grad_reference(*_f64(g, x), eps)
    _close(N.layer_norm_weight_grad(g, x, eps), want, x.dtype)


@SETTINGS
@given(rows())
def test_layer_norm_grads_match_the_references_and_the_separate_kernels(case):
    x, g, w, _, eps = case
    gx, gw, gb = N.layer_norm_grads(g, x, w, eps)
    for got, want in zip((gx, gw, gb), N.layer_norm_grads_reference(*_f64(g, x, w), eps)):
        _close(got, want, x.dtype)
    # the input and weight gradients are those of the separate kernels, to the bit
    np.testing.assert_array_equal(gx, N.layer_norm_backward(g, x, w, eps))
    np.testing.assert_array_equal(gw, N.layer_norm_weight_grad(g, x, eps))


def test_layer_norm_grads_chunks_fill_their_chunks_and_check_shapes():
    rng = np.random.default_rng(1)
    x, g, w = rng.standard_normal((130, 5)), rng.standard_normal((130, 5)), rng.standard_normal(5)
    out, partial = np.empty_like(x), np.zeros((3, 2, 5))  # chunks of 64, 64 and 2 rows
    N.layer_norm_grads_chunks(g, x, w, 1e-5, out, partial)
    np.testing.assert_allclose(out, N.layer_norm_backward_reference(g, x, w, 1e-5),
                               rtol=1e-10, atol=1e-12)
    h = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    for c, part in enumerate((slice(0, 64), slice(64, 128), slice(128, 130))):
        np.testing.assert_allclose(partial[c, 0], (g[part] * h[part]).sum(0), rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(partial[c, 1], g[part].sum(0), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="partial must be"):
        N.layer_norm_grads_chunks(g, x, w, 1e-5, out, np.zeros((2, 2, 5)))
    with pytest.raises(ValueError, match="out must have the input's shape"):
        N.layer_norm_grads_chunks(g, x, w, 1e-5, out[:3], partial)


def test_constant_rows_normalize_to_zero():
    x = np.full((2, 5), 3.0, dtype=np.float32)
    w = np.ones(5, np.float32)
    np.testing.assert_array_equal(N.layer_norm_forward(x, w, np.zeros(5, np.float32), 1e-5), 0)
    np.testing.assert_array_equal(N.layer_norm_backward(np.ones_like(x), x, w, 1e-5), 0)


def test_empty_rows_give_empty_results():
    x = np.zeros((3, 0), dtype=np.float32)
    w = np.zeros(0, np.float32)
    assert N.layer_norm_forward(x, w, w, 1e-5).shape == (3, 0)
    assert N.layer_norm_backward(x, x, w, 1e-5).shape == (3, 0)
    assert N.layer_norm_weight_grad(x, x, 1e-5).shape == (0,)


def test_into_kernels_fill_out_and_check_their_shapes():
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((130, 5)), rng.standard_normal((130, 5))
    w, b = rng.standard_normal(5), rng.standard_normal(5)
    out = np.empty_like(x)
    N.layer_norm_forward_into(x, w, b, 1e-5, out)
    np.testing.assert_allclose(out, N.layer_norm_forward_reference(x, w, b, 1e-5), rtol=1e-12,
                               atol=1e-12)
    N.layer_norm_backward_into(g, x, w, 1e-5, out)
    np.testing.assert_allclose(out, N.layer_norm_backward_reference(g, x, w, 1e-5),
                               rtol=1e-10, atol=1e-12)
    partial = np.zeros((3, 5))  # 130 rows: chunks of 64, 64 and 2
    N.layer_norm_weight_grad_chunks(g, x, 1e-5, partial)
    h = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    for c, rows in enumerate((slice(0, 64), slice(64, 128), slice(128, 130))):
        np.testing.assert_allclose(partial[c], (g[rows] * h[rows]).sum(0), rtol=1e-10,
                                   atol=1e-12)
    with pytest.raises(ValueError, match="out must have the input's shape"):
        N.layer_norm_forward_into(x, w, b, 1e-5, out[:3])
    with pytest.raises(ValueError, match="weight and bias"):
        N.layer_norm_forward_into(x, w[:4], b, 1e-5, out)
    with pytest.raises(ValueError, match="g must have the input's shape"):
        N.layer_norm_backward_into(g[:3], x, w, 1e-5, out)
    with pytest.raises(ValueError, match="partial must be"):
        N.layer_norm_weight_grad_chunks(g, x, 1e-5, np.zeros((2, 5)))


def test_layer_norm_backward_of_two_close_values_far_from_zero():
    # centred values of float32 rows near -100 lose digits when the arithmetic after the
    # float64 row sums subtracts a float32 mean: the kernel subtracts it in two halves
    x = np.array([[-99.87427, -100.1321], [-99.35958, -99.8951]], dtype=np.float32)
    g = np.array([[-0.5356694, 0.36159506], [1.304, 0.94708097]], dtype=np.float32)
    w = np.array([-0.70373523, -1.2654215], dtype=np.float32)
    want = N.layer_norm_backward_reference(*_f64(g, x, w), 1e-5)
    _close(N.layer_norm_backward(g, x, w, 1e-5), want, x.dtype)


def test_sum_chunks_into_adds_the_chunks_in_order_and_rounds_once():
    rng = np.random.default_rng(2)
    partial = rng.standard_normal((7, 11)) * 1e3
    out = np.empty(11, np.float32)
    N.sum_chunks_into(partial, out)
    want = np.zeros(11)
    for row in partial:  # in order, in float64, then one rounding
        want += row
    np.testing.assert_array_equal(out, want.astype(np.float32))
    with pytest.raises(ValueError, match="out must have a chunk's length"):
        N.sum_chunks_into(partial, np.empty(10))


@pytest.mark.parametrize("n, d", [(1024, 64), (37, 600), (9, 5000)])
def test_blocks_of_rows_give_each_row_its_own_statistics(n, d):
    # rows are normalized in blocks of a few (more for short rows): every row of a block,
    # including a last short block, against the reference
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((n, 1)) * 50 + rng.standard_normal((n, d))).astype(np.float32)
    g = rng.standard_normal((n, d)).astype(np.float32)
    w, b = rng.standard_normal((2, d)).astype(np.float32)
    _close(N.layer_norm_forward(x, w, b, 1e-5),
           N.layer_norm_forward_reference(*_f64(x, w, b), 1e-5), np.float32)
    for got, want in zip(N.layer_norm_grads(g, x, w, 1e-5),
                         N.layer_norm_grads_reference(*_f64(g, x, w), 1e-5)):
        _close(got, want, np.float32)
