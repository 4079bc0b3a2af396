"""Winograd F(2x2, 3x3) transforms of a 3x3, stride-1 convolution, one NCHW sample at a time.

The output is cut into 2x2 tiles, ``TH = ceil(OH/2)`` rows of ``TW = ceil(OW/2)``; tile
``(ty, tx)`` covers outputs ``(2ty + i, 2tx + j)`` and reads the 4x4 window of the padded
input from ``(2ty, 2tx)``. With ``B^T``, ``G`` and ``A^T`` the matrices of Lavin and Gray's
F(2x2, 3x3),

    out_tile[co] = A^T (sum_c (G w[co, c] G^T) * (B^T d_tile[c] B)) A

(``*`` elementwise), so each of the 16 positions ``p`` of the transformed 4x4 tiles is one
``(CO, C) @ (C, T)`` product (NOTE [ Winograd convolution ] in memgrad/ops/conv.py).

Tile layout: a row of tiles holds ``R = TW + 1`` entries, the last a spare one, so that tile
``k = ty*R + tx`` reads its window at the same offsets from ``k`` in every row (each
transform is then a few long unit-strided loops, which LLVM vectorises). Per channel there
are ``S = TH*R`` entries; ``v[p, c*S + k]``. The spare entries hold finite values that no
output reads (``winograd_grad`` sets its spares to 0, so they add nothing to the weight
gradient).

* ``winograd_input``: ``v[p, c*S + k] = (B^T d_tile B)[p]``; positions outside the input
  (padding, or past its end where the last tile overhangs) read as 0.
* ``winograd_output``: ``out[co, 2ty + i, 2tx + j] = bias[co] + (A^T m_tile A)[i, j]`` from
  ``m[p, co*S + k]``; outputs past ``OH``/``OW`` are dropped.
* ``winograd_grad``: ``mg[p, co*S + k] = (A g_tile A^T)[p]`` for the weight gradient's
  ``g`` (CO, OH, OW); outputs past ``OH``/``OW`` read as 0. It also adds each channel's sum
  of ``g``, in float64, into ``sums`` (CO,) when that has a value per channel (the bias
  gradient, from the copy of ``g`` the transform reads anyway), and leaves an empty one
  alone.

The kernels are serial (NOTE [ Serial kernels ] in memgrad/ops/conv.py) and take no
defaulted arguments.
"""

import functools

import numpy as np
from numba import njit

from memgrad._kernels.softmax import row_sum

__all__ = ["BT", "G", "AT", "transform_terms", "winograd_input", "winograd_output",
           "winograd_grad", "winograd_input_reference", "winograd_output_reference",
           "winograd_grad_reference"]

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


@njit(cache=True, nogil=True)
def _split(plane, q, r, size, ph, pw):
    """Copy ``plane`` (h, w), padded by ``ph``/``pw``, into its four (row, column) parities
    in ``q``: padded entry ``(2a + rp, 2b + cp)`` at ``q[(2*rp + cp)*size + a*r + b]``. Only
    the entries inside ``plane`` are written: ``q`` is zeroed once and every call of a
    convolution writes the same ones."""
    h, w = plane.shape
    for iy in range(h):
        y = iy + ph
        src = plane[iy]
        for cp in range(2):
            b0 = (pw - cp + 1) // 2 if pw > cp else 0  # first b with 2b + cp - pw >= 0
            b1 = (w - 1 + pw - cp) // 2  # last b inside the row
            if b1 < b0:
                continue
            start = 2 * b0 + cp - pw  # 0 or 1
            dst = q[(2 * (y % 2) + cp) * size + (y // 2) * r + b0:]
            line = src[start:]
            for i in range(b1 - b0 + 1):
                dst[i] = line[2 * i]


@functools.lru_cache(maxsize=64)
def transform_terms(which: str, r: int, plane: int,
                    dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (int64) and signs (of ``dtype``), (16, 4) each, of the 16 positions ``4i + j`` of
    ``mat d mat^T`` for the ``size`` x ``size`` window ``d`` of tile ``k``: ``d[y, x]`` at
    ``k + offset`` of the parities of ``_split`` (rows of ``r``, ``plane`` entries a
    parity). ``which`` is "input" (``B^T d B``, 4x4 windows: four terms each) or "grad"
    (``A y A^T``, 2x2: one, two or four), whose unused terms read a fifth parity, of zeros.
    Cached, read-only.

    Example:
        >>> offsets, signs = transform_terms("input", 2, 4, np.dtype(np.float32))
        >>> offsets.shape, signs.dtype
        ((16, 4), dtype('float32'))
    """
    mat, size = (BT, 4) if which == "input" else (AT.T, 2)
    offsets = np.full((16, 4), 4 * plane, dtype=np.int64)
    signs = np.ones((16, 4), dtype=dtype)
    for i in range(4):
        for j in range(4):
            t = 0
            for y in range(size):
                for x in range(size):
                    s = mat[i, y] * mat[j, x]
                    if s:
                        offsets[4 * i + j, t] = ((2 * (y % 2) + x % 2) * plane
                                                 + (y // 2) * r + x // 2)
                        signs[4 * i + j, t] = s
                        t += 1
    offsets.flags.writeable = signs.flags.writeable = False
    return offsets, signs


@njit(cache=True, nogil=True)
def _winograd_input(x, v, ph, pw, th, tw, offsets, signs):
    c_, h, w = x.shape
    r = tw + 1
    per = th * r
    if ph < 0 or pw < 0 or th < 1 or tw < 1:
        raise ValueError("winograd_input: padding must be non-negative, tiles positive")
    if h + ph > 2 * th + 2 or w + pw > 2 * r:
        raise ValueError("winograd_input: the tiles do not cover the input")
    if v.shape[0] != 16 or v.shape[1] < c_ * per:
        raise ValueError("winograd_input: v must be (16, L), L >= C*TH*(TW + 1), for x (C, H, W)")
    if offsets.shape != (16, 4) or signs.shape != (16, 4):
        raise ValueError("winograd_input: offsets and signs must be (16, 4)")
    # the padded plane in its four (row, column) parities, TH + 2 rows of R each (the last
    # row zero, for the spare entries): each load of the transform is then at a fixed
    # offset from the tile, unit-strided
    size = (th + 2) * r
    q = np.zeros(4 * size, dtype=x.dtype)
    for c in range(c_):
        _split(x[c], q, r, size, ph, pw)
        for p in range(16):
            # written out here, not called: a call per position took twice as long
            o, s = offsets[p], signs[p]
            a, b, cc, d = q[o[0]:], q[o[1]:], q[o[2]:], q[o[3]:]
            sa, sb, sc, sd = s[0], s[1], s[2], s[3]
            dst = v[p, c * per:(c + 1) * per]
            for k in range(per):
                dst[k] = sa * a[k] + sb * b[k] + sc * cc[k] + sd * d[k]
    return v


def winograd_input(x: np.ndarray, v: np.ndarray, ph: int, pw: int, th: int, tw: int):
    """Fill ``v`` (16, L), ``L >= C*TH*(TW + 1)``, with the transformed 4x4 input tiles of one
    sample ``x`` (C, H, W) padded by ``ph``/``pw`` zeros on each side (layout in the module
    docstring); shapes are checked first (ValueError). Returns ``v``.

    Example:
        >>> v = winograd_input(np.ones((1, 2, 2)), np.empty((16, 2)), 1, 1, 1, 1)
        >>> v[:, 0].reshape(4, 4)
        array([[ 1., -2.,  0., -1.],
               [-2.,  4.,  0.,  2.],
               [ 0.,  0.,  0.,  0.],
               [-1.,  2.,  0.,  1.]])
    """
    offsets, signs = transform_terms("input", tw + 1, (th + 2) * (tw + 1), x.dtype)
    return _winograd_input(x, v, ph, pw, th, tw, offsets, signs)


@njit(cache=True, nogil=True)
def _grid(oh, ow):
    """The layout of an (OH, OW) output plane's TH x TW tiles (2x2 outputs each): its row
    length ``R = TW + 1`` and its entries per channel, ``TH * R``."""
    r = (ow + 1) // 2 + 1
    return r, (oh + 1) // 2 * r


@njit(cache=True, nogil=True)
def _winograd_output(m, bias, out):
    co_, oh, ow = out.shape
    r, per = _grid(oh, ow)
    if m.shape[0] != 16 or m.shape[1] < co_ * per:
        raise ValueError("winograd_output: m must be (16, L), L >= CO*TH*(TW + 1), TH = "
                         "ceil(OH/2), TW = ceil(OW/2), for out (CO, OH, OW)")
    if bias.shape[0] != co_:
        raise ValueError("winograd_output: bias must have one value per output channel")
    # A^T m A in two passes: the columns' combinations t[l, j] = sum_l' AT[j, l'] m[4l + l'],
    # then y[i] = bias + sum_l AT[i, l] t[l, :], its (i, 0) and (i, 1) outputs interleaved as
    # in the output rows, which are then contiguous copies
    t = np.empty((4, 2, per), dtype=out.dtype)
    y = np.empty((2, 2 * per), dtype=out.dtype)
    for co in range(co_):
        base = co * per
        for row in range(4):
            m0, m1 = m[4 * row, base:], m[4 * row + 1, base:]
            m2, m3 = m[4 * row + 2, base:], m[4 * row + 3, base:]
            t0, t1 = t[row, 0], t[row, 1]
            for k in range(per):
                t0[k] = m0[k] + m1[k] + m2[k]
                t1[k] = m1[k] - m2[k] - m3[k]
        b = bias[co]
        y0, y1 = y[0], y[1]
        a0, a1, a2, a3 = t[0, 0], t[1, 0], t[2, 0], t[3, 0]
        c0, c1, c2, c3 = t[0, 1], t[1, 1], t[2, 1], t[3, 1]
        for k in range(per):
            y0[2 * k] = b + (a0[k] + a1[k] + a2[k])
            y0[2 * k + 1] = b + (c0[k] + c1[k] + c2[k])
            y1[2 * k] = b + (a1[k] - a2[k] - a3[k])
            y1[2 * k + 1] = b + (c1[k] - c2[k] - c3[k])
        plane = out[co]
        for oy in range(oh):
            src = y[oy % 2, 2 * (oy // 2) * r:]
            line = plane[oy]
            for ox in range(ow):
                line[ox] = src[ox]
    return out


def winograd_output(m: np.ndarray, bias: np.ndarray, out: np.ndarray):
    """Fill one sample's ``out`` (CO, OH, OW) with ``bias`` plus the inverse transform of the
    products ``m`` (16, L), ``L >= CO*TH*(TW + 1)`` (layout in the module docstring); shapes
    are checked first (ValueError). Returns ``out``.

    Example:
        >>> m = np.zeros((16, 2))
        >>> m[5, 0] = 1.0  # the centre of the 4x4 tile reaches all four outputs
        >>> winograd_output(m, np.zeros(1), np.empty((1, 2, 2)))[0]
        array([[1., 1.],
               [1., 1.]])
    """
    return _winograd_output(m, bias, out)


@njit(cache=True, nogil=True)
def _winograd_grad(g, mg, offsets, signs, sums):
    co_, oh, ow = g.shape
    r, per = _grid(oh, ow)
    if mg.shape[0] != 16 or mg.shape[1] < co_ * per:
        raise ValueError("winograd_grad: mg must be (16, L), L >= CO*TH*(TW + 1), TH = "
                         "ceil(OH/2), TW = ceil(OW/2), for g (CO, OH, OW)")
    if offsets.shape != (16, 4) or signs.shape != (16, 4):
        raise ValueError("winograd_grad: offsets and signs must be (16, 4)")
    if sums.shape[0] != 0 and sums.shape[0] != co_:
        raise ValueError("winograd_grad: sums must be empty or have one value per channel of g")
    # the four parities of g (zero past OH and OW, so the spares read 0) and a fifth of
    # zeros for the unused terms: every position is then one loop of four terms (loops of
    # one or two terms, picked per position, took twice as long)
    q = np.zeros(5 * per, dtype=g.dtype)
    for co in range(co_):
        _split(g[co], q, r, per, 0, 0)
        if sums.shape[0] != 0:
            sums[co] += row_sum(q[:4 * per])  # every element of g[co] once, and zeros
        for p in range(16):
            o = offsets[p]
            s0, s1, s2, s3 = signs[p, 0], signs[p, 1], signs[p, 2], signs[p, 3]
            a, b, c, d = q[o[0]:], q[o[1]:], q[o[2]:], q[o[3]:]
            dst = mg[p, co * per:(co + 1) * per]
            for k in range(per):
                dst[k] = s0 * a[k] + s1 * b[k] + s2 * c[k] + s3 * d[k]
    return mg


_NO_SUMS = np.empty(0)


def winograd_grad(g: np.ndarray, mg: np.ndarray, sums: np.ndarray = _NO_SUMS):
    """Fill ``mg`` (16, L), ``L >= CO*TH*(TW + 1)``, with the transformed 2x2 tiles of one
    sample's output gradient ``g`` (CO, OH, OW) (layout in the module docstring; outputs
    past ``OH``/``OW`` and the spare entries read as 0), and add each channel's sum of ``g``
    into ``sums`` (CO,) float64 if given; shapes are checked first (ValueError). Returns
    ``mg``.

    Example:
        >>> winograd_grad(np.ones((1, 1, 1)), np.empty((16, 2)))[:, 0].reshape(4, 4)
        array([[1., 1., 1., 0.],
               [1., 1., 1., 0.],
               [1., 1., 1., 0.],
               [0., 0., 0., 0.]])
        >>> sums = np.zeros(2)
        >>> _ = winograd_grad(np.ones((2, 3, 3)), np.empty((16, 12)), sums)
        >>> sums
        array([9., 9.])
    """
    th, tw = (g.shape[1] + 1) // 2, (g.shape[2] + 1) // 2
    offsets, signs = transform_terms("grad", tw + 1, th * (tw + 1), g.dtype)
    return _winograd_grad(g, mg, offsets, signs, sums)


def _tiles(a: np.ndarray, size: int, th: int, tw: int) -> np.ndarray:
    """(C, TH, TW, size, size) windows of ``a`` (C, ., .) from (2ty, 2tx), zeros past its
    end."""
    _, h, w = a.shape
    need_h, need_w = 2 * (th - 1) + size, 2 * (tw - 1) + size
    a = np.pad(a, ((0, 0), (0, max(0, need_h - h)), (0, max(0, need_w - w))))
    win = np.lib.stride_tricks.sliding_window_view(a, (size, size), axis=(1, 2))
    return win[:, : 2 * th : 2, : 2 * tw : 2]


def winograd_input_reference(x, ph, pw, th, tw):
    """NumPy formulation of ``winograd_input``: returns a new (16, C, TH, TW) array (the
    kernel's entries without the spares)."""
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw)))
    return np.einsum("ik,ctukl,jl->ijctu", BT, _tiles(xp, 4, th, tw), BT).reshape(
        16, x.shape[0], th, tw).astype(x.dtype)


def winograd_output_reference(m, bias, oh, ow):
    """NumPy formulation of ``winograd_output`` for ``m`` (16, CO, TH, TW) without the
    spares; returns a new (CO, OH, OW) array."""
    _, co, th, tw = m.shape
    y = np.einsum("ik,klctu,jl->ctiuj", AT, m.reshape(4, 4, co, th, tw), AT)
    full = y.reshape(co, 2 * th, 2 * tw)[:, :oh, :ow]
    return (full + bias[:, None, None]).astype(m.dtype)


def winograd_grad_reference(g):
    """NumPy formulation of ``winograd_grad``: returns a new (16, CO, TH, TW) array (the
    kernel's entries without the spares)."""
    co, oh, ow = g.shape
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    return np.einsum("ki,ctukl,lj->ijctu", AT, _tiles(g, 2, th, tw), AT).reshape(
        16, co, th, tw).astype(g.dtype)
