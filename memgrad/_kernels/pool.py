"""2-D max pooling over NCHW arrays: the max and its argmax in one pass, the gather of an input
at an argmax, and the scatter of a gradient to the argmax.

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
    "max_pool2d_gather",
    "max_pool2d_backward",
    "max_pool2d_reference",
    "max_pool2d_backward_reference",
]


@njit(cache=True, nogil=True)
def _max_pool2d(x, out, indices, kh, kw, sh, sw, ph, pw, dh, dw):
    n_, c_, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    if out.shape[0] != n_ or out.shape[1] != c_ or indices.shape != out.shape:
        raise ValueError("max_pool2d: out and indices must be (N, C, OH, OW) for x (N, C, H, W)")
    planes = x.reshape(n_ * c_, h * w)
    maxima = out.reshape(n_ * c_, oh * ow)
    where = indices.reshape(n_ * c_, oh * ow)
    for p in range(n_ * c_):
        plane, best_of, arg_of = planes[p], maxima[p], where[p]
        for oy in range(oh):
            y0 = oy * sh - ph
            rows_inside = y0 >= 0 and y0 + (kh - 1) * dh < h
            for ox in range(ow):
                x0 = ox * sw - pw
                if rows_inside and x0 >= 0 and x0 + (kw - 1) * dw < w:
                    arg = y0 * w + x0
                    best = plane[arg]
                    for ki in range(kh):
                        row = (y0 + ki * dh) * w + x0
                        for kj in range(kw):
                            j = row + kj * dw
                            v = plane[j]
                            # a larger value, or the first NaN: bitwise, so no branch
                            take = (v > best) | ((v != v) & (best == best))
                            best = v if take else best
                            arg = j if take else arg
                else:
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
                            v = plane[iy * w + ix]
                            if v > best or (v != v and best == best) or arg < 0:
                                best = v
                                arg = iy * w + ix
                best_of[oy * ow + ox] = best
                arg_of[oy * ow + ox] = arg
    return out, indices


def _writable_rows(api: str, *arrays: np.ndarray) -> None:
    for a in arrays:
        if not (a.flags.c_contiguous and a.flags.writeable):
            raise ValueError(f"{api}: the outputs must be C-contiguous and writeable")


def max_pool2d(x, out, indices, kh, kw, sh, sw, ph, pw, dh, dw):
    """Fill ``out`` and ``indices`` (N, C, OH, OW, C-contiguous) with the window maxima of
    ``x`` (N, C, H, W; copied when it is not C-contiguous) and their flat (H, W) positions.
    Returns ``(out, indices)``.

    A window inside the input is scanned without bounds checks and picks its maximum
    without branches (on random data a branch per element mispredicts about half the time:
    2x2 windows took 2.4 times as long); the windows at the padding take the checked loop.

    Example:
        >>> x = np.arange(9.0).reshape(1, 1, 3, 3)
        >>> out, at = max_pool2d(x, np.empty((1, 1, 1, 1)), np.empty((1, 1, 1, 1), np.int64),
        ...                      2, 2, 2, 2, 0, 0, 1, 1)
        >>> out.item(), at.item()
        (4.0, 4)
    """
    _writable_rows("max_pool2d", out, indices)
    return _max_pool2d(np.ascontiguousarray(x), out, indices, kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True, nogil=True)
def _max_pool2d_gather(x, indices, out):
    n_, c_, h, w = x.shape
    if indices.shape != out.shape or out.shape[0] != n_ or out.shape[1] != c_:
        raise ValueError("max_pool2d_gather: indices and out must be (N, C, OH, OW) for x "
                         "(N, C, H, W)")
    m = out.shape[2] * out.shape[3]
    at = indices.reshape(n_ * c_, m)
    for p in range(n_ * c_):
        for k in range(m):
            if at[p, k] < -1 or at[p, k] >= h * w:
                raise IndexError("max_pool2d_gather: an index is out of range")
    planes = x.reshape(n_ * c_, h * w)
    dst = out.reshape(n_ * c_, m)
    for p in range(n_ * c_):
        plane, row, got = planes[p], at[p], dst[p]
        for k in range(m):
            i = row[k]
            got[k] = plane[i] if i >= 0 else -np.inf
    return out


def max_pool2d_gather(x, indices, out):
    """Fill ``out`` (N, C, OH, OW, C-contiguous) with ``x[n, c]`` (N, C, H, W) at the flat
    (H, W) positions ``indices`` (N, C, OH, OW), ``-inf`` where an index is -1 (a window
    with no input element); ``x`` and ``indices`` are copied when not C-contiguous. An index
    outside [-1, H * W) raises IndexError before anything is written. Returns ``out``.

    Example:
        >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
        >>> max_pool2d_gather(x, np.array([[[[3, -1]]]]), np.empty((1, 1, 1, 2)))
        array([[[[  3., -inf]]]])
    """
    _writable_rows("max_pool2d_gather", out)
    return _max_pool2d_gather(np.ascontiguousarray(x), np.ascontiguousarray(indices), out)


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
    input, and of a mask of the input's positions: of equal values an input element wins
    over the padding); returns new ``(out, indices)`` arrays."""
    n, c, h, w = x.shape
    pads = ((0, 0), (0, 0), (ph, ph), (pw, pw))
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)

    def windows(a):  # (N, C, OH, OW, KH * KW)
        win = np.lib.stride_tricks.sliding_window_view(a, span, axis=(2, 3))
        win = win[:, :, ::sh, ::sw, ::dh, ::dw]
        return win.reshape(*win.shape[:4], kh * kw)

    flat = windows(np.pad(x, pads, constant_values=-np.inf))
    inside = windows(np.pad(np.ones(x.shape, bool), pads, constant_values=False))
    nan = np.isnan(flat)
    # the first NaN, else the first input element equal to the window's maximum
    top = np.where(nan.any(-1, keepdims=True), nan,
                   inside & (flat == np.max(np.where(nan, -np.inf, flat), -1, keepdims=True)))
    local = np.argmax(top, axis=-1)
    found = np.take_along_axis(top, local[..., None], axis=-1)[..., 0]
    out = np.where(found, np.take_along_axis(flat, local[..., None], axis=-1)[..., 0], -np.inf)
    oh, ow = out.shape[2], out.shape[3]
    iy = np.arange(oh)[:, None] * sh - ph + (local // kw) * dh
    ix = np.arange(ow)[None, :] * sw - pw + (local % kw) * dw
    indices = np.where(found, iy * w + ix, -1).astype(np.int64)
    return out.astype(x.dtype), indices


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
