"""im2col, col2im and im2row against their NumPy references, over drawn shapes, strides,
paddings, dilations and dtypes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels.conv import (
    col2im,
    col2im_reference,
    im2col,
    im2col_reference,
    im2row,
    im2row_reference,
    row_sum,
    row_sum_reference,
)


@st.composite
def geometries(draw):
    """``(x shape, kernel, stride, padding, dilation, output size)`` with a valid output."""
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    size = []
    for k, p, d in zip(kernel, padding, dilation):
        least = max(1, d * (k - 1) + 1 - 2 * p)  # the padded input must hold the kernel
        size.append(draw(st.integers(least, least + 6)))
    out = tuple((s + 2 * p - d * (k - 1) - 1) // st_ + 1
                for s, k, st_, p, d in zip(size, kernel, stride, padding, dilation))
    return (n, c, *size), kernel, stride, padding, dilation, out


def _args(stride, padding, dilation):
    return (*stride, *padding, *dilation)


@settings(max_examples=25, deadline=None)
@given(geo=geometries(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_im2col_matches_numpy(geo, dtype, seed):
    shape, (kh, kw), stride, padding, dilation, (oh, ow) = geo
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    col = np.full((shape[1], kh, kw, shape[0], oh, ow), np.nan, dtype=dtype)  # all overwritten
    got = im2col(x, col, *_args(stride, padding, dilation))
    want = im2col_reference(x, kh, kw, *_args(stride, padding, dilation))
    assert got is col and got.dtype == dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(geo=geometries(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_col2im_matches_numpy(geo, dtype, seed):
    shape, (kh, kw), stride, padding, dilation, (oh, ow) = geo
    rng = np.random.default_rng(seed)
    col = rng.standard_normal((shape[1], kh, kw, shape[0], oh, ow)).astype(dtype)
    out = np.full(shape, np.nan, dtype=dtype)  # col2im overwrites, it does not accumulate
    got = col2im(col, out, *_args(stride, padding, dilation))
    want = col2im_reference(col, shape, *_args(stride, padding, dilation))
    assert got is out and got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@settings(max_examples=25, deadline=None)
@given(geo=geometries(), seed=st.integers(0, 2**32 - 1))
def test_col2im_is_the_transpose_ofim2col(geo, seed):
    """<im2col(x), c> == <x, col2im(c)>: the property the convolution's backward relies on."""
    shape, (kh, kw), stride, padding, dilation, (oh, ow) = geo
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    c = rng.standard_normal((shape[1], kh, kw, shape[0], oh, ow))
    args = _args(stride, padding, dilation)
    lhs = np.sum(im2col(x, np.empty_like(c), *args) * c)
    rhs = np.sum(x * col2im(c, np.empty_like(x), *args))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)


def test_im2col_known_values():
    x = np.arange(9.0).reshape(1, 1, 3, 3)
    col = im2col(x, np.empty((1, 2, 2, 1, 2, 2)), 1, 1, 0, 0, 1, 1)
    # the top-left element of each 2x2 window, then top-right, bottom-left, bottom-right
    np.testing.assert_array_equal(col[0, 0, 0, 0], [[0, 1], [3, 4]])
    np.testing.assert_array_equal(col[0, 1, 1, 0], [[4, 5], [7, 8]])


def test_col2im_sums_overlapping_patches():
    ones = np.ones((1, 3, 3, 1, 3, 3))
    out = col2im(ones, np.empty((1, 1, 3, 3)), 1, 1, 1, 1, 1, 1)
    # how many 3x3 windows (padding 1) cover each position
    np.testing.assert_array_equal(out[0, 0], [[4, 6, 4], [6, 9, 6], [4, 6, 4]])



@settings(max_examples=40, deadline=None)
@given(geo=geometries(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_im2row_matches_numpy(geo, dtype, seed):
    shape, (_, kw), (_, sw), (ph, pw), (_, dw), (_, ow) = geo
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    rows = np.full((shape[0], shape[1], kw, shape[2] + 2 * ph, ow), np.nan, dtype=dtype)
    got = im2row(x, rows, sw, ph, pw, dw)
    assert got is rows and got.dtype == dtype
    np.testing.assert_array_equal(got, im2row_reference(x, kw, ow, sw, ph, pw, dw))


def test_im2row_windows_are_the_columns_of_each_kernel_row():
    """Kernel row ki's window of the rows, from ki*dh*OW, is im2col's columns for that row
    (NOTE [ Row-shifted convolution ])."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 6, 7))
    kh, kw, ph, pw, dh, dw = 3, 2, 1, 2, 2, 1
    oh, ow = 6 + 2 * ph - dh * (kh - 1), 7 + 2 * pw - dw * (kw - 1)
    rows = im2row(x, np.empty((2, 3, kw, 6 + 2 * ph, ow)), 1, ph, pw, dw).reshape(2, 3, kw, -1)
    col = im2col_reference(x, kh, kw, 1, 1, ph, pw, dh, dw)  # (C, KH, KW, N, OH, OW)
    for ki in range(kh):
        window = rows[..., ki * dh * ow : ki * dh * ow + oh * ow]
        np.testing.assert_array_equal(window, col[:, ki].transpose(2, 0, 1, 3, 4)
                                      .reshape(2, 3, kw, oh * ow))


@pytest.mark.parametrize("rows_shape, args, match", [
    ((1, 2, 2, 5, 3), (1, 1, 0, 1), "rows must be"),  # 2 channels for x's 1
    ((1, 1, 2, 4, 3), (1, 1, 0, 1), "rows must be"),  # 4 padded rows, not 3 + 2
    ((1, 1, 2, 5, 4), (1, 1, 0, 1), "reaches past"),  # OW 4 with kw 2 over width 4
    ((1, 1, 2, 5, 3), (0, 1, 0, 1), "positive"),
])
def test_im2row_checks_its_shapes_first(rows_shape, args, match):
    rows = np.full(rows_shape, 7.0)
    with pytest.raises(ValueError, match=match):
        im2row(np.zeros((1, 1, 3, 4)), rows, *args)
    assert (rows == 7.0).all()  # nothing written


@settings(max_examples=40, deadline=None)
@given(kh=st.integers(1, 4), co=st.integers(1, 5), length=st.integers(1, 12),
       shift=st.integers(0, 4), extra=st.integers(0, 3),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**32 - 1))
def test_row_sum_matches_numpy(kh, co, length, shift, extra, dtype, seed):
    """Bit for bit: the same additions in the same order."""
    rng = np.random.default_rng(seed)
    partial = rng.standard_normal((kh, co, (kh - 1) * shift + length + extra)).astype(dtype)
    bias = rng.standard_normal(co).astype(dtype)
    out = np.full((co, length), np.nan, dtype=dtype)  # all overwritten
    got = row_sum(partial, bias, out, shift)
    assert got is out and got.dtype == dtype
    np.testing.assert_array_equal(got, row_sum_reference(partial, bias, length, shift))


def test_row_sum_of_im2row_products_is_the_convolution():
    """Every kernel row's weights times the whole rows of im2row, each row's window summed
    (NOTE [ Row-shifted convolution ]): the direct sum of a stride-1 convolution."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((1, 2, 5, 6)), rng.standard_normal((3, 2, 3, 2))
    ph, pw, dh, dw = 1, 1, 2, 1
    oh, ow = 5 + 2 * ph - dh * 2, 6 + 2 * pw - dw
    rows = im2row(x, np.empty((1, 2, 2, 5 + 2 * ph, ow)), 1, ph, pw, dw).reshape(4, -1)
    partial = (w.transpose(2, 0, 1, 3).reshape(9, 4) @ rows).reshape(3, 3, -1)
    got = row_sum(partial, np.zeros(3), np.empty((3, oh * ow)), dh * ow).reshape(3, oh, ow)
    col = im2col_reference(x, 3, 2, 1, 1, ph, pw, dh, dw).reshape(12, oh * ow)
    np.testing.assert_allclose(got, (w.reshape(3, 12) @ col).reshape(3, oh, ow), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("shapes, shift, match", [
    (((2, 3, 8), (3,), (2, 4)), 2, "agree on CO"),  # out has 2 channels for partial's 3
    (((2, 3, 8), (2,), (3, 4)), 2, "agree on CO"),  # bias has 2
    (((2, 3, 8), (3,), (3, 4)), 5, "reaches past"),  # 5 + 4 columns of 8
    (((2, 3, 8), (3,), (3, 4)), -1, "reaches past"),
])
def test_row_sum_checks_its_shapes_first(shapes, shift, match):
    partial, bias, out = (np.ones(s) for s in shapes)
    out[:] = 7.0
    with pytest.raises(ValueError, match=match):
        row_sum(partial, bias, out, shift)
    assert (out == 7.0).all()  # nothing written
