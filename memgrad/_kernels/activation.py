"""Fused activation kernels: GELU forward and backward, in the exact (erf) form and the
tanh approximation, sigmoid forward and backward, relu forward and backward, and ``exp``.

All kernels take flat contiguous float32 or float64 arrays and return a new array of the
same dtype; the GELU and relu kernels' ``*_into`` forms write into a given ``out`` of the
input's shape instead (so that the parts of one array can be computed on several threads).
Arithmetic runs in float64 whatever the input dtype, so a float32 result is the float64
result rounded once. Each kernel has a NumPy reference next to it
(``*_reference``), the formula written the plain way, which the tests compare it against.

NumPy has no ``erf``: the references of the exact form call ``math.erfc`` element by
element, which is exact but slow (benchmarks/kernels.py also times ``scipy.special``).

Speed (2048x1024 float32; benchmarks/kernels.py) comes from computing each element
once, in one pass with no temporaries, in loops LLVM vectorizes: no libm
call inside them. libm's ``erfc`` and ``tanh`` cost about 20 ns an element and run one
element at a time, so ``exp`` is a polynomial: ``softmax.fast_exp`` for float64 data, and
for float32 data a shorter one (``_exp_for_float32``: degree 8, one scaling, 30% faster
GELU kernels) that is still far more accurate than the float32 result needs; both are
evaluated in fused multiply-adds (``softmax._fma``: another 25-30% on the GELU kernels,
and one rounding instead of two in each step). Float32
inputs take the normal CDF from a rational approximation around one ``exp`` (relative
error below 1.2e-7, about one float32 ulp); the tanh form of GELU is written as
``x * sigmoid(2u)``, which needs only ``exp`` (float32 results within 0.51 ulp). Float64
inputs keep libm's ``erfc``. A constant test of the dtype (``_is_float32``)
picks the path when the kernel is compiled. With libm's ``exp`` in the loops, sigmoid was
slower than NumPy (0.7x). tanh has no kernel: one alone ran at 1.7x NumPy's ``np.tanh``
(below the 2x a kernel must reach), and its backward at 1.9x.
"""

import math

import numpy as np
from numba import njit, types
from numba.extending import overload

from memgrad._kernels.softmax import _fma, _int64_as_float64, fast_exp

__all__ = [
    "gelu",
    "gelu_backward",
    "gelu_tanh",
    "gelu_tanh_backward",
    "gelu_into",
    "gelu_backward_into",
    "gelu_tanh_into",
    "gelu_tanh_backward_into",
    "exp",
    "exp_into",
    "relu",
    "relu_into",
    "relu_backward_into",
    "sigmoid",
    "sigmoid_backward",
    "relu_backward",
    "gelu_reference",
    "gelu_backward_reference",
    "gelu_tanh_reference",
    "gelu_tanh_backward_reference",
    "sigmoid_reference",
    "sigmoid_backward_reference",
    "exp_reference",
    "relu_reference",
    "relu_backward_reference",
]

_SQRT_HALF = 0.7071067811865476  # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)
_K = 0.7978845608028654  # sqrt(2 / pi)
_C = 0.044715


def _is_float32(x):
    """Whether array ``x`` holds float32: a compile-time constant in compiled code (a runtime
    test of ``x.itemsize`` would keep both branches in every loop)."""
    return x.dtype == np.float32


@overload(_is_float32)
def _is_float32_overload(x):
    answer = x.dtype == types.float32
    return lambda x: answer


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's split of ln 2: n * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_FACT = tuple(1.0 / math.factorial(k) for k in range(9))


def _exp_for_float32(a):
    """``exp(a)`` for a float64 ``a`` below 709 whose result only feeds a float32 one: in
    compiled code a Taylor polynomial of degree 8 after the range reduction (relative error
    below 3e-10, far under float32's 6e-8, so the float32 result is still the exact one
    rounded once) and one scaling by ``2^n`` (``a`` is clipped at -700, where every float32
    result it feeds is 0 or unchanged). No overflow test: the GELU kernels call it on
    arguments of at most about 0. Run as plain Python it is ``math.exp``."""
    return math.exp(a)


def _exp_for_float32_f64(a):
    a = a if a > -700.0 else -700.0
    n = np.floor(_fma(a, _LOG2E, 0.5))
    r = _fma(n, -_LN2_LO, _fma(n, -_LN2_HI, a))  # |r| <= ln(2) / 2
    # the Taylor polynomial in Estrin's scheme (pairs, then pairs of pairs): a dependency
    # chain of four multiply-adds instead of Horner's eight (NOTE [ Estrin's scheme ])
    r2 = r * r
    r4 = r2 * r2
    q0 = _fma(r2, _fma(r, _INV_FACT[3], _INV_FACT[2]), _fma(r, 1.0, 1.0))
    q1 = _fma(r2, _fma(r, _INV_FACT[7], _INV_FACT[6]), _fma(r, _INV_FACT[5], _INV_FACT[4]))
    p = _fma(r4, _fma(r4, _INV_FACT[8], q1), q0)
    return p * _int64_as_float64((np.int64(np.int32(n)) + 1023) << 52)


@overload(_exp_for_float32)
def _exp_for_float32_overload(a):
    if a == types.float64:
        return _exp_for_float32_f64
    return None


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _exp(a, single):
    """``exp(a)`` of a float64 ``a`` (at most about 0): ``_exp_for_float32`` for float32
    data (``single``), ``fast_exp`` (exact to 1 ulp of float64) for float64 data."""
    return _exp_for_float32(a) if single else fast_exp(a)


# Numerical Recipes' erfc: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P of degree 9
_ERFC_NR = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
            -1.13520398, 1.48851587, -0.82215223, 0.17087277)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _normal_cdf(v, single):
    """Phi(v) = erfc(-v / sqrt(2)) / 2 for a float64 ``v``, relatively accurate in both
    tails. ``single`` (float32 data) takes Numerical Recipes' erfc, a Chebyshev fit around
    one ``exp`` (fractional error below 1.2e-7), which vectorizes; float64 data takes libm's
    ``erfc``."""
    if not single:
        return 0.5 * math.erfc(-v * _SQRT_HALF)
    z = abs(v) * _SQRT_HALF
    t = 1.0 / (1.0 + 0.5 * z)
    c = _ERFC_NR
    t2 = t * t
    t4 = t2 * t2
    low = _fma(t2, _fma(t, c[3], c[2]), _fma(t, c[1], c[0]))  # Estrin's scheme
    high = _fma(t2, _fma(t, c[7], c[6]), _fma(t, c[5], c[4]))
    p = _fma(t4 * t4, _fma(t, c[9], c[8]), _fma(t4, high, low))
    half_erfc = 0.5 * t * _exp_for_float32(p - z * z)  # erfc(|v| / sqrt(2)) / 2 = Phi(-|v|)
    return half_erfc if v < 0.0 else 1.0 - half_erfc


@njit(cache=True, nogil=True, error_model="numpy")
def _check_out(x, out):
    if out.shape != x.shape:
        raise ValueError("activation kernel: out must have the input's shape")


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_into(x, out):
    """``out = x * Phi(x)`` elementwise (``Phi`` the standard normal CDF)."""
    _check_out(x, out)
    single = _is_float32(x)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        out[i] = v * _normal_cdf(v, single)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu(x):
    """``x * Phi(x)`` elementwise (``Phi`` the standard normal CDF)."""
    out = np.empty_like(x)
    gelu_into(x, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_backward_into(g, x, out):
    """``out = g * (Phi(x) + x * phi(x))``: ``g`` times the derivative of ``gelu``."""
    _check_out(x, g)
    _check_out(x, out)
    single = _is_float32(x)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        pdf = _INV_SQRT_2PI * _exp(-0.5 * v * v, single)
        out[i] = g[i] * (_normal_cdf(v, single) + v * pdf)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_backward(g, x):
    """``g * (Phi(x) + x * phi(x))``: ``g`` times the derivative of ``gelu``."""
    out = np.empty_like(g)
    gelu_backward_into(g, x, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_tanh_into(x, out):
    """``out = 0.5 x (1 + tanh(u))`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``, computed
    as ``x * sigmoid(2u)`` (one ``exp``, no cancellation for negative x)."""
    _check_out(x, out)
    single = _is_float32(x)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        u = _K * (v + _C * v * v * v)
        e = _exp(-2.0 * abs(u), single)  # in (0, 1]: never overflows
        s = 1.0 / (1.0 + e)
        out[i] = v * (s if u >= 0.0 else e * s)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_tanh(x):
    """``0.5 x (1 + tanh(u))`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)`` (see
    ``gelu_tanh_into``)."""
    out = np.empty_like(x)
    gelu_tanh_into(x, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_tanh_backward_into(g, x, out):
    """``out = g`` times the derivative of ``gelu_tanh``:
    ``sigmoid(2u) + 2 x sigmoid(2u) sigmoid(-2u) u'``."""
    _check_out(x, g)
    _check_out(x, out)
    single = _is_float32(x)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        v2 = v * v
        u = _K * (v + _C * v2 * v)
        du = _K * (1.0 + 3.0 * _C * v2)
        e = _exp(-2.0 * abs(u), single)
        s = 1.0 / (1.0 + e)
        sig = s if u >= 0.0 else e * s
        out[i] = g[i] * (sig + 2.0 * v * du * e * s * s)


@njit(cache=True, nogil=True, error_model="numpy")
def gelu_tanh_backward(g, x):
    """``g`` times the derivative of ``gelu_tanh`` (see ``gelu_tanh_backward_into``)."""
    out = np.empty_like(g)
    gelu_tanh_backward_into(g, x, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def sigmoid(x):
    """``1 / (1 + exp(-x))``, from ``e = exp(-|x|)`` so that nothing overflows:
    ``1 / (1 + e)`` for x >= 0, ``e / (1 + e)`` below."""
    out = np.empty_like(x)
    one = x.dtype.type(1.0)  # float32 data stays in float32 lanes
    for i in range(x.shape[0]):
        v = x[i]
        e = fast_exp(-abs(v))
        s = one / (one + e)
        out[i] = s if v >= 0 else e * s
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def sigmoid_backward(g, y):
    """``g * y * (1 - y)``: the gradient of ``y = sigmoid(x)`` times ``g``."""
    out = np.empty_like(g)
    for i in range(g.shape[0]):
        v = np.float64(y[i])
        out[i] = g[i] * v * (1.0 - v)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def exp_into(x, out):
    """``out = e ** x`` by ``softmax.fast_exp`` in the input's own lanes: for float32,
    Cephes' ``expf`` (within 1 ulp; NumPy's float32 ``exp`` was measured at up to 2.3),
    for float64 within 1 ulp. 0, subnormals, inf and NaN come out as IEEE says."""
    _check_out(x, out)
    for i in range(x.shape[0]):
        out[i] = fast_exp(x[i])


@njit(cache=True, nogil=True, error_model="numpy")
def exp(x):
    """``e ** x`` (see ``exp_into``)."""
    out = np.empty_like(x)
    exp_into(x, out)
    return out


@njit(cache=True, nogil=True)
def relu_into(x, out):
    """``out = max(x, 0)`` as NumPy's ``maximum(x, 0)``: NaN stays NaN and -0.0 becomes 0.0.
    A select that LLVM vectorizes: NumPy's ``maximum`` with a scalar operand runs one
    element at a time on AVX2 machines (NOTE [ relu's forward kernel ] in ops/elementwise.py)."""
    _check_out(x, out)
    if out.ctypes.data == x.ctypes.data:
        # in place (relu_), a loop over the one array, read and written as out (x may be
        # typed read-only): LLVM vectorizes the other loop behind a check that out and x do
        # not overlap, and runs it element by element when they do
        for i in range(out.shape[0]):
            v = out[i]
            out[i] = 0.0 if v <= 0.0 else v
        return
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = 0.0 if v <= 0.0 else v


@njit(cache=True, nogil=True)
def relu(x):
    """``max(x, 0)`` (see ``relu_into``)."""
    out = np.empty_like(x)
    relu_into(x, out)
    return out


@njit(cache=True, nogil=True)
def relu_backward_into(g, y, out):
    """``out = g * (y > 0)``: the gradient of ``y = relu(x)`` times ``g``, in one pass (the
    multiply keeps NumPy's ``nan * 0 = nan``)."""
    _check_out(y, g)
    _check_out(y, out)
    for i in range(g.shape[0]):
        out[i] = g[i] * (1.0 if y[i] > 0 else 0.0)


@njit(cache=True, nogil=True)
def relu_backward(g, y):
    """``g * (y > 0)``: the gradient of ``y = relu(x)`` times ``g`` (see
    ``relu_backward_into``)."""
    out = np.empty_like(g)
    relu_backward_into(g, y, out)
    return out


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def gelu_reference(x):
    """NumPy formulation of ``gelu``."""
    v = x.astype(np.float64)
    return (v * 0.5 * _erfc(-v * _SQRT_HALF)).astype(x.dtype)


def gelu_backward_reference(g, x):
    """NumPy formulation of ``gelu_backward``."""
    v = x.astype(np.float64)
    d = 0.5 * _erfc(-v * _SQRT_HALF) + v * _INV_SQRT_2PI * np.exp(-0.5 * v * v)
    return (g * d).astype(g.dtype)


def gelu_tanh_reference(x):
    """NumPy formulation of ``gelu_tanh``."""
    return 0.5 * x * (1 + np.tanh(_K * (x + _C * x**3)))


def gelu_tanh_backward_reference(g, x):
    """NumPy formulation of ``gelu_tanh_backward``."""
    t = np.tanh(_K * (x + _C * x**3))
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _K * (1 + 3 * _C * x * x))


def sigmoid_reference(x):
    """NumPy formulation of ``sigmoid`` (as memgrad's elementwise op writes it)."""
    return 0.5 * (1 + np.tanh(0.5 * x))


def sigmoid_backward_reference(g, y):
    """NumPy formulation of ``sigmoid_backward``."""
    return g * y * (1 - y)


def exp_reference(x):
    """NumPy formulation of ``exp``."""
    return np.exp(x)


def relu_reference(x):
    """NumPy formulation of ``relu``."""
    return np.maximum(x, 0)


def relu_backward_reference(g, y):
    """NumPy formulation of ``relu_backward``."""
    return g * (y > 0)
