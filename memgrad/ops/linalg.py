"""Matrix products and norms: ``matmul``; ``einsum`` (pairs of operands contracted left to
right by the ``einsum`` primitive), ``outer``, ``bmm``, ``addmm``, ``baddbmm``; ``norm`` and
``vector_norm`` (``mg.linalg.vector_norm``)."""

from __future__ import annotations

import math
import numbers
import string
from typing import Any

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops import parts
from memgrad.ops.elementwise import abs, ne, pow, sign, where
from memgrad.ops.movement import expand, reshape
from memgrad.ops.reduce import amax, amin, normalize_dims, sum
from memgrad.ops.registry import primitive, public
from memgrad.tensor import Tensor

__all__ = ["matmul", "einsum", "einsum_shape", "outer", "mm", "dot", "bmm", "addmm", "baddbmm",
           "norm", "vector_norm"]


@primitive("matmul", saves={"x": (1,), "y": (0,)}, kind="matmul")
def matmul(x, y):
    if not (getattr(x, "ndim", 0) and getattr(y, "ndim", 0)):  # (np.ndim is a Python call)
        raise ValueError(
            f"matmul: both arguments need at least one dimension, got shapes {np.shape(x)} "
            f"and {np.shape(y)}; use * for a product with a scalar"
        )
    k_y = y.shape[-2] if y.ndim > 1 else y.shape[0]
    if x.shape[-1] != k_y:
        raise ValueError(
            f"shapes {x.shape} and {y.shape} are not aligned: {x.shape[-1]} (the last dimension "
            f"of the first) != {k_y} (dimension {-2 if y.ndim > 1 else 0} of the second)"
        )
    if x.ndim >= 3 and x.shape[:-2] == y.shape[:-2]:
        return _batched(x, y)
    if y.ndim == 2 and x.ndim >= 2:
        return parts.rows_product(x, y)
    return np.matmul(x, y)


def _batched(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` for operands of one batch shape: large enough, in parts of the batch on
    every core (NOTE [ Batch parts ]), as attention's per-head products."""
    b = math.prod(x.shape[:-2])
    m, k, n = x.shape[-2], x.shape[-1], y.shape[-1]
    macs = b * m * k * n
    if b < 2 or macs < min(parts.PARTS_MIN_MACS, parts.JOB_PARTS_MIN_MACS):
        return np.matmul(x, y)
    out = np.empty(x.shape[:-2] + (m, n), dtype=np.result_type(x, y))
    if parts.products_in_parts(x, y, out, "mm", 1, macs):  # NOTE [ Products as jobs ]
        return out
    if macs < parts.PARTS_MIN_MACS:
        return np.matmul(x, y, out=out)
    if x.shape[0] >= 8:
        # parts of the first batch dimension: slices of strided operands (attention's
        # heads, transposed views) stay views, where flattening the batch would copy them
        b, xb, yb, rows = x.shape[0], x, y, out
    else:
        xb, yb, rows = x.reshape(b, m, k), y.reshape(b, k, n), out.reshape(b, m, n)

    def work(lo: int, hi: int) -> None:
        np.matmul(xb[lo:hi], yb[lo:hi], out=rows[lo:hi])

    parts.in_parts(b, macs, work)
    return out


def _transposed(t: Any) -> bool:
    """Whether ``t`` is a saved tensor whose last two dims are a transposed matrix."""
    if not isinstance(t, Tensor) or t.ndim < 2:
        return False
    strides, size = t._data.strides, t._data.itemsize
    return strides[-2] == size and strides[-1] != size and t.shape[-2] > 1


@matmul.vjp
def _(g, out, needs, x, y):
    # NumPy's rules: a 1-D left operand is a row (k,) -> (1, k), a 1-D right operand a
    # column (k,) -> (k, 1); batch dimensions broadcast and are summed back.
    x1, y1 = len(x.shape) == 1, len(y.shape) == 1
    if x1 and y1:
        return (g * y if needs[0] else None, g * x if needs[1] else None)
    if x1:
        g = g.unsqueeze(-2)
    if y1:
        g = g.unsqueeze(-1)
    gx = gy = None
    if needs[0]:
        yy = y.unsqueeze(-1) if y1 else y
        gx = g @ yy.mT
        if x1:
            gx = gx.squeeze(-2)
        if gx.shape != x.shape:
            gx = gx.sum_to(x.shape)
    if needs[1]:
        xx = x.unsqueeze(0) if x1 else x
        # a transposed y (attention's key.mT) gets its gradient in its own layout, so that
        # the gradient reaches the key untransposed (no strided copy there)
        gy = (g.mT @ xx).mT if _transposed(y) else xx.mT @ g
        if y1:
            gy = gy.squeeze(-1)
        if gy.shape != y.shape:
            gy = gy.sum_to(y.shape)
    return gx, gy


# ---------------------------------------------------------------------------- einsum

def _parse(equation: str, ndims: list[int], api: str = "einsum") -> tuple[list[str], str]:
    """The subscripts of each operand and of the output, with ``...`` spelled out as letters
    (right-aligned across operands, as NumPy's) and the implicit output made explicit."""
    if not isinstance(equation, str):
        raise TypeError(f"{api}: the equation must be a string, got {type(equation).__name__}")
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise ValueError(f"{api}: the equation {equation!r} names {len(terms)} operands, got "
                         f"{len(ndims)}")
    used = set(eq) - set(".,->")
    bad = sorted(c for c in used if c not in string.ascii_letters)
    if bad:
        raise ValueError(f"{api}: subscripts must be letters, got {bad} in {equation!r}")
    spare = [c for c in string.ascii_letters if c not in used]
    width = max((n - len(t.replace("...", "")) for t, n in zip(terms, ndims) if "..." in t),
                default=0)
    dots = "".join(spare[:width])
    out = []
    for t, n in zip(terms, ndims):
        if t.count("...") > 1 or "." in t.replace("...", ""):
            raise ValueError(f"{api}: invalid ellipsis in {equation!r}")
        k = n - len(t.replace("...", ""))
        if "..." in t:
            t = t.replace("...", dots[width - k:] if k else "")
        if len(t) != n:
            raise ValueError(f"{api}: subscripts {t!r} name {len(t)} dimensions of an operand "
                             f"with {n}")
        out.append(t)
    if arrow:
        if "..." in rhs:
            rhs = rhs.replace("...", dots)
        if "." in rhs or len(set(rhs)) != len(rhs) or set(rhs) - set("".join(out)):
            raise ValueError(f"{api}: invalid output subscripts in {equation!r}")
    else:
        counts = "".join(out)
        rhs = dots + "".join(sorted(c for c in set(counts) if counts.count(c) == 1
                                    and c not in dots))
    return out, rhs


def einsum_shape(equation: str, shapes: list[tuple]) -> tuple[int, ...]:
    """The output shape of the two-operand ``einsum`` primitive's ``equation`` (explicit
    letters, no ellipsis) on operands of ``shapes``; a ValueError if they do not fit.

    Example:
        >>> from memgrad.ops.linalg import einsum_shape
        >>> einsum_shape("ab,bc->ac", [(2, 3), (3, 4)])
        (2, 4)
    """
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if not arrow or len(terms) != len(shapes) or not set(equation) <= set(string.ascii_letters
                                                                            + ",->"):
        raise ValueError(f"einsum: expected 'ab,bc->ac' with one term per operand, got "
                         f"{equation!r}")
    sizes: dict[str, int] = {}
    for t, shape in zip(terms, shapes):
        if len(t) != len(shape) or len(set(t)) != len(t):
            raise ValueError(f"einsum: subscripts {t!r} do not fit an operand of shape {shape}")
        for c, n in zip(t, shape):
            if sizes.setdefault(c, n) != n:
                raise ValueError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {n}")
    if len(set(rhs)) != len(rhs) or set(rhs) - set(sizes):
        raise ValueError(f"einsum: invalid output subscripts in {equation!r}")
    return tuple(sizes[c] for c in rhs)


@primitive("einsum", saves={"x": (1,), "y": (0,)}, kind="matmul")
def _einsum(x, y, *, equation):
    einsum_shape(equation, [np.shape(x), np.shape(y)])
    out = np.einsum(equation, x, y)
    # a constant y (the 1 of a one-operand einsum) leaves x's dtype
    return out if isinstance(y, np.ndarray) else np.asarray(out, dtype=x.dtype)


def _pair_grad(g: Any, other: Any, sub_g: str, sub_other: str, sub_x: str, shape: tuple) -> Any:
    # letters of x that neither g nor the other operand has were summed away: broadcast back
    kept = "".join(c for c in sub_x if c in sub_g or c in sub_other)
    grad = _einsum(g, other, equation=f"{sub_g},{sub_other}->{kept}")
    if kept != sub_x:
        grad = reshape(grad, tuple(n if c in kept else 1 for c, n in zip(sub_x, shape)))
        grad = expand(grad, shape)
    return grad


@_einsum.vjp
def _(g, out, needs, x, y, equation):
    lhs, _, rhs = equation.partition("->")
    a, b = lhs.split(",")
    gx = _pair_grad(g, y, rhs, b, a, tuple(x.shape)) if needs[0] else None
    gy = _pair_grad(g, x, rhs, a, b, tuple(y.shape)) if needs[1] else None
    return gx, gy


@public(method=False)
def einsum(equation: str, *operands: Any) -> Tensor:
    """Sum of products over the subscripts that ``equation`` names, as ``torch.einsum``:
    ``einsum("ij,jk->ik", a, b)`` is ``a @ b``; ``...`` stands for leading dimensions, and
    without ``->`` the output has the subscripts that appear once, in alphabetical order.
    The operands are contracted two at a time, left to right. (A subscript repeated within
    one operand, a diagonal, is not supported.)

    Example:
        >>> import memgrad as mg
        >>> mg.einsum("i,i->", mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0]))
        tensor(11.)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(isinstance(t, Tensor) for t in operands):
        raise TypeError("einsum: expected an equation and one or more tensors, got "
                        f"{[type(t).__name__ for t in operands]}")
    terms, rhs = _parse(equation, [t.ndim for t in operands])
    for t in terms:
        if len(set(t)) != len(t):
            raise NotImplementedError(
                f"einsum: a subscript repeated within one operand ({t!r}, a diagonal) is not "
                "supported; take the diagonal first, e.g. with x * mg.eye(n) and a sum"
            )
    sizes: dict[str, int] = {}
    for t, x in zip(terms, operands):
        for c, n in zip(t, x.shape):
            if n != 1 and sizes.get(c, 1) not in (1, n):
                raise ShapeError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {n} in "
                                 f"{equation!r} (operand shapes {[t.shape for t in operands]})")
            sizes[c] = n if n != 1 else sizes.get(c, 1)
    ops = [x if x.shape == tuple(sizes[c] for c in t) else expand(x, tuple(sizes[c] for c in t))
           for t, x in zip(terms, operands)]
    if len(ops) == 1:
        return _einsum(ops[0], 1.0, equation=f"{terms[0]},->{rhs}")
    acc, sub = ops[0], terms[0]
    for i in range(1, len(ops)):
        later = "".join(terms[i + 1:]) + rhs
        seen = sub + terms[i]
        keep = rhs if i == len(ops) - 1 else "".join(
            dict.fromkeys(c for c in seen if c in later))
        acc = _einsum(acc, ops[i], equation=f"{sub},{terms[i]}->{keep}")
        sub = keep
    return acc


# ---------------------------------------------------------------------------- products

def _need_ndim(api: str, name: str, t: Any, ndim: int) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{api}: {name} must be a Tensor, got {type(t).__name__}")
    if t.ndim != ndim:
        raise ShapeError(f"{api}: {name} must be {ndim}-D, got shape {t.shape}")


@public
def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two 1-D tensors: ``out[i, j] = input[i] * vec2[j]``.

    Example:
        >>> import memgrad as mg
        >>> mg.outer(mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0]))
        tensor([[3., 4.],
                [6., 8.]])
    """
    _need_ndim("outer", "input", input, 1)
    _need_ndim("outer", "vec2", vec2, 1)
    return reshape(input, (-1, 1)) * vec2


@public
def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """The matrix product of two 2-D tensors (no broadcasting).

    Example:
        >>> import memgrad as mg
        >>> mg.mm(mg.ones(2, 3), mg.ones(3, 4)).shape
        (2, 4)
    """
    _need_ndim("mm", "input", input, 2)
    _need_ndim("mm", "mat2", mat2, 2)
    if input.shape[1] != mat2.shape[0]:
        raise ShapeError(f"mm: shapes {input.shape} and {mat2.shape} cannot be multiplied "
                         f"({input.shape[1]} columns against {mat2.shape[0]} rows)")
    return matmul(input, mat2)


@public
def dot(input: Tensor, tensor: Tensor) -> Tensor:
    """The inner product of two 1-D tensors of one length: a 0-d tensor.

    Example:
        >>> import memgrad as mg
        >>> mg.dot(mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0]))
        tensor(11.)
    """
    _need_ndim("dot", "input", input, 1)
    _need_ndim("dot", "tensor", tensor, 1)
    if input.shape != tensor.shape:
        raise ShapeError(f"dot: 1-D tensors of one length expected, got {input.shape[0]} and "
                         f"{tensor.shape[0]} elements")
    return matmul(input, tensor)


@public
def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of ``(b, n, m)`` and ``(b, m, p)`` tensors (no broadcasting).

    Example:
        >>> import memgrad as mg
        >>> mg.bmm(mg.ones(2, 3, 4), mg.ones(2, 4, 5)).shape
        (2, 3, 5)
    """
    _need_ndim("bmm", "input", input, 3)
    _need_ndim("bmm", "mat2", mat2, 3)
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise ShapeError(f"bmm: shapes {input.shape} and {mat2.shape} do not fit; expected "
                         "(b, n, m) and (b, m, p)")
    return matmul(input, mat2)


def _scaled_sum(api: str, input: Any, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    try:
        fits = np.broadcast_shapes(np.shape(input), product.shape) == product.shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{api}: input of shape {np.shape(input)} does not broadcast to the "
                         f"product's shape {product.shape}")
    if alpha != 1:
        product = product * alpha
    if beta == 0:  # as PyTorch: input is ignored, nan and inf in it included
        return product
    return (input if beta == 1 else input * beta) + product


@public
def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1,
          alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)`` for 2-D ``mat1`` and ``mat2`` (``input``
    broadcast; with ``beta=0`` it is ignored).

    Example:
        >>> import memgrad as mg
        >>> mg.addmm(mg.ones(2), mg.ones(3, 2), mg.ones(2, 2), alpha=2).tolist()[0]
        [5.0, 5.0]
    """
    _need_ndim("addmm", "mat1", mat1, 2)
    _need_ndim("addmm", "mat2", mat2, 2)
    if mat1.shape[1] != mat2.shape[0]:
        raise ShapeError(f"addmm: mat1 {mat1.shape} and mat2 {mat2.shape} are not aligned")
    return _scaled_sum("addmm", input, matmul(mat1, mat2), beta, alpha)


@public
def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1,
            alpha: Any = 1) -> Tensor:
    """``beta * input + alpha * bmm(batch1, batch2)`` (``input`` broadcast; with ``beta=0``
    it is ignored).

    Example:
        >>> import memgrad as mg
        >>> mg.baddbmm(mg.zeros(2, 3, 5), mg.ones(2, 3, 4), mg.ones(2, 4, 5)).shape
        (2, 3, 5)
    """
    return _scaled_sum("baddbmm", input, bmm(batch1, batch2), beta, alpha)


# ---------------------------------------------------------------------------- norms

@primitive("vector_norm", saves={"x": (0,), "out": (0,)}, kind="reduce")
def _vector_norm(x, *, ord, dim, keepdim):
    a = np.abs(x)
    if ord == 2:
        return np.sqrt(np.sum(a * a, axis=dim, keepdims=keepdim))
    return np.power(np.sum(np.power(a, ord), axis=dim, keepdims=keepdim), 1.0 / ord)


@_vector_norm.vjp
def _(g, out, needs, x, ord, dim, keepdim):
    if not keepdim:
        kept = tuple(1 if dim is None or i in dim else s for i, s in enumerate(x.shape))
        g, out = reshape(g, kept), reshape(out, kept)
    safe = where(out == 0, 1.0, out)  # a zero norm has zero gradient (x is 0 there)
    if ord == 2:
        return (g * x / safe,)
    scale = sign(x) * where(x == 0, 0.0, pow(abs(x), ord - 1))
    return (g * scale / pow(safe, ord - 1),)


def vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:
    """The vector ``ord``-norm of ``x`` over ``dim`` (all elements by default), as
    ``torch.linalg.vector_norm``: ``ord`` is a number > 0, ``inf``, ``-inf`` or 0 (the count
    of nonzeros). A zero vector has gradient 0.

    Example:
        >>> import memgrad as mg
        >>> mg.linalg.vector_norm(mg.tensor([3.0, 4.0]))
        tensor(5.)
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"vector_norm: x must be a Tensor, got {type(x).__name__}")
    if dtype is not None:
        x = x.to(dtype)
    if x.dtype.kind != "f":
        raise TypeError(f"vector_norm: expected a floating point tensor, got {x.dtype}; "
                        "convert it first, e.g. x.float()")
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"vector_norm: ord must be a number, got {ord!r}")
    dims = normalize_dims(dim, x.ndim, "vector_norm")
    if ord == math.inf:
        return amax(abs(x), dims, keepdim)
    if ord == -math.inf:
        return amin(abs(x), dims, keepdim)
    if ord == 0:
        return sum(ne(x, 0).to(x.dtype), dims, keepdim)
    if ord < 0:
        raise ValueError(f"vector_norm: ord must be > 0, 0, inf or -inf, got {ord}")
    if ord == 1:
        return sum(abs(x), dims, keepdim)
    return _vector_norm(x, ord=float(ord), dim=dims if x.ndim else None, keepdim=bool(keepdim))


@public
def norm(input: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
         dtype: Any = None) -> Tensor:
    """The ``p``-norm over ``dim`` (all elements by default), as ``torch.norm``: ``"fro"`` (the
    default) and numbers are vector norms (see ``mg.linalg.vector_norm``).

    Example:
        >>> import memgrad as mg
        >>> mg.tensor([[3.0, 0.0], [0.0, 4.0]]).norm()
        tensor(5.)
    """
    if p == "fro":
        p = 2
    elif isinstance(p, str):
        raise NotImplementedError(
            f"norm: p={p!r} is not supported; use 'fro' or a number (vector norms)"
        )
    return vector_norm(input, p, dim, keepdim, dtype=dtype)
