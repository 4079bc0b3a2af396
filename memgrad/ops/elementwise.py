"""Elementwise primitives: arithmetic, unary math, comparisons, selection and casts."""

from __future__ import annotations

import numpy as np

from memgrad.ops import parts
from memgrad.ops.registry import primitive
from memgrad.tensor import Tensor

__all__ = [
    "add",
    "sub",
    "mul",
    "div",
    "floor_divide",
    "remainder",
    "neg",
    "pow",
    "exp",
    "log",
    "sqrt",
    "abs",
    "sign",
    "tanh",
    "sigmoid",
    "relu",
    "tanh_backward",
    "sigmoid_backward",
    "relu_backward",
    "maximum",
    "minimum",
    "clamp",
    "where",
    "to",
    "clone",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "flat_kernel",
    "flat_kernel_in_parts",
    "relu_in_place",
]


# an element of relu or its backward kernel in multiply-adds (for flat_kernel_in_parts): memory
# bound, about 40 of the BLAS's multiply-adds in time
_RELU_COST = 40

# the size from which relu, where and float32 exp run their kernels: below it the call's
# fixed cost (the kernel module's import statement, the flat views, in_parts and the
# dispatch: 5-7 us) is more than NumPy's slower loop costs (the two were even at 4,096 to
# 8,192 elements on Zen 3, the kernels ahead from 16,384)
_KERNEL_MIN = 16384


def _kernel_dtype(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype in _FLOAT_DTYPES


_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def flat_kernel(kernel, *arrays: np.ndarray) -> np.ndarray:
    """Run an elementwise numba kernel (flat arrays in and out) on arrays of one shape,
    through flat contiguous views (copies only when an array is not contiguous)."""
    shape, flat = _flat(arrays)
    return kernel(*flat).reshape(shape)


def _flat(arrays: tuple[np.ndarray, ...]) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """The common shape of ``arrays`` and their flat contiguous views in their result dtype
    (copies only when an array is not contiguous or has another dtype)."""
    first = arrays[0]
    shape, dtype = first.shape, first.dtype
    plain = first.flags.c_contiguous
    for a in arrays[1:]:
        if a.shape != shape:
            raise ValueError(f"shapes {shape} and {a.shape} must be equal")
        plain = plain and a.dtype is dtype and a.flags.c_contiguous
    if plain:  # the usual case, without NumPy's promotion and copy calls (1-2 us)
        return shape, [a.reshape(-1) for a in arrays]
    dtype = np.result_type(*arrays)
    return shape, [np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays]


def flat_kernel_in_parts(kernel_into, cost: int, *arrays: np.ndarray,
                         out: np.ndarray | None = None, scale: float | None = None) -> np.ndarray:
    """``flat_kernel`` for a kernel that writes into its last argument (flat arrays in, a
    flat ``out``): the elements are split into contiguous parts, one per BLAS thread, and
    the kernels (which release the GIL) run on them at once (NOTE [ Row parts ] in
    ops/nn.py). ``cost`` is one element's work in multiply-adds, so that small arrays stay
    on the calling thread. Each element is computed as by one call, so the result does not
    depend on the split. ``out``, a C-contiguous array of the inputs' shape and result
    dtype (an input itself, for an elementwise kernel in place), receives the result. The
    kernels of ``memgrad._kernels.jobs.KERNELS`` run their parts as jobs of the hand-off
    where it is set up (NOTE [ Kernels as jobs ] in ops/parts.py). A kernel with a
    ``scale`` parameter (before ``out``) gets ``scale``."""
    shape, flat = _flat(arrays)
    out = np.empty_like(flat[0]) if out is None else out.reshape(-1)
    params = () if scale is None else (scale,)
    parts.kernel_in_parts(kernel_into, out.size, 1, out.size * cost, tuple(flat), out, *params)
    return out.reshape(shape)


@primitive("add", broadcasting=True, ufunc=np.add)
def add(x, y):
    return np.add(x, y)


@add.vjp
def _(g, out, needs, x, y):
    return g if needs[0] else None, g if needs[1] else None


@primitive("sub", broadcasting=True, ufunc=np.subtract)
def sub(x, y):
    return np.subtract(x, y)


@sub.vjp
def _(g, out, needs, x, y):
    return g if needs[0] else None, -g if needs[1] else None


@primitive("mul", saves={"x": (1,), "y": (0,)}, broadcasting=True, ufunc=np.multiply)
def mul(x, y):
    return np.multiply(x, y)


@mul.vjp
def _(g, out, needs, x, y):
    return g * y if needs[0] else None, g * x if needs[1] else None


@primitive("div", saves={"x": (1,), "y": (0, 1)}, broadcasting=True, ufunc=np.true_divide)
def div(x, y):
    return np.true_divide(x, y)


@div.vjp
def _(g, out, needs, x, y):
    return g / y if needs[0] else None, -g * x / (y * y) if needs[1] else None


@primitive("floor_divide", broadcasting=True)
def floor_divide(x, y):
    # NumPy's floor division is PyTorch's (rounds toward -inf; int // int stays int)
    return np.floor_divide(x, y)


@floor_divide.vjp
def _(g, out, needs, x, y):
    # a step function: its gradient is zero, as in PyTorch
    zero = Tensor(np.zeros(g.shape, dtype=g.dtype))
    return zero if needs[0] else None, zero if needs[1] else None


@primitive("remainder", saves={"x": (1,), "y": (1,)}, broadcasting=True)
def remainder(x, y):
    # the sign of the divisor, as Python's % and torch.remainder
    return np.remainder(x, y)


@remainder.vjp
def _(g, out, needs, x, y):
    return g if needs[0] else None, -g * floor_divide(x, y) if needs[1] else None


@primitive("neg", public=True, ufunc=np.negative)
def neg(x):
    """``-x`` elementwise."""
    return np.negative(x)


@neg.vjp
def _(g, out, needs, x):
    return (-g,)


@primitive("pow", saves={"x": (0, 1), "y": (0,), "out": (1,)}, broadcasting=True)
def pow(x, y):
    if y.__class__ in _SCALARS and y == 2 and x.__class__ is np.ndarray and x.dtype.kind == "f":
        # NumPy's power with a scalar exponent has no fast loop: square was 4 times as fast
        # on float32 (0.095 against 0.37 ms on 524,288 elements), with the same values
        return np.square(x)
    return np.power(x, y)


_SCALARS = (int, float)


@pow.vjp
def _(g, out, needs, x, y):
    gx = None
    if needs[0]:
        # x ** 0 is constant: its gradient is 0, also at x == 0, where y * x ** (y - 1) would
        # be 0 * inf; the exponent 1 there keeps the product finite (and 0), as in PyTorch
        if isinstance(y, Tensor):
            gx = g * y * x ** where(y == 0, 1.0, y - 1)
        elif isinstance(y, np.ndarray):
            gx = g * y * x ** np.where(y == 0, 1.0, y - 1).astype(y.dtype)
        elif y == 2:
            gx = g * y * x  # x ** 1 is x
        else:
            gx = g * y * x ** (1.0 if y == 0 else y - 1)
    gy = None
    if needs[1]:
        # d/dy x**y = x**y log x, taken as 0 where x == 0 (x**y is constant 0 there for y > 0)
        gy = where(x == 0, 0.0, g * out * log(where(x == 0, 1.0, x)))
    return gx, gy


@primitive("exp", saves={"out": (0,)}, public=True)
def exp(x):
    """``e ** x`` elementwise."""
    if x.__class__ is np.ndarray and x.dtype is _FLOAT32 and x.size >= _KERNEL_MIN:
        # NumPy's float32 exp runs one element at a time here (AVX2): the kernel is a
        # vectorized polynomial, 3.9 times as fast on 524,288 elements and within 1 ulp
        # where NumPy's was measured at up to 2.3; float64 keeps NumPy's (within 0.51 ulp)
        from memgrad._kernels import activation

        return flat_kernel_in_parts(activation.exp_into, _EXP_COST, x)
    return np.exp(x)


# an element of the exp kernel in multiply-adds (for flat_kernel_in_parts): about four of
# relu's in time
_EXP_COST = 160
_FLOAT32 = np.dtype(np.float32)  # by identity: NumPy's own dtype of native float32 arrays


@exp.vjp
def _(g, out, needs, x):
    return (g * out,)


@primitive("log", saves={"x": (0,)}, public=True, ufunc=np.log)
def log(x):
    """The natural logarithm elementwise."""
    return np.log(x)


@log.vjp
def _(g, out, needs, x):
    return (g / x,)


@primitive("sqrt", saves={"out": (0,)}, public=True, ufunc=np.sqrt)
def sqrt(x):
    """The square root elementwise."""
    return np.sqrt(x)


@sqrt.vjp
def _(g, out, needs, x):
    return (g / (out * 2),)


@primitive("abs", saves={"x": (0,)}, public=True, ufunc=np.abs)
def abs(x):
    """``|x|`` elementwise (the gradient at 0 is 0)."""
    return np.abs(x)


@abs.vjp
def _(g, out, needs, x):
    return (g * sign(x),)


@primitive("sign", differentiable=False, public=True, ufunc=np.sign)
def sign(x):
    """-1, 0 or 1 by the sign of each element (not differentiable)."""
    return np.sign(x)


@primitive("tanh", saves={"out": (0,)}, public=True, ufunc=np.tanh)
def tanh(x):
    """The hyperbolic tangent elementwise."""
    return np.tanh(x)


@tanh.vjp
def _(g, out, needs, x):
    return (tanh_backward(g, out),)


@primitive("tanh_backward", saves={"g": (1,), "y": (0, 1)})
def tanh_backward(g, y):
    """``g * (1 - y**2)`` for ``y = tanh(x)`` in one op; itself differentiable."""
    return g * (1 - y * y)


@tanh_backward.vjp
def _(gg, out, needs, g, y):
    return (gg * (1 - y * y) if needs[0] else None, -2 * gg * g * y if needs[1] else None)


@primitive("sigmoid", saves={"out": (0,)}, public=True)
def sigmoid(x):
    """``1 / (1 + exp(-x))`` elementwise, without overflow."""
    if _kernel_dtype(x):
        from memgrad._kernels import activation

        return flat_kernel(activation.sigmoid, x)
    # exp(-|x|) never overflows, and e / (1 + e) keeps full relative precision in the left
    # tail, where 1 / (1 + exp(-x)) overflows and 0.5 * (1 + tanh(x / 2)) rounds to 0
    e = np.exp(-np.abs(x))
    return np.where(np.signbit(x), e / (1 + e), 1 / (1 + e))


@sigmoid.vjp
def _(g, out, needs, x):
    return (sigmoid_backward(g, out),)


@primitive("sigmoid_backward", saves={"g": (1,), "y": (0, 1)})
def sigmoid_backward(g, y):
    """``g * y * (1 - y)`` for ``y = sigmoid(x)`` in one op; itself differentiable."""
    if _kernel_dtype(g) and _kernel_dtype(y) and np.shape(g) == np.shape(y):
        from memgrad._kernels import activation

        return flat_kernel(activation.sigmoid_backward, g, y)
    return g * y * (1 - y)


@sigmoid_backward.vjp
def _(gg, out, needs, g, y):
    return (
        gg * y * (1 - y) if needs[0] else None,
        gg * g * (1 - 2 * y) if needs[1] else None,
    )


# NOTE [ relu's forward kernel ]
# NumPy's maximum with a scalar operand, maximum(x, 0), has no SIMD loop on AVX2 machines
# (AMD Zen 3): 0.44 ms on 524,288 float32 elements, where a compiled select (relu_into)
# takes 0.10 and maximum of two arrays 0.11; from 64 elements up the kernel was 2.5 to 4.3
# times as fast on one thread. Where NumPy dispatches AVX-512 loops (an Intel Xeon) the
# kernel was only 1.1 times as fast. relu and relu_ run the kernel on float32 and float64
# arrays of _KERNEL_MIN elements or more, in parts on every core for large ones
# (flat_kernel_in_parts), with NumPy's results: NaN stays NaN and -0.0 becomes 0.0.


@primitive("relu", saves={"out": (0,)}, public=True)
def relu(x):
    """``max(x, 0)`` elementwise (the gradient at 0 is 0)."""
    if not _kernel_dtype(x) or x.size < _KERNEL_MIN:
        return np.maximum(x, 0)
    from memgrad._kernels import activation

    return flat_kernel_in_parts(activation.relu_into, _RELU_COST, x)


def relu_in_place(a: np.ndarray) -> np.ndarray:
    """``a[...] = max(a, 0)``, returning ``a``: ``relu``'s kernel for a contiguous float32
    or float64 array (NOTE [ relu's forward kernel ]), else NumPy's maximum."""
    if not (_kernel_dtype(a) and a.flags.c_contiguous) or a.size < _KERNEL_MIN:
        return np.maximum(a, 0, out=a)
    from memgrad._kernels import activation

    flat_kernel_in_parts(activation.relu_into, _RELU_COST, a, out=a)
    return a


@relu.vjp
def _(g, out, needs, x):
    return (relu_backward(g, out),)


@primitive("relu_backward", saves={"y": (0,)})
def relu_backward(g, y):
    """``g * (y > 0)`` for ``y = relu(x)`` in one op (one pass, no mask array); itself
    differentiable in ``g`` (its derivative in ``y`` is 0 wherever it exists)."""
    if _kernel_dtype(g) and _kernel_dtype(y) and np.shape(g) == np.shape(y):
        from memgrad._kernels import activation

        return flat_kernel_in_parts(activation.relu_backward_into, _RELU_COST, g, y)
    # a multiply by the mask: several times faster than np.where with a scalar
    return g * (y > 0)


@relu_backward.vjp
def _(gg, out, needs, g, y):
    return (relu_backward(gg, y) if needs[0] else None, None)


@primitive("maximum", saves={"x": (0, 1), "y": (0, 1)}, broadcasting=True, ufunc=np.maximum)
def maximum(x, y):
    return np.maximum(x, y)


@maximum.vjp
def _(g, out, needs, x, y):
    return _select_grads(g, needs, x > y, x == y)


@primitive("minimum", saves={"x": (0, 1), "y": (0, 1)}, broadcasting=True, ufunc=np.minimum)
def minimum(x, y):
    return np.minimum(x, y)


@minimum.vjp
def _(g, out, needs, x, y):
    return _select_grads(g, needs, x < y, x == y)


def _select_grads(g, needs, first, tie):
    # the chosen input gets the gradient; a tie splits it evenly, as in PyTorch
    half = g * 0.5
    gx = where(first, g, where(tie, half, 0.0)) if needs[0] else None
    gy = where(first, 0.0, where(tie, half, g)) if needs[1] else None
    return gx, gy


@primitive("clamp", saves={"x": (0,)})
def clamp(x, *, min=None, max=None):
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    return np.clip(x, min, max)


@clamp.vjp
def _(g, out, needs, x, min=None, max=None):
    # the gradient passes where min <= x <= max (bounds included, as in PyTorch)
    inside = None
    if min is not None:
        inside = x >= min
    if max is not None:
        upper = x <= max
        inside = upper if inside is None else logical_and(inside, upper)
    return (where(inside, g, 0.0),)


# NOTE [ where's kernels ]
# NumPy's where branches on each element: on a condition true at random about half the time
# it took 3.0 ms on 524,288 float32 elements (AMD EPYC Zen 3), where the select kernels of
# _kernels/select.py took 0.13. where runs them for a bool condition and a float32 or
# float64 result of _KERNEL_MIN elements or more whose array operands already have the
# result's shape (a broadcast float operand would need a full-size copy first); a broadcast
# condition (an attention mask) is copied to the full shape, a quarter of a float32
# result's bytes. Large arrays run in parts on every core. The result is
# np.where's, in its dtype (NumPy's promotion of the operands, a Python number weakly).


@primitive("where", saves={"cond": (1, 2)}, broadcasting=True)
def where(cond, x, y):
    out = _where_by_kernel(cond, x, y)
    return np.where(cond, x, y) if out is None else out


def _where_by_kernel(cond, x, y) -> np.ndarray | None:
    """``np.where(cond, x, y)`` by the select kernels (NOTE [ where's kernels ]), or None
    where they do not apply."""
    if cond.__class__ is not np.ndarray or cond.dtype != np.bool_:
        return None
    xa = x.__class__ is np.ndarray and x.ndim > 0
    ya = y.__class__ is np.ndarray and y.ndim > 0
    if not (xa or ya):
        return None
    shape, size = (x.shape, x.size) if xa else (y.shape, y.size)
    if (xa and ya and x.shape != y.shape) or size < _KERNEL_MIN:
        return None
    dtype = np.result_type(x, y)
    if dtype not in _FLOAT_DTYPES or cond.shape != shape and (
            np.broadcast_shapes(cond.shape, shape) != shape):
        return None
    from memgrad._kernels import select

    c = np.ascontiguousarray(np.broadcast_to(cond, shape)).reshape(-1)
    out = np.empty(c.size, dtype)
    if xa and ya:
        a, b = _flat_as(x, dtype), _flat_as(y, dtype)

        def work(lo: int, hi: int) -> None:
            select.where_into(c[lo:hi], a[lo:hi], b[lo:hi], out[lo:hi])
    else:
        a, value = _flat_as(x if xa else y, dtype), dtype.type(y if xa else x)

        def work(lo: int, hi: int) -> None:
            select.where_value_into(c[lo:hi], a[lo:hi], value, xa, out[lo:hi])

    parts.in_parts(c.size, c.size * _RELU_COST, work)
    return out.reshape(shape)


def _flat_as(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dtype).reshape(-1)


@where.vjp
def _(g, out, needs, cond, x, y):
    return (
        None,
        where(cond, g, 0.0) if needs[1] else None,
        where(cond, 0.0, g) if needs[2] else None,
    )


@primitive("to")
def to(x, *, dtype):
    return x.astype(dtype)


@to.vjp
def _(g, out, needs, x, dtype):
    return (to(g, dtype=x.dtype),)


@primitive("clone", public=True)
def clone(x):
    """A copy with its own storage, in the graph (the gradient passes through)."""
    return np.array(x, copy=True)


@clone.vjp
def _(g, out, needs, x):
    return (g,)


def _comparison(name, ufunc):
    def forward(x, y):
        return ufunc(x, y)

    forward.__name__ = name
    return primitive(name, differentiable=False, ufunc=ufunc)(forward)


eq = _comparison("eq", np.equal)
ne = _comparison("ne", np.not_equal)
lt = _comparison("lt", np.less)
le = _comparison("le", np.less_equal)
gt = _comparison("gt", np.greater)
ge = _comparison("ge", np.greater_equal)
logical_and = _comparison("logical_and", np.logical_and)
logical_or = _comparison("logical_or", np.logical_or)
logical_xor = _comparison("logical_xor", np.logical_xor)


@primitive("logical_not", differentiable=False, ufunc=np.logical_not)
def logical_not(x):
    return np.logical_not(x)
