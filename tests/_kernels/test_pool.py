"""max_pool2d, the gather at its argmax and its backward scatter against their NumPy
references, over drawn shapes, strides, paddings, dilations and dtypes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels.pool import (
    max_pool2d,
    max_pool2d_backward,
    max_pool2d_backward_reference,
    max_pool2d_gather,
    max_pool2d_reference,
)


@st.composite
def geometries(draw):
    """``(x shape, kernel, stride, padding, dilation, output size)``; padding is at most half
    the kernel, as the op requires."""
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    size = []
    for k, p, d in zip(kernel, padding, dilation):
        least = max(1, d * (k - 1) + 1 - 2 * p)
        size.append(draw(st.integers(least, least + 6)))
    out = tuple((s + 2 * p - d * (k - 1) - 1) // st_ + 1
                for s, k, st_, p, d in zip(size, kernel, stride, padding, dilation))
    return (n, c, *size), kernel, stride, padding, dilation, out


def _pool(x, kernel, stride, padding, dilation, out_size):
    shape = x.shape[:2] + out_size
    out = np.full(shape, np.nan, dtype=x.dtype)
    indices = np.full(shape, -7, dtype=np.int64)
    return max_pool2d(x, out, indices, *kernel, *stride, *padding, *dilation)


@settings(max_examples=25, deadline=None)
@given(geo=geometries(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1), ties=st.booleans(), specials=st.booleans())
def test_max_pool2d_matches_numpy(geo, dtype, seed, ties, specials):
    shape, kernel, stride, padding, dilation, out_size = geo
    rng = np.random.default_rng(seed)
    # small integers make ties common: both take the first maximum in window order
    x = (rng.integers(-3, 4, shape) if ties else rng.standard_normal(shape)).astype(dtype)
    if specials:  # NaNs (the first in window order wins) and infinities, inside windows too
        flat = x.reshape(-1)
        at = rng.choice(flat.size, size=min(flat.size, 4), replace=False)
        flat[at] = rng.choice([np.nan, np.inf, -np.inf], size=at.size)
    out, indices = _pool(x, kernel, stride, padding, dilation, out_size)
    want, want_indices = max_pool2d_reference(x, *kernel, *stride, *padding, *dilation)
    assert out.dtype == dtype and indices.dtype == np.int64
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(indices, want_indices)
    real = indices >= 0
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    picked = np.take_along_axis(flat, np.where(real, indices, 0).reshape(*x.shape[:2], -1), 2)
    np.testing.assert_array_equal(picked.reshape(out.shape)[real], out[real])
    gathered = max_pool2d_gather(x, indices, np.full(out.shape, 7.0, dtype))
    np.testing.assert_array_equal(gathered, want)  # -inf where no element: as the pooling


def test_max_pool2d_inside_windows_nan_and_infinities():
    # 2x2 windows of stride 2, no padding: every window takes the unchecked path
    x = np.array([[[[1.0, np.nan, -np.inf, -np.inf],
                    [np.nan, 2.0, -np.inf, -np.inf],
                    [np.inf, 3.0, 0.0, 0.0],
                    [np.nan, 4.0, 0.0, -0.0]]]])
    out, indices = _pool(x, (2, 2), (2, 2), (0, 0), (1, 1), (2, 2))
    want, want_indices = max_pool2d_reference(x, 2, 2, 2, 2, 0, 0, 1, 1)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(indices, want_indices)
    assert indices.tolist() == [[[[1, 2], [12, 10]]]]


@pytest.mark.parametrize("bad", [-2, 4, 10**12])
def test_max_pool2d_gather_rejects_out_of_range_indices_before_writing(bad):
    out = np.full((1, 1, 1, 2), 7.0)
    with pytest.raises(IndexError, match="out of range"):
        max_pool2d_gather(np.ones((1, 1, 2, 2)), np.array([[[[0, bad]]]]), out)
    np.testing.assert_array_equal(out, 7.0)


def test_pool_kernels_write_only_contiguous_outputs_and_copy_strided_inputs():
    x = np.arange(32.0).reshape(1, 1, 4, 8)[..., ::2]  # strided: copied
    out, indices = _pool(x, (2, 2), (2, 2), (0, 0), (1, 1), (2, 2))
    assert indices.tolist() == [[[[5, 7], [13, 15]]]] and out.tolist() == [[[[10, 14], [26, 30]]]]
    at = np.zeros((1, 1, 2, 4), np.int64)[..., ::2]
    np.testing.assert_array_equal(max_pool2d_gather(x, at, np.empty((1, 1, 2, 2))), 0.0)
    strided = np.empty((1, 1, 2, 4))[..., ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        max_pool2d(x, strided, indices, 2, 2, 2, 2, 0, 0, 1, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        max_pool2d_gather(x, indices, strided)


@settings(max_examples=25, deadline=None)
@given(geo=geometries(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**32 - 1))
def test_max_pool2d_backward_matches_numpy(geo, dtype, seed):
    shape, kernel, stride, padding, dilation, out_size = geo
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, shape).astype(dtype)  # overlapping windows share maxima
    _, indices = _pool(x, kernel, stride, padding, dilation, out_size)
    g = rng.standard_normal(indices.shape).astype(dtype)
    got = max_pool2d_backward(g, indices, np.full(shape, np.nan, dtype=dtype))
    want = max_pool2d_backward_reference(g, indices, shape)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_max_pool2d_nan_wins_and_padding_never_does():
    x = np.array([[[[1.0, np.nan], [-5.0, -6.0]]]])
    out, indices = _pool(x, (2, 2), (1, 1), (1, 1), (1, 1), (3, 3))
    assert np.isnan(out[0, 0, 1, 1]) and indices[0, 0, 1, 1] == 1
    assert out[0, 0, 2, 0] == -5.0 and indices[0, 0, 2, 0] == 2  # its window is mostly padding
    assert out[0, 0, 2, 2] == -6.0


def test_window_of_padding_only_gets_minus_inf_and_is_skipped_by_themax_pool2d_backward():
    # kernel 2 with dilation 3 and padding 1 on a length-2 axis reads padded positions 0 and 3
    x = np.array([[[[1.0, 2.0]]]])
    out, indices = _pool(x, (1, 2), (1, 1), (0, 1), (1, 3), (1, 1))
    assert out[0, 0, 0, 0] == -np.inf and indices[0, 0, 0, 0] == -1
    grad = max_pool2d_backward(np.ones((1, 1, 1, 1)), indices, np.empty_like(x))
    np.testing.assert_array_equal(grad, np.zeros_like(x))



@pytest.mark.parametrize("bad", [-2, 9, 10**12])
def test_max_pool2d_backward_rejects_out_of_range_indices_before_writing(bad):
    out = np.full((1, 1, 3, 3), 7.0)
    indices = np.array([[[[0, bad]]]])
    with pytest.raises(IndexError, match="out of range"):
        max_pool2d_backward(np.ones((1, 1, 1, 2)), indices, out)
    np.testing.assert_array_equal(out, 7.0)
