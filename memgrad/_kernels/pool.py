"""2-D max pooling over NCHW arrays: the max and its argmax in one pass, and the scatter of a
gradient to the argmax.

The argmax is a flat index into the (H, W) plane of the input, as PyTorch's
``return_indices`` gives it. Padding counts as ``-inf``; a window with no input element in
it (possible only with dilation) gets ``-inf`` and index -1, which the scatter skips. Ties
go to the first element in row-major window order; a NaN wins over any number (the first
NaN), so NaNs propagate as in PyTorch. Both kernels are serial, like the conv kernels.
"""

import numpy as np
from numba import njit

__all__ = [
    "max_pool2d",
    "max_pool2d_backward",
    "max_pool2d_reference",
    "max_pool2d_backward_reference",
]


@njit(cache=True, nogil=True)
def max_pool2d(x, out, indices, kh, kw, sh, sw, ph, pw, dh, dw):
    """Fill ``out`` and ``indices`` (N, C, OH, OW) with the window maxima of ``x``
    (N, C, H, W) and their flat (H, W) positions. Returns ``(out, indices)``.

    Example:
        >>> x = np.arange(9.0).reshape(1, 1, 3, 3)
        >>> out, at = max_pool2d(x, np.empty((1, 1, 1, 1)), np.empty((1, 1, 1, 1), np.int64),
        ...                      2, 2, 2, 2, 0, 0, 1, 1)
        >>> out.item(), at.item()
        (4.0, 4)
    """
    n_, c_, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    for task in range(n_ * c_):
        n, c = task // c_, task % c_
        plane = x[n, c]
        for oy in range(oh):
            y0 = oy * sh - ph
            for ox in range(ow):
                x0 = ox * sw - pw
                best = -np.inf
                arg = -1
                for ki in range(kh):
                    iy = y0 + ki * dh
                    if iy < 0 or iy >= h:
                        continue
                    for kj in range(kw):
                        ix = x0 + kj * dw
                        if ix < 0 or ix >= w:
                            continue
                        v = plane[iy, ix]
                        if v > best or (v != v and best == best) or arg < 0:
                            best = v
                            arg = iy * w + ix
                out[n, c, oy, ox] = best
                indices[n, c, oy, ox] = arg
    return out, indices


@njit(cache=True, nogil=True)
def max_pool2d_backward(g, indices, out):
    """Zero ``out`` (N, C, H, W), then add each ``g[n, c, oy, ox]`` at the flat position
    ``indices[n, c, oy, ox]`` of plane ``(n, c)`` (repeats summed, -1 skipped). Returns
    ``out``. An index outside [-1, H * W) raises IndexError before anything is written.

    Example:
        >>> at = np.array([[[[4]]]])
        >>> max_pool2d_backward(np.ones((1, 1, 1, 1)), at, np.empty((1, 1, 3, 3)))[0, 0]
        array([[0., 0., 0.],
               [0., 1., 0.],
               [0., 0., 0.]])
    """
    n_, c_, h, w = out.shape
    oh, ow = g.shape[2], g.shape[3]
    for task in range(n_ * c_):  # every index is checked before anything is written
        n, c = task // c_, task % c_
        for oy in range(oh):
            for ox in range(ow):
                k = indices[n, c, oy, ox]
                if k < -1 or k >= h * w:
                    raise IndexError("max_pool2d_backward: an index is out of range")
    for task in range(n_ * c_):
        n, c = task // c_, task % c_
        plane = out[n, c]
        for iy in range(h):  # explicit loops: numba's 2-D slice assignment is slower
            for ix in range(w):
                plane[iy, ix] = 0
        for oy in range(oh):
            for ox in range(ow):
                k = indices[n, c, oy, ox]
                if k >= 0:
                    plane[k // w, k % w] += g[n, c, oy, ox]
    return out


def max_pool2d_reference(x, kh, kw, sh, sw, ph, pw, dh, dw):
    """NumPy formulation of ``max_pool2d`` (``sliding_window_view`` of the ``-inf``-padded
    input); returns new ``(out, indices)`` arrays."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # (N, C, OH, OW, KH, KW)
    oh, ow = win.shape[2], win.shape[3]
    flat = win.reshape(n, c, oh, ow, kh * kw)
    local = np.argmax(flat, axis=-1)  # first maximum; a NaN counts as the maximum
    out = np.take_along_axis(flat, local[..., None], axis=-1)[..., 0]
    iy = np.arange(oh)[:, None] * sh - ph + (local // kw) * dh
    ix = np.arange(ow)[None, :] * sw - pw + (local % kw) * dw
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    indices = np.where(inside, iy * w + ix, -1).astype(np.int64)
    return out.copy(), indices


def max_pool2d_backward_reference(g, indices, shape):
    """NumPy formulation of ``max_pool2d_backward`` (unbuffered ``np.add.at``)."""
    n, c, h, w = shape
    m = g.shape[2] * g.shape[3]
    out = np.zeros((n * c, h * w), dtype=g.dtype)
    rows = np.broadcast_to(np.arange(n * c)[:, None], (n * c, m))
    cols = indices.reshape(n * c, m)
    keep = cols >= 0
    np.add.at(out, (rows[keep], cols[keep]), g.reshape(n * c, m)[keep])
    return out.reshape(shape)
