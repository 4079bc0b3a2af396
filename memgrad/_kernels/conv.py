"""im2col, col2im and im2row: the data movement of a 2-D convolution over NCHW arrays.

Column layout: ``col[c, ki, kj, n, oy, ox] = x_pad[n, c, oy*sh + ki*dh, ox*sw + kj*dw]``,
where ``x_pad`` is ``x`` with ``ph``/``pw`` zeros on each side. Viewed as a matrix it is
``(C*KH*KW, N*OH*OW)``; each sample's ``(C*KH*KW, OH*OW)`` slice is one GEMM operand
(NOTE [ Convolution as one GEMM ] in memgrad/ops/conv.py). The kernel sizes and the output
size are read from ``col``'s shape.

``im2row`` moves about ``1/KH`` as much, for a convolution of stride 1 along the height:
``rows[n, c, kj, y, ox] = x_pad[n, c, y, ox*sw + kj*dw]`` for every row ``y`` of the padded
input. Each kernel row ``ki`` then reads a window of it, the rows ``ki*dh`` to ``ki*dh + OH``
(NOTE [ Row-shifted convolution ] in memgrad/ops/conv.py).

The kernels are serial: see NOTE [ Serial kernels ] in memgrad/ops/conv.py. They take no
defaulted arguments: numba's dispatch of a call that leaves one out costs about 0.1 ms, as
much as the im2col of one 32x32x32 sample.
"""

import numpy as np
from numba import njit

__all__ = ["im2col", "col2im", "im2row", "row_sum", "im2col_reference", "col2im_reference",
           "im2row_reference", "row_sum_reference"]


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


@njit(cache=True, nogil=True)
def im2row(x, rows, sw, ph, pw, dw):
    """Fill ``rows`` (N, C, KW, H + 2*ph, OW) with ``x_pad[n, c, y, ox*sw + kj*dw]`` (``x``
    (N, C, H, W) with ``ph``/``pw`` zeros on each side); positions in the padding get 0.

    The kernel width and the output width are read from ``rows``' shape, which is checked
    against ``x`` first (ValueError). Returns ``rows``.

    Example:
        >>> x = np.arange(6.0).reshape(1, 1, 2, 3)
        >>> im2row(x, np.empty((1, 1, 2, 2, 2)), 1, 0, 0, 1)[0, 0]  # kj = 0, then kj = 1
        array([[[0., 1.],
                [3., 4.]],
        <BLANKLINE>
               [[1., 2.],
                [4., 5.]]])
    """
    n_, c_, h, w = x.shape
    kw, hp, ow = rows.shape[2], rows.shape[3], rows.shape[4]
    if sw < 1 or dw < 1 or ph < 0 or pw < 0:
        raise ValueError("im2row: stride and dilation must be positive, padding non-negative")
    if rows.shape[0] != n_ or rows.shape[1] != c_ or hp != h + 2 * ph:
        raise ValueError("im2row: rows must be (N, C, KW, H + 2*ph, OW) for x (N, C, H, W)")
    if ow < 1 or (ow - 1) * sw + (kw - 1) * dw > w + 2 * pw - 1:
        raise ValueError("im2row: the last window reaches past the padded input")
    for n in range(n_):
        for c in range(c_):
            for kj in range(kw):
                shift = kj * dw - pw  # input column of output column 0
                block = rows[n, c, kj]
                for y in range(hp):
                    row = block[y]
                    iy = y - ph
                    if iy < 0 or iy >= h:
                        for ox in range(ow):
                            row[ox] = 0
                        continue
                    src = x[n, c, iy]
                    # one bounds test per element, which LLVM turns into a vector select: a
                    # loop over the columns inside x alone was 3.5 times slower (its start is
                    # not known to be >= 0, so every index gets a wraparound test)
                    for ox in range(ow):
                        ix = ox * sw + shift
                        row[ox] = src[ix] if 0 <= ix < w else 0
    return rows


@njit(cache=True, nogil=True)
def row_sum(partial, bias, out, shift):
    """Fill ``out`` (CO, L) with ``bias[co] + sum_ki partial[ki, co, ki*shift + q]``:
    ``partial`` (KH, CO, P) holds every kernel row's products with the whole rows of
    ``im2row``, and kernel row ki's part of the output is its window that starts ``ki*shift``
    columns in (NOTE [ Row-shifted convolution ] in memgrad/ops/conv.py).

    The shapes are checked first (ValueError). The terms are added in the order of ``ki``,
    after the bias. Returns ``out``.

    Example:
        >>> partial = np.arange(12.0).reshape(2, 1, 6)  # two kernel rows, one channel
        >>> row_sum(partial, np.zeros(1), np.empty((1, 4)), 2)  # [0..3] + [8..11]
        array([[ 8., 10., 12., 14.]])
    """
    kh, co_, p = partial.shape
    length = out.shape[1]
    if out.shape[0] != co_ or bias.shape[0] != co_:
        raise ValueError("row_sum: partial (KH, CO, P), bias (CO,) and out (CO, L) must "
                         "agree on CO")
    if shift < 0 or (kh - 1) * shift + length > p:
        raise ValueError("row_sum: the last kernel row's window reaches past partial")
    # the first (up to) three kernel rows in one pass over ``out``, the others one pass each:
    # the same sums in the same order as a pass per kernel row, in 0.6 times the time for a
    # 3x3 kernel (W3's shapes, one sample)
    for co in range(co_):
        row = out[co]
        b = bias[co]
        s0 = partial[0, co]
        if kh >= 3:
            s1, s2 = partial[1, co, shift:], partial[2, co, 2 * shift:]
            for q in range(length):
                row[q] = b + s0[q] + s1[q] + s2[q]
        elif kh == 2:
            s1 = partial[1, co, shift:]
            for q in range(length):
                row[q] = b + s0[q] + s1[q]
        else:
            for q in range(length):
                row[q] = b + s0[q]
        for ki in range(3, kh):
            src = partial[ki, co, ki * shift :]
            for q in range(length):
                row[q] += src[q]
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


def im2row_reference(x, kw, ow, sw, ph, pw, dw):
    """NumPy formulation of ``im2row``: strided slices of the padded input; returns a new
    (N, C, KW, H + 2*ph, OW) array."""
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return np.stack([xp[..., kj * dw : kj * dw + (ow - 1) * sw + 1 : sw] for kj in range(kw)],
                    axis=2)


def row_sum_reference(partial, bias, length, shift):
    """NumPy formulation of ``row_sum``: the bias plus each kernel row's window, added in
    order; returns a new (CO, length) array."""
    out = np.broadcast_to(bias[:, None], (partial.shape[1], length)).astype(partial.dtype)
    for ki in range(partial.shape[0]):
        out = out + partial[ki, :, ki * shift : ki * shift + length]
    return out
