"""im2col and col2im: the data movement of a 2-D convolution over NCHW arrays.

Column layout: ``col[c, ki, kj, n, oy, ox] = x_pad[n, c, oy*sh + ki*dh, ox*sw + kj*dw]``,
where ``x_pad`` is ``x`` with ``ph``/``pw`` zeros on each side. Viewed as a matrix it is
``(C*KH*KW, N*OH*OW)``; each sample's ``(C*KH*KW, OH*OW)`` slice is one GEMM operand
(NOTE [ Convolution as one GEMM ] in memgrad/ops/conv.py). The kernel sizes and the output
size are read from ``col``'s shape.

Both kernels are serial: see NOTE [ Serial kernels ] in memgrad/ops/conv.py. They take no
defaulted arguments: numba's dispatch of a call that leaves one out costs about 0.1 ms, as
much as the im2col of one 32x32x32 sample.
"""

import numpy as np
from numba import njit

__all__ = ["im2col", "col2im", "im2col_reference", "col2im_reference"]


@njit(cache=True, nogil=True)
def im2col(x, col, sh, sw, ph, pw, dh, dw):
    """Fill ``col`` (C, KH, KW, N, OH, OW) with the patches of ``x`` (N, C, H, W).

    Positions in the zero padding get 0. Returns ``col``.

    Example:
        >>> x = np.arange(9.0).reshape(1, 1, 3, 3)
        >>> col = im2col(x, np.empty((1, 2, 2, 1, 2, 2)), 1, 1, 0, 0, 1, 1)
        >>> col[0, :, :, 0, 0, 0]  # the first 2x2 patch
        array([[0., 1.],
               [3., 4.]])
    """
    n_, c_, h, w = x.shape
    kh, kw, oh, ow = col.shape[1], col.shape[2], col.shape[4], col.shape[5]
    # one zero-padded plane at a time: every patch row is then one unconditional copy, with
    # no per-row bounds logic or short zero-fill loops (which cost more than the copying)
    plane = np.zeros((h + 2 * ph, w + 2 * pw), dtype=x.dtype)
    # channel-major order: consecutive planes write adjacent (OH, OW) blocks of ``col``
    for task in range(n_ * c_):
        c, n = task // n_, task % n_
        src = x[n, c]
        for iy in range(h):  # explicit loops: numba's 2-D slice assignment is slower
            dst = plane[iy + ph, pw:]
            for ix in range(w):
                dst[ix] = src[iy, ix]  # the border stays zero
        for ki in range(kh):
            for oy in range(oh):
                line = plane[oy * sh + ki * dh]
                for kj in range(kw):
                    row = col[c, ki, kj, n, oy]
                    part = line[kj * dw :]
                    if sw == 1:
                        for ox in range(ow):
                            row[ox] = part[ox]
                    else:
                        for ox in range(ow):
                            row[ox] = part[ox * sw]
    return col


@njit(cache=True, nogil=True)
def col2im(col, out, sh, sw, ph, pw, dh, dw):
    """Sum the patches of ``col`` (C, KH, KW, N, OH, OW) back into ``out`` (N, C, H, W).

    The inverse data movement of ``im2col``: every column entry is added to the input position
    it was read from (overlapping patches add up; padding positions are dropped). ``out`` is
    overwritten, so it may be uninitialised. Returns ``out``.

    Example:
        >>> col2im(np.ones((1, 2, 2, 1, 2, 2)), np.empty((1, 1, 3, 3)), 1, 1, 0, 0, 1, 1)[0, 0]
        array([[1., 2., 1.],
               [2., 4., 2.],
               [1., 2., 1.]])
    """
    n_, c_, h, w = out.shape
    kh, kw, oh, ow = col.shape[1], col.shape[2], col.shape[4], col.shape[5]
    hp, wp = h + 2 * ph, w + 2 * pw
    plane = np.empty((hp, wp), dtype=out.dtype)
    for task in range(n_ * c_):
        n, c = task // c_, task % c_
        for iy in range(hp):  # explicit loops: numba's 2-D slice assignment is slower
            for ix in range(wp):
                plane[iy, ix] = 0
        for ki in range(kh):
            for kj in range(kw):
                block = col[c, ki, kj, n]
                for oy in range(oh):
                    row = block[oy]
                    part = plane[oy * sh + ki * dh, kj * dw :]
                    if sw == 1:
                        for ox in range(ow):
                            part[ox] += row[ox]
                    else:
                        for ox in range(ow):
                            part[ox * sw] += row[ox]
        target = out[n, c]
        for iy in range(h):
            line = plane[iy + ph, pw:]
            for ix in range(w):
                target[iy, ix] = line[ix]
    return out


def im2col_reference(x, kh, kw, sh, sw, ph, pw, dh, dw):
    """NumPy formulation of ``im2col`` (``sliding_window_view`` of the padded input); returns
    a new (C, KH, KW, N, OH, OW) array."""
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # (N, C, OH, OW, KH, KW)
    return np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3))


def col2im_reference(col, shape, sh, sw, ph, pw, dh, dw):
    """NumPy formulation of ``col2im``: one strided slice-add per kernel offset (positions
    within one offset never repeat, so ``+=`` is exact); returns a new array of ``shape``."""
    n, c, h, w = shape
    _, kh, kw, _, oh, ow = col.shape
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=col.dtype)
    for ki in range(kh):
        for kj in range(kw):
            ys = slice(ki * dh, ki * dh + (oh - 1) * sh + 1, sh)
            xs = slice(kj * dw, kj * dw + (ow - 1) * sw + 1, sw)
            xp[:, :, ys, xs] += col[:, ki, kj].transpose(1, 0, 2, 3)
    return xp[:, :, ph : ph + h, pw : pw + w].copy()
