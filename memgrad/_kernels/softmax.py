"""Row-wise softmax and log-softmax, forward and backward, the scaled and causally masked
softmax of attention (``scaled_softmax_*``), and the vectorizable ``exp`` they (and the
cross-entropy kernels) are built on.

Every kernel takes C-contiguous (N, D) float32 or float64 arrays and works on each row
independently, returning a new (N, D) array of the input's dtype (the ``*_into`` forms
write into a given ``out`` instead, so that parts of the rows can run on several threads).
Sums accumulate in float64; the element-wise arithmetic after them runs in the input's
dtype (``x.dtype.type(s)``), so that float32 rows fill eight SIMD lanes, not four. A row
that is all ``-inf`` gives NaN, as in PyTorch.

Why they are fast: one pass per row over data that stays in cache replaces NumPy's four to
six passes over the whole array, each with a temporary (``*_reference`` are those NumPy
formulations). Two things keep the row loops vectorized. The row reductions are separate
functions compiled with reassociation allowed (a strict left-to-right float sum cannot use
SIMD lanes), and the row max is taken with LLVM's ``maxnum`` (``_max_lanes``): numba's
``max`` is a compare and a select that LLVM does not vectorize, and ran at a quarter of a
float32 row's whole softmax; the other arithmetic keeps IEEE semantics. And float32
``exp`` is ``fast_exp``, a polynomial with no libm call, evaluated with fused
multiply-adds (``_fma``): a loop calling libm's ``expf`` runs one element at a time, and
was slower than NumPy's SIMD ``exp``. ``fast_exp`` (float64 too) serves the activation and
cross-entropy kernels as well. All kernels are compiled with
``error_model="numpy"``: IEEE results on division by zero, and no checks in the loops.
"""

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

__all__ = [
    "fast_exp",
    "row_max",
    "row_sum",
    "softmax_forward",
    "log_softmax_forward",
    "softmax_backward",
    "log_softmax_backward",
    "softmax_forward_into",
    "log_softmax_forward_into",
    "softmax_backward_into",
    "log_softmax_backward_into",
    "scaled_softmax_forward",
    "scaled_softmax_backward",
    "scaled_softmax_forward_into",
    "scaled_softmax_backward_into",
    "softmax_forward_reference",
    "log_softmax_forward_reference",
    "softmax_backward_reference",
    "log_softmax_backward_reference",
    "scaled_softmax_forward_reference",
    "scaled_softmax_backward_reference",
]


# NOTE [ Estrin's scheme ]
# The polynomials of fast_exp and of the activation kernels (their exp and the normal CDF)
# are evaluated in Estrin's scheme: pairs of coefficients c_k + c_{k+1} r, then pairs of
# those with r^2, then with r^4 and so on, so that a polynomial of degree n is a chain of
# about log2(n) + 1 dependent multiply-adds instead of Horner's n. The loops over an array
# are vectorized but latency-bound: each element's chain (its range reduction, the
# polynomial, the scaling) is longer than the out-of-order window can overlap, and the
# shorter chains made the float32 exact GELU kernels 1.34x faster, the others 4-15%. The
# same terms are added in another order, so a result may differ from Horner's in its last
# bit: measured, float32 exp within 1.005 ulp of the exact value over 23 million inputs
# (1.003 with Horner's), float64 exp within 0.89 ulp (0.88) because its last two steps,
# 1 + r (1 + r q), stay Horner's (Estrin's to the end gave 2.2), and the float32 GELU
# results identical on 3 million inputs (their float64 arithmetic rounds once to float32).


def fast_exp(y):
    """``exp(y)`` as a branch-free polynomial that LLVM vectorizes (libm's ``exp`` runs one
    element at a time). Float32 ``y``: Cephes' ``expf``, in float32 lanes, relative error
    below 1.2e-7. Float64 ``y``: Taylor to degree 13, within 1 ulp (measured over
    [-745, 710]). Subnormal results, 0, inf and NaN come out as IEEE says. Run as plain
    Python (``NUMBA_DISABLE_JIT=1``) it is ``math.exp``, with inf for an overflow (where
    ``math.exp`` raises).

    Call it only from functions compiled without ``fastmath``: reassociation would undo its
    exact range reduction. numba's cache does not notice a change here in the kernels of
    other modules that inline it (activation.py, loss.py): after editing it, delete
    ``memgrad/_kernels/__pycache__``.
    """
    try:
        return math.exp(y)
    except OverflowError:
        return math.inf


def _fma(a, b, c):
    """``a * b + c`` rounded once (LLVM's ``fma``: one instruction on x86-64 with FMA).
    Floats of one type; plain Python rounds twice (it serves only compiled code)."""
    return a * b + c


@intrinsic
def _fma_intrinsic(typingctx, a, b, c):
    if not (a == b == c and isinstance(a, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        t = args[0].type
        fn = builder.module.declare_intrinsic("llvm.fma", [t], ir.FunctionType(t, [t, t, t]))
        return builder.call(fn, args)

    return a(a, b, c), codegen


@overload(_fma)
def _fma_overload(a, b, c):
    return lambda a, b, c: _fma_intrinsic(a, b, c)


def _max_lanes(a, b):
    """``max(a, b)`` of two floats of one type, as LLVM's ``maxnum`` with no-NaN and
    reassociation allowed: a loop that takes it over an array is a reduction LLVM
    vectorizes (numba's ``max`` compiles to a compare and select that it does not). A NaN
    operand gives an unspecified result."""
    return max(a, b)


@intrinsic
def _max_lanes_intrinsic(typingctx, a, b):
    if not (a == b and isinstance(a, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        t = args[0].type
        fn = builder.module.declare_intrinsic("llvm.maxnum", [t], ir.FunctionType(t, [t, t]))
        return builder.call(fn, args, fastmath=("nnan", "nsz", "reassoc"))

    return a(a, b), codegen


@overload(_max_lanes)
def _max_lanes_overload(a, b):
    return lambda a, b: _max_lanes_intrinsic(a, b)


@intrinsic
def _int32_as_float32(typingctx, bits):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


_F = np.float32
_EXP_LO = _F(-103.97208)  # log of the smallest subnormal / 2: below it exp rounds to 0
_EXP_HI = _F(88.72284)  # log(FLT_MAX): above it exp overflows to inf
_LOG2E = _F(1.44269504088896341)
_LN2_HI = _F(0.693359375)  # ln 2 = _LN2_HI + _LN2_LO, _LN2_HI with few mantissa bits
_LN2_LO = _F(-2.12194440e-4)


def _fast_exp_f32(y):
    underflow = y < _EXP_LO
    overflow = y > _EXP_HI
    # an underflowing y is computed as 0 (its result is replaced by 0 below): computing it
    # as _EXP_LO would make subnormals, which cost a microcode assist each (3x slower rows)
    clipped = _F(0.0) if underflow else (_EXP_HI if overflow else y)  # NaN stays NaN
    n = np.floor(_fma(clipped, _LOG2E, _F(0.5)))
    r = _fma(n, -_LN2_LO, _fma(n, -_LN2_HI, clipped))  # |r| <= ln(2) / 2 (Cody-Waite)
    # Cephes' polynomial in Estrin's scheme (NOTE [ Estrin's scheme ])
    r2 = r * r
    p = _fma(r2 * r2, _fma(r, _F(1.9875691500e-4), _F(1.3981999507e-3)),
             _fma(r2, _fma(r, _F(8.3334519073e-3), _F(4.1665795894e-2)),
                  _fma(r, _F(1.6666665459e-1), _F(5.0000001201e-1))))
    p = _fma(p, r2, r) + _F(1.0)
    # 2^n as two normal powers of two, so that n = 128 (overflow) and n < -126 (subnormal
    # results) come out right
    k = np.int32(n)
    half = k >> np.int32(1)
    s1 = _int32_as_float32((half + np.int32(127)) << np.int32(23))
    s2 = _int32_as_float32((k - half + np.int32(127)) << np.int32(23))
    return _F(0.0) if underflow else (_F(np.inf) if overflow else p * s1 * s2)


@intrinsic
def _int64_as_float64(typingctx, bits):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


_D_EXP_LO = -745.1332191019412  # log of the smallest subnormal / 2
_D_EXP_HI = 709.782712893384  # log(DBL_MAX)
_D_LOG2E = 1.4426950408889634
_D_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: n * _D_LN2_HI is exact
_D_LN2_LO = 1.90821492927058770002e-10
_D_INV_FACT = tuple(1.0 / math.factorial(k) for k in range(14))


def _fast_exp_f64(y):
    underflow = y < _D_EXP_LO
    overflow = y > _D_EXP_HI
    clipped = 0.0 if underflow else (_D_EXP_HI if overflow else y)  # as in _fast_exp_f32
    n = np.floor(_fma(clipped, _D_LOG2E, 0.5))
    r = _fma(n, -_D_LN2_LO, _fma(n, -_D_LN2_HI, clipped))  # |r| <= ln(2) / 2
    # Taylor to degree 13 (the remainder is below 2^-56 on |r| <= ln(2) / 2), in Estrin's
    # scheme (NOTE [ Estrin's scheme ])
    # for the terms from r^2 on, then 1 + r (1 + r q) as in Horner's (whose last two
    # roundings keep the result within 1 ulp: Estrin's to the end measured 2.2)
    c = _D_INV_FACT
    r2 = r * r
    r4 = r2 * r2
    q0 = _fma(r2, _fma(r, c[5], c[4]), _fma(r, c[3], c[2]))
    q1 = _fma(r2, _fma(r, c[9], c[8]), _fma(r, c[7], c[6]))
    q2 = _fma(r2, _fma(r, c[13], c[12]), _fma(r, c[11], c[10]))
    p = _fma(_fma(_fma(r4, _fma(r4, q2, q1), q0), r, 1.0), r, 1.0)
    k = np.int64(np.int32(n))  # through int32: AVX2 converts doubles to int32 only
    half = k >> 1
    s1 = _int64_as_float64((half + 1023) << 52)
    s2 = _int64_as_float64((k - half + 1023) << 52)
    return 0.0 if underflow else (np.inf if overflow else p * s1 * s2)


@overload(fast_exp)
def _fast_exp_overload(y):
    if y == types.float32:
        return _fast_exp_f32
    if y == types.float64:
        return _fast_exp_f64
    return None


# Row reductions over 1-D rows: reassociation lets LLVM sum (and take the max) in SIMD
# lanes. Taking the max without NaNs (``_max_lanes``) is harmless: a NaN in a row makes its
# sum, and so the whole softmax row, NaN.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz", "nnan"})
def row_max(v):
    """The largest element of the non-empty 1-D ``v``, typed like ``v`` (unspecified if
    ``v`` holds a NaN)."""
    m = v[0]
    for j in range(1, v.shape[0]):
        m = _max_lanes(m, v[j])
    return m


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz", "nnan"})
def _scaled_row_max(v, sc):
    """The largest ``v[j] * sc`` (each product rounded to ``v``'s dtype, as ``row_max`` of
    the products would see it) of the non-empty 1-D ``v``."""
    m = v[0] * sc
    for j in range(1, v.shape[0]):
        m = _max_lanes(m, v[j] * sc)
    return m


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def row_sum(v):
    """The float64 sum of the 1-D ``v``."""
    s = np.float64(0.0)
    for j in range(v.shape[0]):
        s += v[j]
    return s


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _row_dot(u, v):
    s = np.float64(0.0)
    for j in range(u.shape[0]):
        s += u[j] * np.float64(v[j])
    return s


@njit(cache=True, nogil=True, error_model="numpy")
def _check_shapes(x, out):
    if out.shape != x.shape:
        raise ValueError("softmax kernel: out must have the input's shape (and g, in backward)")


@njit(cache=True, nogil=True, error_model="numpy")
def softmax_forward_into(x, out):
    """``out = exp(x - max) / sum(exp(x - max))`` along each row."""
    _check_shapes(x, out)
    if x.shape[1] == 0:
        return
    for i in range(x.shape[0]):
        m = row_max(x[i])
        for j in range(x.shape[1]):
            out[i, j] = fast_exp(x[i, j] - m)
        inv = x.dtype.type(1.0 / row_sum(out[i]))
        for j in range(x.shape[1]):
            out[i, j] *= inv


@njit(cache=True, nogil=True, error_model="numpy")
def softmax_forward(x):
    """``exp(x - max) / sum(exp(x - max))`` along each row."""
    out = np.empty_like(x)
    softmax_forward_into(x, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def log_softmax_forward_into(x, out):
    """``out = x - logsumexp(x)`` along each row."""
    _check_shapes(x, out)
    if x.shape[1] == 0:
        return
    e = np.empty(x.shape[1], dtype=x.dtype)  # one row's exp, in L1 cache
    for i in range(x.shape[0]):
        m = row_max(x[i])
        for j in range(x.shape[1]):
            e[j] = fast_exp(x[i, j] - m)
        lse = x.dtype.type(np.float64(m) + math.log(row_sum(e)))
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] - lse


@njit(cache=True, nogil=True, error_model="numpy")
def log_softmax_forward(x):
    """``x - logsumexp(x)`` along each row."""
    out = np.empty_like(x)
    log_softmax_forward_into(x, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def softmax_backward_into(g, y, out):
    """``out = y * (g - sum(g * y))`` along each row, for ``y = softmax(x)``."""
    _check_shapes(y, g)
    _check_shapes(y, out)
    for i in range(g.shape[0]):
        s = g.dtype.type(_row_dot(g[i], y[i]))
        for j in range(g.shape[1]):
            out[i, j] = y[i, j] * (g[i, j] - s)


@njit(cache=True, nogil=True, error_model="numpy")
def softmax_backward(g, y):
    """``y * (g - sum(g * y))`` along each row, for ``y = softmax(x)``."""
    out = np.empty_like(g)
    softmax_backward_into(g, y, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def log_softmax_backward_into(g, y, out):
    """``out = g - exp(y) * sum(g)`` along each row, for ``y = log_softmax(x)``."""
    _check_shapes(y, g)
    _check_shapes(y, out)
    for i in range(g.shape[0]):
        s = g.dtype.type(row_sum(g[i]))
        for j in range(g.shape[1]):
            out[i, j] = g[i, j] - fast_exp(y[i, j]) * s


@njit(cache=True, nogil=True, error_model="numpy")
def log_softmax_backward(g, y):
    """``g - exp(y) * sum(g)`` along each row, for ``y = log_softmax(x)``."""
    out = np.empty_like(g)
    log_softmax_backward_into(g, y, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def _check_rows(x, out, causal):
    _check_shapes(x, out)
    if causal < 0 or (causal > 0 and x.shape[0] % causal != 0):
        raise ValueError("scaled softmax kernel: causal must be 0 or divide the row count")


@njit(cache=True, nogil=True, error_model="numpy")
def scaled_softmax_forward_into(x, scale, causal, out):
    """``out = softmax(x * scale)`` along each row, the product rounded to ``x``'s dtype
    first (as a separate multiply would). ``causal > 0``: the rows are stacked matrices of
    ``causal`` rows each, and row ``i`` of a matrix sees only columns ``j <= i``; the others
    get weight 0 and their values are never used (attention's causal mask, aligned
    top-left; up to 7 of them are read, whatever they hold, to fill whole SIMD vectors)."""
    _check_rows(x, out, causal)
    n, d = x.shape
    if d == 0:
        return
    sc = x.dtype.type(scale)
    for i in range(n):
        width = d if causal == 0 else min(d, i % causal + 1)
        # the exp and the scaling run on whole vectors of 8 (the masked ones are zeroed
        # after): a causal row's scalar tail, up to 7 exps, cost 15% of the kernel
        whole = min(d, (width + 7) // 8 * 8)
        m = _scaled_row_max(x[i, :width], sc)
        for j in range(whole):
            out[i, j] = fast_exp(x[i, j] * sc - m)
        inv = x.dtype.type(1.0 / row_sum(out[i, :width]))
        for j in range(whole):
            out[i, j] *= inv
        # the masked tail as one slice fill: a loop of stores here cost a third of the
        # kernel on rows of 64
        out[i, width:] = 0.0


@njit(cache=True, nogil=True, error_model="numpy")
def scaled_softmax_forward(x, scale, causal):
    """``softmax(x * scale)`` along each row (see ``scaled_softmax_forward_into``)."""
    out = np.empty_like(x)
    scaled_softmax_forward_into(x, scale, causal, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def scaled_softmax_backward_into(g, y, scale, out):
    """``out = (y * (g - sum(g * y))) * scale`` along each row: the VJP of
    ``y = scaled_softmax_forward(x, scale, causal)`` (masked entries have ``y = 0``, so
    they get 0)."""
    _check_rows(y, g, 0)
    _check_rows(y, out, 0)
    sc = g.dtype.type(scale)
    for i in range(g.shape[0]):
        s = g.dtype.type(_row_dot(g[i], y[i]))
        for j in range(g.shape[1]):
            out[i, j] = (y[i, j] * (g[i, j] - s)) * sc


@njit(cache=True, nogil=True, error_model="numpy")
def scaled_softmax_backward(g, y, scale):
    """The VJP of ``scaled_softmax_forward`` (see ``scaled_softmax_backward_into``)."""
    out = np.empty_like(g)
    scaled_softmax_backward_into(g, y, scale, out)
    return out


def softmax_forward_reference(x):
    """NumPy formulation of ``softmax_forward``."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def log_softmax_forward_reference(x):
    """NumPy formulation of ``log_softmax_forward``."""
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))


def softmax_backward_reference(g, y):
    """NumPy formulation of ``softmax_backward``."""
    return y * (g - (g * y).sum(axis=1, keepdims=True))


def log_softmax_backward_reference(g, y):
    """NumPy formulation of ``log_softmax_backward``."""
    return g - np.exp(y) * g.sum(axis=1, keepdims=True)


def scaled_softmax_forward_reference(x, scale, causal):
    """NumPy formulation of ``scaled_softmax_forward``: scale, add the -inf mask, softmax."""
    z = x * x.dtype.type(scale)
    if causal:
        rows = np.arange(x.shape[0]) % causal
        z = np.where(np.arange(x.shape[1])[None, :] > rows[:, None], -np.inf, z)
    return softmax_forward_reference(z)


def scaled_softmax_backward_reference(g, y, scale):
    """NumPy formulation of ``scaled_softmax_backward``."""
    return softmax_backward_reference(g, y) * g.dtype.type(scale)
