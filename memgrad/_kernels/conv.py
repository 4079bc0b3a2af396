"""im2col and col2im: the data movement of a 2-D convolution over NCHW arrays.

Column layout: ``col[c, ki, kj, n, oy, ox] = x_pad[n, c, oy*sh + ki*dh, ox*sw + kj*dw]``,
where ``x_pad`` is ``x`` with ``ph``/``pw`` zeros on each side. Viewed as a matrix it is
``(C*KH*KW, N*OH*OW)``, so a convolution over the whole batch is one GEMM
``weight(CO, C*KH*KW) @ col``: one wide GEMM runs two to three times faster on BLAS than a
batch of per-sample GEMMs with only CO rows each. The kernel sizes and the output size are
read from ``col``'s shape.

The kernels are serial and take a range of (sample, channel) planes, so that the caller can
split one call over two threads: see NOTE [ Kernel threads ] in memgrad/ops/conv.py.
"""

import numpy as np
from numba import njit

__all__ = ["im2col", "col2im", "im2col_reference", "col2im_reference"]


@njit(cache=True, nogil=True)
def im2col(x, col, sh, sw, ph, pw, dh, dw, start=0, stop=-1):
    """Fill ``col`` (C, KH, KW, N, OH, OW) with the patches of ``x`` (N, C, H, W).

    Positions in the zero padding get 0. Only the (sample, channel) planes ``start <= n*C + c
    < stop`` are done (``stop=-1``: all), so that two threads can share the work. Returns
    ``col``.
    """
    n_, c_, h, w = x.shape
    kh, kw, oh, ow = col.shape[1], col.shape[2], col.shape[4], col.shape[5]
    # one zero-padded plane at a time: every patch row is then one unconditional copy, with
    # no per-row bounds logic or short zero-fill loops (which cost more than the copying)
    plane = np.zeros((h + 2 * ph, w + 2 * pw), dtype=x.dtype)
    for task in range(start, n_ * c_ if stop < 0 else stop):
        n, c = task // c_, task % c_
        plane[ph : ph + h, pw : pw + w] = x[n, c]  # the border stays zero
        for ki in range(kh):
            for kj in range(kw):
                dst = col[c, ki, kj, n]
                for oy in range(oh):
                    row = dst[oy]
                    src = plane[oy * sh + ki * dh, kj * dw :]
                    if sw == 1:
                        for ox in range(ow):
                            row[ox] = src[ox]
                    else:
                        for ox in range(ow):
                            row[ox] = src[ox * sw]
    return col


@njit(cache=True, nogil=True)
def col2im(col, out, sh, sw, ph, pw, dh, dw, start=0, stop=-1):
    """Sum the patches of ``col`` (C, KH, KW, N, OH, OW) back into ``out`` (N, C, H, W).

    The inverse data movement of ``im2col``: every column entry is added to the input position
    it was read from (overlapping patches add up; padding positions are dropped). The planes
    of ``out`` in ``[start, stop)`` are overwritten (``stop=-1``: all), so ``out`` may be
    uninitialised. Returns ``out``.
    """
    n_, c_, h, w = out.shape
    kh, kw, oh, ow = col.shape[1], col.shape[2], col.shape[4], col.shape[5]
    plane = np.empty((h + 2 * ph, w + 2 * pw), dtype=out.dtype)
    for task in range(start, n_ * c_ if stop < 0 else stop):
        n, c = task // c_, task % c_
        plane[:, :] = 0
        for ki in range(kh):
            for kj in range(kw):
                src = col[c, ki, kj, n]
                for oy in range(oh):
                    row = src[oy]
                    dst = plane[oy * sh + ki * dh, kj * dw :]
                    if sw == 1:
                        for ox in range(ow):
                            dst[ox] += row[ox]
                    else:
                        for ox in range(ow):
                            dst[ox * sw] += row[ox]
        out[n, c] = plane[ph : ph + h, pw : pw + w]
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
