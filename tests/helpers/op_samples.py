"""Sample calls for every primitive of the op table (``memgrad.ops.REGISTRY``).

``SAMPLES[name]`` lists the cases for a differentiable primitive: each builds float64 input
tensors that require grad (values kept away from the points where the op is not
differentiable), the function to check, and where natural a plain NumPy formulation of its
forward value. ``NONDIFF_SAMPLES[name]`` does the same for the primitives declared with
``differentiable=False`` (checked for values only). ``tests/ops/test_op_table.py`` fails for a
registered primitive that has no samples here, so a new op cannot slip through untested.

Every ``fn`` calls the primitive (directly through ``REGISTRY`` or through the public function
built on it) at call time, so the cases follow the table rather than a copy of it.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import memgrad as mg
import memgrad.ops
import memgrad.ops.nn as F
from memgrad.ops import REGISTRY
from memgrad.ops.movement import normalize_index

# every module of memgrad.ops, so that a primitive declared in a module nothing imports yet
# is in REGISTRY too (and its missing samples are reported)
for _module in pkgutil.iter_modules(memgrad.ops.__path__):
    importlib.import_module(f"memgrad.ops.{_module.name}")

__all__ = ["Case", "SAMPLES", "NONDIFF_SAMPLES", "all_cases", "nondiff_cases"]

Arrays = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class Case:
    """One sample call of primitive ``op``.

    ``make(rng)`` returns the input arrays; ``fn(*tensors)`` computes the output with memgrad;
    ``ref(*arrays)`` (optional) computes the same output with NumPy alone.
    """

    op: str
    label: str
    make: Callable[[np.random.Generator], Arrays]
    fn: Callable[..., Any]
    ref: Callable[..., Any] | None = None
    check: dict = field(default_factory=dict)  # extra gradcheck keyword arguments
    second_order: bool = True

    @property
    def id(self) -> str:
        return f"{self.op}-{self.label}"

    def arrays(self) -> Arrays:
        """The input arrays (deterministic: seeded by the case id)."""
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        return tuple(np.array(a, copy=True) for a in self.make(rng))

    def inputs(self) -> tuple[mg.Tensor, ...]:
        """Fresh input tensors; floating inputs require grad."""
        out = []
        for a in self.arrays():
            t = mg.from_numpy(a)
            if a.dtype.kind == "f":
                t.requires_grad_(True)
            out.append(t)
        return tuple(out)


def P(name: str) -> Any:
    """The primitive ``name``, looked up when called."""
    return REGISTRY[name]


# ---------------------------------------------------------------------------- input builders


def normal(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape)


def uniform(lo: float, hi: float, *shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(lo, hi, shape)


def away(
    lo: float, hi: float, *shape: int, center: float = 0.0
) -> Callable[[np.random.Generator], np.ndarray]:
    """Values with ``lo <= |v - center| <= hi`` and random signs: away from a kink at center."""

    def make(rng: np.random.Generator) -> np.ndarray:
        mag = rng.uniform(lo, hi, shape)
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return center + sign * mag

    return make


def avoiding(
    points: tuple[float, ...], *shape: int, lo: float = -1.5, hi: float = 1.5, gap: float = 0.1
) -> Callable[[np.random.Generator], np.ndarray]:
    """Uniform values in ``[lo, hi]`` at least ``gap`` away from each of ``points``."""

    def make(rng: np.random.Generator) -> np.ndarray:
        v = rng.uniform(lo, hi, shape)
        for _ in range(1000):
            bad = np.zeros(shape, dtype=bool)
            for p in points:
                bad |= np.abs(v - p) < gap
            if not bad.any():
                return v
            v = np.where(bad, rng.uniform(lo, hi, shape), v)
        raise AssertionError("could not draw values away from the kinks")

    return make


def distinct(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    """Values at least 0.1 apart (no ties for max/min) in a random order."""

    def make(rng: np.random.Generator) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        v = np.arange(n) * 0.3 - 0.15 * n + rng.uniform(-0.1, 0.1, n)
        return rng.permutation(v).reshape(shape)

    return make


def quotients(shape_x: tuple, shape_y: tuple) -> Callable[[np.random.Generator], Arrays]:
    """``x, y`` whose broadcast quotient ``x / y`` is at least 0.2 from every integer: away
    from the jumps of ``floor_divide`` and ``remainder``."""

    def make(rng: np.random.Generator) -> Arrays:
        y = away(0.5, 2.0, *shape_y)(rng)
        full = np.broadcast_shapes(shape_x, shape_y)
        q = rng.integers(-3, 3, full) + rng.uniform(0.2, 0.8, full)
        x = q * y  # the full shape; reduce it to shape_x where x broadcasts
        for d, n in enumerate((1,) * (len(full) - len(shape_x)) + tuple(shape_x)):
            if n == 1:
                x = x[(slice(None),) * d + (slice(0, 1),)]
        return x.reshape(shape_x), y

    return make


def inputs(*makers: Callable[[np.random.Generator], np.ndarray]) -> Callable:
    return lambda rng: tuple(m(rng) for m in makers)


def separated(
    shape_x: tuple, shape_y: tuple
) -> Callable[[np.random.Generator], Arrays]:
    """A pair whose broadcast elements differ by at least 0.2 (no ties for maximum/minimum)."""

    def make(rng: np.random.Generator) -> Arrays:
        y = rng.standard_normal(shape_y)
        full = np.broadcast_shapes(shape_x, shape_y)
        x = rng.standard_normal(shape_x)  # redrawn until every broadcast pair is 0.2 apart
        for _ in range(1000):
            gap = np.abs(np.broadcast_to(x, full) - np.broadcast_to(y, full))
            if gap.min() >= 0.2:
                return x, y
            x = rng.standard_normal(shape_x) * 2
        raise AssertionError("could not draw separated inputs")

    return make


def idx(*index: Any) -> tuple:
    """An index as the ``getitem``/``index_put`` primitives take it."""
    return normalize_index(index if len(index) != 1 else index[0])


def _sum_ref(dim, keepdim):
    return lambda x: np.sum(x, axis=dim, keepdims=keepdim)


def _clip(lo, hi):
    return lambda x: np.clip(x, lo, hi)


def _scatter_ref(shape, index):
    def ref(g):
        out = np.zeros(shape)
        np.add.at(out, index, g)
        return out

    return ref


def _put_ref(index):
    def ref(x, v):
        out = x.copy()
        out[index] = v
        return out

    return ref


# ---------------------------------------------------------------------------- samples

SAMPLES: dict[str, list[Case]] = {}
NONDIFF_SAMPLES: dict[str, list[Case]] = {}


def case(op: str, label: str, make, fn, ref=None, **kw) -> None:
    SAMPLES.setdefault(op, []).append(Case(op, label, make, fn, ref, **kw))


def nondiff(op: str, label: str, make, fn, ref=None) -> None:
    NONDIFF_SAMPLES.setdefault(op, []).append(Case(op, label, make, fn, ref))


# add / sub / mul / div: same shape, broadcasting both ways, 0-d, Python scalar constants
for op, npf in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply)):
    case(op, "same", inputs(normal(3, 4), normal(3, 4)), lambda x, y, op=op: P(op)(x, y), npf)
    case(op, "bcast-row", inputs(normal(2, 3, 4), normal(4)),
         lambda x, y, op=op: P(op)(x, y), npf)
    case(op, "bcast-both", inputs(normal(3, 1), normal(2, 1, 4)),
         lambda x, y, op=op: P(op)(x, y), npf)
    case(op, "0d", inputs(normal(), normal(2, 3)), lambda x, y, op=op: P(op)(x, y), npf)
    case(op, "scalar-right", inputs(normal(3)), lambda x, op=op: P(op)(x, 2.5),
         lambda x, npf=npf: npf(x, 2.5))
    case(op, "scalar-left", inputs(normal(3)), lambda x, op=op: P(op)(-1.5, x),
         lambda x, npf=npf: npf(-1.5, x))
    case(op, "same-tensor", inputs(normal(2, 3)), lambda x, op=op: P(op)(x, x),
         lambda x, npf=npf: npf(x, x))
case("add", "public-alpha", inputs(normal(3), normal(2, 3)),
     lambda x, y: mg.add(x, y, alpha=2.0), lambda x, y: x + 2.0 * y)
case("sub", "operator", inputs(normal(3), normal(2, 3)), lambda x, y: x - y, np.subtract)
case("mul", "operator-scalar", inputs(normal(2, 2)), lambda x: 3.0 * x, lambda x: 3.0 * x)

case("div", "same", inputs(normal(3, 4), away(0.5, 2, 3, 4)), lambda x, y: P("div")(x, y),
     np.divide)
case("div", "bcast", inputs(normal(2, 1, 3), away(0.5, 2, 4, 1)),
     lambda x, y: P("div")(x, y), np.divide)
case("div", "scalar-num", inputs(away(0.5, 2, 5)), lambda y: P("div")(1.0, y),
     lambda y: 1.0 / y)
case("div", "scalar-den", inputs(normal(5)), lambda x: P("div")(x, 3.0), lambda x: x / 3.0)
case("div", "operator", inputs(normal(3, 1), away(0.5, 2, 3)), lambda x, y: x / y, np.divide)

case("floor_divide", "same", quotients((3, 4), (3, 4)), lambda x, y: P("floor_divide")(x, y),
     np.floor_divide)
case("floor_divide", "operator-scalar", inputs(normal(2, 3)), lambda x: x // 0.7,
     lambda x: np.floor_divide(x, 0.7))
case("floor_divide", "public-reflected", inputs(away(0.5, 2, 5)), lambda y: 3.3 // y,
     lambda y: np.floor_divide(3.3, y))
case("remainder", "same", quotients((3, 4), (3, 4)), lambda x, y: P("remainder")(x, y),
     np.remainder)
case("remainder", "bcast", quotients((2, 1, 3), (4, 1)), lambda x, y: x % y, np.remainder)
case("remainder", "scalar-den", inputs(normal(5)), lambda x: mg.remainder(x, 0.7),
     lambda x: np.remainder(x, 0.7))
# 3.3 / y is at least 0.12 from an integer for these divisors
case("remainder", "scalar-num", lambda rng: (np.array([0.6, 0.8, 1.5, -0.9, -1.4]),),
     lambda y: 3.3 % y, lambda y: np.remainder(3.3, y))

case("neg", "2d", inputs(normal(3, 4)), lambda x: P("neg")(x), np.negative)
case("neg", "0d", inputs(normal()), lambda x: -x, np.negative)

case("pow", "tensors", inputs(uniform(0.5, 2, 3, 4), uniform(-1.5, 1.5, 3, 4)),
     lambda x, y: P("pow")(x, y), np.power)
case("pow", "bcast", inputs(uniform(0.5, 2, 2, 1), uniform(-1.5, 1.5, 3)),
     lambda x, y: P("pow")(x, y), np.power)
case("pow", "int-exponent", inputs(normal(2, 3)), lambda x: P("pow")(x, 3.0),
     lambda x: x**3.0)
case("pow", "frac-exponent", inputs(uniform(0.5, 2, 4)), lambda x: x**2.5, lambda x: x**2.5)
case("pow", "neg-exponent", inputs(uniform(0.5, 2, 4)), lambda x: x**-1.5, lambda x: x**-1.5)
case("pow", "scalar-base", inputs(normal(4)), lambda y: P("pow")(2.0, y), lambda y: 2.0**y)
case("pow", "public", inputs(uniform(0.5, 2, 3), normal(3)), lambda x, y: mg.pow(x, y),
     np.power)

case("exp", "2d", inputs(uniform(-2, 2, 3, 4)), lambda x: P("exp")(x), np.exp)
case("exp", "0d", inputs(normal()), lambda x: x.exp(), np.exp)
case("log", "2d", inputs(uniform(0.2, 3, 3, 4)), lambda x: P("log")(x), np.log)
case("log", "public", inputs(uniform(0.2, 3, 5)), lambda x: mg.log(x), np.log)
case("sqrt", "2d", inputs(uniform(0.2, 3, 3, 4)), lambda x: P("sqrt")(x), np.sqrt)
case("sqrt", "method", inputs(uniform(0.2, 3, 5)), lambda x: x.sqrt(), np.sqrt)
case("std_from_var", "direct", inputs(uniform(0.2, 3, 5)), lambda v: P("std_from_var")(v),
     np.sqrt)
case("std_from_var", "public-std", inputs(normal(3, 4)), lambda x: x.std(dim=1),
     lambda x: x.std(axis=1, ddof=1))
case("std_from_var", "public-std-keepdim-biased", inputs(normal(2, 3, 4)),
     lambda x: mg.std(x, dim=(0, 2), keepdim=True, correction=0),
     lambda x: x.std(axis=(0, 2), keepdims=True))
case("abs", "2d", inputs(away(0.2, 2, 3, 4)), lambda x: P("abs")(x), np.abs)
case("abs", "operator", inputs(away(0.2, 2, 5)), lambda x: abs(x), np.abs)
case("tanh", "2d", inputs(uniform(-3, 3, 3, 4)), lambda x: P("tanh")(x), np.tanh)
case("tanh", "method", inputs(normal(2, 2)), lambda x: x.tanh(), np.tanh)
case("tanh_backward", "pair", inputs(normal(3, 4), uniform(-0.9, 0.9, 3, 4)),
     lambda g, out: P("tanh_backward")(g, out), lambda g, out: g * (1 - out**2))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


case("sigmoid", "2d", inputs(uniform(-4, 4, 3, 4)), lambda x: P("sigmoid")(x), _sigmoid)
case("sigmoid", "large", inputs(uniform(-12, 12, 6)), lambda x: mg.sigmoid(x), _sigmoid)
case("sigmoid_backward", "pair", inputs(normal(3, 4), uniform(0.1, 0.9, 3, 4)),
     lambda g, out: P("sigmoid_backward")(g, out), lambda g, out: g * out * (1 - out))
case("relu", "2d", inputs(away(0.1, 2, 3, 4)), lambda x: P("relu")(x),
     lambda x: np.maximum(x, 0))
case("relu", "method", inputs(away(0.1, 2, 6)), lambda x: x.relu(), lambda x: np.maximum(x, 0))
_RELU_OUT = np.maximum(away(0.1, 2, 3, 4)(np.random.default_rng(3)), 0)  # y = relu(x), kept
case("relu_backward", "pair", inputs(normal(3, 4)),
     lambda g: P("relu_backward")(g, mg.tensor(_RELU_OUT)), lambda g: g * (_RELU_OUT > 0))

for op, npf in (("maximum", np.maximum), ("minimum", np.minimum)):
    case(op, "same", separated((3, 4), (3, 4)), lambda x, y, op=op: P(op)(x, y), npf)
    case(op, "bcast", separated((3, 1), (4,)), lambda x, y, op=op: P(op)(x, y), npf)
    case(op, "scalar", inputs(away(0.2, 2, 3, 4, center=0.3)),
         lambda x, op=op: P(op)(x, 0.3), lambda x, npf=npf: npf(x, 0.3))
case("maximum", "public", separated((2, 3), (3,)), lambda x, y: mg.maximum(x, y), np.maximum)
case("maximum", "max-elementwise", separated((2, 3), (2, 3)), lambda x, y: mg.max(x, y),
     np.maximum)
case("minimum", "public", separated((2, 3), (3,)), lambda x, y: mg.minimum(x, y), np.minimum)

case("clamp", "both", inputs(avoiding((-0.5, 0.5), 4, 5)),
     lambda x: P("clamp")(x, min=-0.5, max=0.5), _clip(-0.5, 0.5))
case("clamp", "both-outside", inputs(away(0.6, 1.5, 4, 5)),
     lambda x: P("clamp")(x, min=-0.4, max=0.4), _clip(-0.4, 0.4))
case("clamp", "min-only", inputs(away(0.1, 2, 4, 5, center=0.2)), lambda x: x.clamp(min=0.2),
     _clip(0.2, None))
case("clamp", "max-only", inputs(away(0.1, 2, 4, 5, center=-0.2)),
     lambda x: mg.clamp(x, max=-0.2), _clip(None, -0.2))

_COND = np.array([[True, False, True, True], [False, False, True, False], [True, True, False,
                                                                             False]])
_COND_COL = np.array([[True], [False], [True]])
case("where", "same", inputs(normal(3, 4), normal(3, 4)),
     lambda x, y: P("where")(mg.tensor(_COND), x, y), lambda x, y: np.where(_COND, x, y))
case("where", "bcast", inputs(normal(3, 4), normal(4)),
     lambda x, y: mg.where(mg.tensor(_COND_COL), x, y), lambda x, y: np.where(_COND_COL, x, y))
case("where", "scalar-other", inputs(normal(3, 4)), lambda x: mg.where(mg.tensor(_COND), x, 0.5),
     lambda x: np.where(_COND, x, 0.5))
case("where", "scalar-input", inputs(normal(4)),
     lambda y: mg.where(mg.tensor(_COND_COL), -2.0, y), lambda y: np.where(_COND_COL, -2.0, y))

case("to", "same-dtype", inputs(normal(3, 4)), lambda x: P("to")(x, dtype=np.float64),
     lambda x: x)
case("to", "round-trip-f32", inputs(normal(3, 4)),
     lambda x: P("to")(P("to")(x, dtype=np.float32), dtype=np.float64),
     lambda x: x.astype(np.float32).astype(np.float64),
     check={"eps": 1e-3, "atol": 1e-4, "rtol": 1e-3})
case("clone", "2d", inputs(normal(3, 4)), lambda x: P("clone")(x), lambda x: x)

case("sum", "all", inputs(normal(3, 4)), lambda x: P("sum")(x, dim=None, keepdim=False),
     _sum_ref(None, False))
case("sum", "dim1", inputs(normal(3, 4)), lambda x: P("sum")(x, dim=(1,), keepdim=False),
     _sum_ref(1, False))
case("sum", "keepdim", inputs(normal(2, 3, 4)), lambda x: P("sum")(x, dim=(0, 2), keepdim=True),
     _sum_ref((0, 2), True))
case("sum", "all-keepdim", inputs(normal(2, 3)), lambda x: P("sum")(x, dim=None, keepdim=True),
     _sum_ref(None, True))
case("sum", "0d", inputs(normal()), lambda x: P("sum")(x, dim=None, keepdim=False),
     _sum_ref(None, False))
case("sum", "public-neg-dim", inputs(normal(2, 3, 4)), lambda x: mg.sum(x, dim=-1),
     _sum_ref(-1, False))
case("sum", "mean", inputs(normal(2, 3, 4)), lambda x: x.mean(dim=(0, -1), keepdim=True),
     lambda x: np.mean(x, axis=(0, -1), keepdims=True))

case("sum_to", "lead-and-ones", inputs(normal(2, 3, 4)), lambda x: P("sum_to")(x, shape=(3, 1)),
     lambda x: x.sum(axis=(0, 2)).reshape(3, 1))
case("sum_to", "row", inputs(normal(2, 3, 4)), lambda x: P("sum_to")(x, shape=(1, 4)),
     lambda x: x.sum(axis=(0, 1)).reshape(1, 4))
case("sum_to", "scalar", inputs(normal(2, 3)), lambda x: P("sum_to")(x, shape=()),
     lambda x: x.sum())
case("sum_to", "same", inputs(normal(2, 3)), lambda x: P("sum_to")(x, shape=(2, 3)), lambda x: x)

for op, npf in (("amax", np.max), ("amin", np.min)):
    case(op, "all", inputs(distinct(3, 4)), lambda x, op=op: P(op)(x, dim=None, keepdim=False),
         lambda x, npf=npf: npf(x))
    case(op, "dim1", inputs(distinct(3, 4)), lambda x, op=op: P(op)(x, dim=(1,), keepdim=False),
         lambda x, npf=npf: npf(x, axis=1))
    case(op, "dims-keepdim", inputs(distinct(2, 3, 4)),
         lambda x, op=op: P(op)(x, dim=(0, 2), keepdim=True),
         lambda x, npf=npf: npf(x, axis=(0, 2), keepdims=True))
case("amax", "public-max-all", inputs(distinct(3, 4)), lambda x: x.max(), lambda x: x.max())
case("amax", "public-max-dims", inputs(distinct(3, 4)), lambda x: x.max(dim=(0, 1)),
     lambda x: x.max())

_GATHER = np.array([[0, 3], [2, 2], [1, 0]])
case("gather", "dim1", inputs(normal(3, 4)),
     lambda x: P("gather")(x, mg.tensor(_GATHER), dim=1),
     lambda x: np.take_along_axis(x, _GATHER, axis=1))
case("gather", "public-smaller-index", inputs(normal(4, 5)),
     lambda x: mg.gather(x, 0, mg.tensor(_GATHER.T)),
     lambda x: np.take_along_axis(x[:, :3], _GATHER.T, axis=0))
case("gather", "public-max-dim", inputs(distinct(3, 4)), lambda x: mg.max(x, dim=-1).values,
     lambda x: x.max(axis=-1))
case("gather", "public-min-dim-keepdim", inputs(distinct(3, 4)),
     lambda x: x.min(0, keepdim=True)[0], lambda x: x.min(axis=0, keepdims=True))
case("gather", "public-take-along-dim", inputs(normal(3, 4)),
     lambda x: mg.take_along_dim(x, mg.tensor([[1], [3], [0]]), 1),
     lambda x: np.take_along_axis(x, np.array([[1], [3], [0]]), axis=1))


_ROW1 = (("getitem", (("index", (1, Ellipsis)),)),)
_COL = (("permute", (("dims", (1, 0)),)), ("getitem", (("index", (slice(1, 3), Ellipsis)),)))
case("view_write", "row", inputs(normal(2, 3), normal(3)),
     lambda b, v: P("view_write")(b, v, steps=_ROW1, order=(0, 1)),
     lambda b, v: np.concatenate([b[:1], v[None]]))
case("view_write", "view-of-view-broadcast", inputs(normal(2, 3), normal(2)),
     lambda b, v: P("view_write")(b, v, steps=_COL, order=(0, 1)),
     lambda b, v: _np_view_write_col(b, v))


def _np_view_write_col(b: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = b.copy()
    out.T[1:3] = v
    return out


def _np_scatter_add(x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = x.copy()
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    np.add.at(out, tuple(grid), src)
    return out


case("gather_backward", "repeats", inputs(normal(3, 2)),
     lambda g: P("gather_backward")(g, mg.tensor(_GATHER), dim=1, shape=(3, 4)),
     lambda g: _np_scatter_add(np.zeros((3, 4)), 1, _GATHER, g))
case("gather_backward", "public-scatter-add", inputs(normal(4, 2), normal(3, 2)),
     lambda x, s: mg.scatter_add(x, 0, mg.tensor(_GATHER[:, ::-1].copy()), s),
     lambda x, s: _np_scatter_add(x, 0, _GATHER[:, ::-1], s))

case("reshape", "merge", inputs(normal(2, 3, 4)), lambda x: P("reshape")(x, shape=(6, 4)),
     lambda x: x.reshape(6, 4))
case("reshape", "flat", inputs(normal(2, 3, 4)), lambda x: x.reshape(-1),
     lambda x: x.reshape(-1))
case("reshape", "of-transposed", inputs(normal(3, 4)), lambda x: x.T.reshape(2, 6),
     lambda x: x.T.reshape(2, 6))
case("reshape", "0d", inputs(normal()), lambda x: x.reshape(1, 1), lambda x: x.reshape(1, 1))
case("reshape", "view", inputs(normal(4, 3)), lambda x: x.view(2, 2, 3),
     lambda x: x.reshape(2, 2, 3))
case("reshape", "squeeze-unsqueeze", inputs(normal(3, 1, 4)),
     lambda x: x.squeeze(1).unsqueeze(0), lambda x: x.reshape(1, 3, 4))
case("reshape", "flatten", inputs(normal(2, 3, 4)), lambda x: x.flatten(1),
     lambda x: x.reshape(2, 12))

case("permute", "3d", inputs(normal(2, 3, 4)), lambda x: P("permute")(x, dims=(2, 0, 1)),
     lambda x: x.transpose(2, 0, 1))
case("permute", "T", inputs(normal(3, 4)), lambda x: x.T, lambda x: x.T)
case("permute", "transpose", inputs(normal(2, 3, 4)), lambda x: x.transpose(0, -1),
     lambda x: np.swapaxes(x, 0, -1))

case("expand", "3d", inputs(normal(3, 1)), lambda x: P("expand")(x, shape=(2, 3, 4)),
     lambda x: np.broadcast_to(x, (2, 3, 4)))
case("expand", "1d", inputs(normal(1)), lambda x: x.expand(5), lambda x: np.broadcast_to(x, 5))
case("expand", "0d", inputs(normal()), lambda x: x.expand(2, 2),
     lambda x: np.broadcast_to(x, (2, 2)))
case("expand", "keep-size", inputs(normal(1, 3)), lambda x: x.expand(4, -1),
     lambda x: np.broadcast_to(x, (4, 3)))

_ROWS = np.array([0, 2, 0, 3])
_MASK = np.array([[True, False, True], [False, False, True], [True, True, False],
                  [False, True, False]])
for label, index in (
    ("int", idx(1)),
    ("neg-int", idx(-1, slice(None))),
    ("slice-step", idx(slice(None, None, 2), slice(1, None))),
    ("reverse", idx(slice(None, None, -1))),
    ("none-ellipsis", idx(None, Ellipsis, 0)),
    ("int-array-repeated", idx(_ROWS)),
    ("two-arrays", idx(np.array([0, 1, 1]), np.array([2, 0, 2]))),
    ("slice-and-array", idx(slice(1, 3), np.array([2, 2, 0]))),
    ("neg-array", idx(np.array([-1, 0, -1]))),
    ("bool-mask", idx(_MASK)),
    ("bool-rows", idx(np.array([True, False, True, True]))),
):
    case("getitem", label, inputs(normal(4, 3)),
         lambda x, index=index: P("getitem")(x, index=index), lambda x, index=index: x[index])
case("getitem", "public-advanced", inputs(normal(4, 3)), lambda x: x[[3, 3, 1], 1:],
     lambda x: x[[3, 3, 1], 1:])
case("getitem", "public-tensor-index", inputs(normal(4, 3)),
     lambda x: x[mg.tensor([2, 0, 2])], lambda x: x[[2, 0, 2]])
case("getitem", "public-mask", inputs(normal(4, 3)), lambda x: x[mg.tensor(_MASK)],
     lambda x: x[_MASK])
case("getitem", "chunk", inputs(normal(5, 2)), lambda x: x.chunk(2)[1], lambda x: x[3:])
case("getitem", "split", inputs(normal(2, 5)), lambda x: mg.split(x, [1, 4], dim=1)[1],
     lambda x: x[:, 1:])
case("getitem", "iter", inputs(normal(3, 2)), lambda x: list(x)[2], lambda x: x[2])

for label, shape, index, gshape in (
    ("rows-repeated", (3, 4), idx(np.array([0, 2, 0, 1, 0])), (5, 4)),
    ("cols-repeated", (3, 4), idx(slice(None), np.array([1, 1, 3])), (3, 3)),
    ("pairs-repeated", (3, 4), idx(np.array([0, 0, 2]), np.array([1, 1, 3])), (3,)),
    ("basic", (3, 4), idx(slice(1, 3)), (2, 4)),
    ("basic-int", (3, 4), idx(1, slice(None, None, 2)), (2,)),
    ("mask", (4, 3), idx(_MASK), (int(_MASK.sum()),)),
):
    case("index_scatter", label, inputs(normal(*gshape)),
         lambda g, shape=shape, index=index: P("index_scatter")(g, shape=shape, index=index),
         _scatter_ref(shape, index))

for label, index, vshape in (
    ("rows", idx(np.array([0, 2])), (2, 3)),
    ("rows-bcast", idx(np.array([3, 1])), (3,)),
    ("slice", idx(slice(1, 3), 0), (2,)),
    ("mask", idx(_MASK), (int(_MASK.sum()),)),
    ("bcast-scalar-shape", idx(slice(None), 1), (1,)),
):
    case("index_put", label, inputs(normal(4, 3), normal(*vshape)),
         lambda x, v, index=index: P("index_put")(x, v, index=index), _put_ref(index))
case("index_put", "scalar-value", inputs(normal(4, 3)),
     lambda x: P("index_put")(x, 2.0, index=idx(np.array([1, 2]))),
     lambda x: _put_ref(idx(np.array([1, 2])))(x, 2.0))

case("cat", "dim0", inputs(normal(2, 3), normal(1, 3)), lambda x, y: P("cat")(x, y, dim=0),
     lambda x, y: np.concatenate([x, y], 0))
case("cat", "three-dim1", inputs(normal(2, 1), normal(2, 3), normal(2, 2)),
     lambda x, y, z: mg.cat([x, y, z], dim=1), lambda x, y, z: np.concatenate([x, y, z], 1))
case("cat", "neg-dim", inputs(normal(2, 3, 1), normal(2, 3, 2)),
     lambda x, y: mg.cat([x, y], -1), lambda x, y: np.concatenate([x, y], -1))
case("cat", "same-tensor", inputs(normal(2, 2)), lambda x: mg.cat([x, x * 2.0]),
     lambda x: np.concatenate([x, x * 2.0]))
case("cat", "stack", inputs(normal(2, 3), normal(2, 3)), lambda x, y: mg.stack([x, y], dim=1),
     lambda x, y: np.stack([x, y], 1))

case("fill", "2d", inputs(normal(3, 4)), lambda x: P("fill")(x, value=2.5),
     lambda x: np.full_like(x, 2.5), second_order=False)  # the first gradient is None
case("copy", "bcast", inputs(normal(3, 4), normal(4)), lambda x, s: P("copy")(x, s),
     lambda x, s: np.broadcast_to(s, x.shape).copy())
case("copy", "same", inputs(normal(2, 3), normal(2, 3)), lambda x, s: P("copy")(x, s),
     lambda x, s: s)

for label, sx, sy in (
    ("2d-2d", (3, 4), (4, 2)),
    ("1d-1d", (4,), (4,)),
    ("1d-2d", (4,), (4, 3)),
    ("2d-1d", (3, 4), (4,)),
    ("batched", (2, 3, 4), (2, 4, 5)),
    ("batch-bcast", (2, 1, 3, 4), (5, 4, 2)),
    ("3d-2d", (2, 3, 4), (4, 2)),
    ("1d-3d", (4,), (2, 4, 3)),
    ("3d-1d", (2, 3, 4), (4,)),
):
    case("matmul", label, inputs(normal(*sx), normal(*sy)), lambda x, y: P("matmul")(x, y),
         np.matmul)
case("matmul", "operator", inputs(normal(2, 3), normal(3, 2)), lambda x, y: x @ y, np.matmul)
case("matmul", "public", inputs(normal(2, 3), normal(3)), lambda x, y: mg.matmul(x, y),
     np.matmul)

# nn ops (memgrad/ops/nn.py and the fused softmax of ops/reduce.py); integer targets and
# indices are constants of the calls, so that every input is a float64 tensor


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


_np_erfc = np.vectorize(math.erfc)
_GELU_K = math.sqrt(2 / math.pi)


def _np_gelu(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * _np_erfc(-x / math.sqrt(2))


def _np_gelu_grad(x: np.ndarray) -> np.ndarray:
    return 0.5 * _np_erfc(-x / math.sqrt(2)) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(_GELU_K * (x + 0.044715 * x**3)))


def _np_gelu_tanh_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(_GELU_K * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_K * (1 + 3 * 0.044715 * x * x)


def _np_normalized(x: np.ndarray, ndim: int, eps: float) -> np.ndarray:
    axes = tuple(range(x.ndim - ndim, x.ndim))
    c = x - x.mean(axis=axes, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=axes, keepdims=True) + eps)


def _np_layer_norm_grad(g: np.ndarray, x: np.ndarray, w: Any, ndim: int,
                        eps: float = 1e-5) -> np.ndarray:
    # the Jacobian of the normalization written out, applied to a = g * w
    axes = tuple(range(x.ndim - ndim, x.ndim))
    c = x - x.mean(axis=axes, keepdims=True)
    rstd = 1 / np.sqrt((c * c).mean(axis=axes, keepdims=True) + eps)
    h = c * rstd
    a = g * w
    return rstd * (a - a.mean(axis=axes, keepdims=True)
                   - h * (a * h).mean(axis=axes, keepdims=True))


_TARGET = np.array([0, 3, -100, 1, 2])
_TARGET_4D = np.array([[[0, 2], [1, 1]], [[2, 0], [-100, 1]]])
_INDICES = np.array([[1, 4, 1], [5, 0, 2]])
_KEEP = np.array([[True, False, True, True], [False, True, True, False],
                  [True, True, False, True]])


def _np_nll(logp: np.ndarray, t: np.ndarray, smoothing: float) -> np.ndarray:
    kept = t != -100
    nll = -logp[np.arange(len(t)), np.where(kept, t, 0)]
    return np.where(kept, (1 - smoothing) * nll - smoothing * logp.mean(axis=1), 0.0)


def _np_cross_entropy(x: np.ndarray, t: np.ndarray, smoothing: float) -> np.ndarray:
    return _np_nll(_np_log_softmax(x, 1), t, smoothing)


def _np_nll_grad(g: np.ndarray, t: np.ndarray, classes: int, smoothing: float) -> np.ndarray:
    kept = t != -100
    q = np.full((len(t), classes), smoothing / classes)
    q[np.arange(len(t)), np.where(kept, t, 0)] += 1 - smoothing
    return -q * np.where(kept, g, 0.0)[:, None]


_ATTEND = np.array([[True, False, True, True, False], [False, True, True, False, False],
                   [True, True, True, True, True]])  # an attention mask of (3, 5)


def _np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    return _np_softmax(s, -1) @ v


def _seeded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with the global generator seeded, so that every call draws the same."""

    def run(*args: Any) -> Any:
        with mg.random.fork_rng():
            mg.manual_seed(7)
            return fn(*args)

    return run


case("linear", "2d", inputs(normal(3, 4), normal(5, 4), normal(5)),
     lambda x, w, b: P("linear")(x, w, b), lambda x, w, b: x @ w.T + b)
case("linear", "3d-no-bias", inputs(normal(2, 3, 4), normal(5, 4)),
     lambda x, w: F.linear(x, w), lambda x, w: x @ w.T)
case("linear", "1d", inputs(normal(4), normal(2, 4), normal(2)),
     lambda x, w, b: F.linear(x, w, b), lambda x, w, b: w @ x + b)

case("linear_rows", "3d", inputs(normal(2, 3, 4), normal(6, 4), normal(6)),
     lambda x, w, b: P("linear_rows")(x, w, b, lo=2, hi=5),
     lambda x, w, b: x @ w[2:5].T + b[2:5])
case("linear_rows", "no-bias", inputs(normal(3, 4), normal(6, 4)),
     lambda x, w: P("linear_rows")(x, w, None, lo=0, hi=2), lambda x, w: x @ w[:2].T)
case("linear_input_grad", "3d", inputs(normal(2, 3, 5), normal(5, 4)),
     lambda g, w: P("linear_input_grad")(g, w), lambda g, w: g @ w)
case("linear_input_grad", "1d", inputs(normal(2), normal(2, 4)),
     lambda g, w: P("linear_input_grad")(g, w), lambda g, w: g @ w)
case("linear_weight_grad", "3d", inputs(normal(2, 3, 5), normal(2, 3, 4)),
     lambda g, x: P("linear_weight_grad")(g, x),
     lambda g, x: g.reshape(-1, 5).T @ x.reshape(-1, 4))
case("linear_weight_grad", "1d", inputs(normal(2), normal(4)),
     lambda g, x: P("linear_weight_grad")(g, x), lambda g, x: np.outer(g, x))

case("gelu", "exact", inputs(normal(3, 4)), lambda x: P("gelu")(x, approximate="none"),
     _np_gelu)
case("gelu", "public-tanh", inputs(uniform(-3, 3, 2, 5)),
     lambda x: F.gelu(x, approximate="tanh"), _np_gelu_tanh)
case("gelu_backward", "exact", inputs(normal(3, 4), normal(3, 4)),
     lambda g, x: P("gelu_backward")(g, x, approximate="none"),
     lambda g, x: g * _np_gelu_grad(x))
case("gelu_backward", "tanh", inputs(normal(3, 4), uniform(-3, 3, 3, 4)),
     lambda g, x: P("gelu_backward")(g, x, approximate="tanh"),
     lambda g, x: g * _np_gelu_tanh_grad(x))

case("softmax", "dim1", inputs(normal(3, 4)), lambda x: P("softmax")(x, dim=1),
     lambda x: _np_softmax(x, 1))
case("softmax", "public-dim0-3d", inputs(normal(3, 2, 4)), lambda x: mg.softmax(x, 0),
     lambda x: _np_softmax(x, 0))
case("softmax", "method-0d", inputs(normal()), lambda x: x.softmax(0), lambda x: np.ones_like(x))
case("softmax", "attention-mask", inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 2)),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mg.tensor(_ATTEND)),
     lambda q, k, v: _np_softmax(q @ np.swapaxes(k, -1, -2) / 2 + np.where(_ATTEND, 0, -np.inf),
                                 -1) @ v)
case("attention_softmax", "sdpa-causal",
     inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 2)),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), _np_attention)
case("attention_softmax", "causal", inputs(normal(2, 3, 4)),
     lambda x: P("attention_softmax")(x, scale=0.5, causal=True),
     lambda x: _np_softmax(0.5 * x + np.triu(np.full((3, 4), -np.inf), 1), -1))
case("attention_softmax", "wide-causal", inputs(normal(5, 3)),
     lambda x: P("attention_softmax")(x, scale=2.0, causal=True),
     lambda x: _np_softmax(2.0 * x + np.triu(np.full((5, 3), -np.inf), 1), -1))
case("attention_softmax", "full", inputs(normal(2, 2, 3, 4)),
     lambda x: P("attention_softmax")(x, scale=0.25, causal=False),
     lambda x: _np_softmax(0.25 * x, -1))
case("attention_softmax", "sdpa", inputs(normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 2)),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
     lambda q, k, v: _np_softmax(0.3 * q @ np.swapaxes(k, -1, -2), -1) @ v)
def _block_mask(rows: int, cols: int, block: int) -> np.ndarray:
    """The block mask of NOTE [ Causal products ]: row i keeps columns j < (i // block + 1)
    * block."""
    return np.arange(cols)[None, :] < (np.arange(rows)[:, None] // block + 1) * block


def _causal(form: str, block: int) -> Callable[..., Any]:
    return lambda a, b: P("causal_matmul")(a, b, form=form, block=block)


case("causal_matmul", "abT", inputs(normal(2, 5, 3), normal(2, 7, 3)), _causal("abT", 2),
     lambda a, b: _block_mask(5, 7, 2) * (a @ np.swapaxes(b, -1, -2)))
case("causal_matmul", "abT-2d-tall", inputs(normal(7, 2), normal(4, 2)), _causal("abT", 3),
     lambda a, b: _block_mask(7, 4, 3) * (a @ b.T))
case("causal_matmul", "ab", inputs(normal(2, 1, 5, 7), normal(2, 1, 7, 3)), _causal("ab", 2),
     lambda a, b: (_block_mask(5, 7, 2) * a) @ b)
case("causal_matmul", "ab-2d-wide", inputs(normal(4, 9), normal(9, 2)), _causal("ab", 3),
     lambda a, b: (_block_mask(4, 9, 3) * a) @ b)
case("causal_matmul", "aTb", inputs(normal(2, 5, 7), normal(2, 5, 3)), _causal("aTb", 2),
     lambda a, b: np.swapaxes(_block_mask(5, 7, 2) * a, -1, -2) @ b)
case("causal_matmul", "aTb-2d-tall", inputs(normal(9, 4), normal(9, 2)), _causal("aTb", 4),
     lambda a, b: (_block_mask(9, 4, 4) * a).T @ b)
case("causal_matmul", "sdpa-blocks", inputs(normal(1, 2, 9, 2), normal(1, 2, 9, 2),
                                            normal(1, 2, 9, 3)),
     lambda q, k, v: _small_blocks(F.scaled_dot_product_attention, q, k, v),
     _np_attention)


def _small_blocks(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args, is_causal=True)`` with causal products of blocks of 2 rows, so that small
    samples have blocks to skip."""
    saved, F.CAUSAL_BLOCK = F.CAUSAL_BLOCK, 2
    try:
        return fn(*args, is_causal=True)
    finally:
        F.CAUSAL_BLOCK = saved


def _np_heads(x: np.ndarray, heads: int) -> np.ndarray:
    n, t, e = x.shape
    return x.reshape(n, t, heads, e // heads).transpose(0, 2, 1, 3)


def _np_merge(x: np.ndarray) -> np.ndarray:
    n, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(n, t, h * d)


def _np_self_weights(qkv: np.ndarray, heads: int, causal: bool, scale: float) -> tuple:
    q, k, v = (_np_heads(x, heads) for x in np.split(qkv, 3, -1))
    s = scale * q @ np.swapaxes(k, -1, -2)
    if causal:
        s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
    return q, k, v, _np_softmax(s, -1)


def _np_self_attention(qkv: np.ndarray, heads: int, causal: bool, scale: float) -> np.ndarray:
    q, k, v, w = _np_self_weights(qkv, heads, causal, scale)
    return _np_merge(w @ v)


def _np_self_attention_backward(g: np.ndarray, qkv: np.ndarray, heads: int, causal: bool,
                                scale: float) -> np.ndarray:
    q, k, v, w = _np_self_weights(qkv, heads, causal, scale)
    gh = _np_heads(g, heads)
    dw = gh @ np.swapaxes(v, -1, -2)
    ds = scale * w * (dw - (dw * w).sum(-1, keepdims=True))
    grads = ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(w, -1, -2) @ gh
    return np.concatenate([_np_merge(x) for x in grads], -1)


def _self(heads: int, causal: bool, scale: float, backward: bool = False) -> tuple:
    if backward:
        return (lambda g, qkv: P("self_attention_backward")(g, qkv, heads=heads,
                                                            causal=causal, scale=scale),
                lambda g, qkv: _np_self_attention_backward(g, qkv, heads, causal, scale))
    return (lambda qkv: P("self_attention")(qkv, heads=heads, causal=causal, scale=scale),
            lambda qkv: _np_self_attention(qkv, heads, causal, scale))


case("self_attention", "causal", inputs(normal(2, 5, 6)), *_self(2, True, 0.7))
case("self_attention", "full", inputs(normal(2, 4, 6)), *_self(1, False, 0.4))
case("self_attention", "causal-blocks", inputs(normal(1, 7, 12)),
     lambda qkv: _small_blocks(lambda x, is_causal: P("self_attention")(
         x, heads=2, causal=is_causal, scale=0.5), qkv),
     _self(2, True, 0.5)[1])
case("self_attention", "module", inputs(normal(2, 5, 4)),
     lambda x: _seeded(lambda: mg.nn.MultiheadSelfAttention(4, 2, causal=True).double())()(x))
case("self_attention_backward", "causal", inputs(normal(2, 5, 2), normal(2, 5, 6)),
     *_self(2, True, 0.7, backward=True))
case("self_attention_backward", "full", inputs(normal(2, 4, 4), normal(2, 4, 12)),
     *_self(2, False, 0.3, backward=True))
case("self_attention_backward", "causal-blocks", inputs(normal(1, 7, 4), normal(1, 7, 12)),
     lambda g, qkv: _small_blocks(lambda a, b, is_causal: P("self_attention_backward")(
         a, b, heads=2, causal=is_causal, scale=0.5), g, qkv),
     _self(2, True, 0.5, backward=True)[1])


case("attention_softmax_backward", "2d", inputs(normal(3, 4), uniform(0.05, 1, 3, 4)),
     lambda g, y: P("attention_softmax_backward")(g, y, scale=0.5),
     lambda g, y: 0.5 * y * (g - (g * y).sum(-1, keepdims=True)))
case("softmax_backward", "dim1", inputs(normal(3, 4), uniform(0.05, 1, 3, 4)),
     lambda g, y: P("softmax_backward")(g, y, dim=1),
     lambda g, y: y * (g - (g * y).sum(axis=1, keepdims=True)))
case("softmax_backward", "dim0", inputs(normal(3, 2, 4), uniform(0.05, 1, 3, 2, 4)),
     lambda g, y: P("softmax_backward")(g, y, dim=0),
     lambda g, y: y * (g - (g * y).sum(axis=0, keepdims=True)))
case("log_softmax", "dim1", inputs(normal(3, 4)), lambda x: P("log_softmax")(x, dim=1),
     lambda x: _np_log_softmax(x, 1))
case("log_softmax", "public-neg-dim", inputs(normal(2, 3, 4)), lambda x: x.log_softmax(-2),
     lambda x: _np_log_softmax(x, 1))
case("log_softmax_backward", "dim1", inputs(normal(3, 4), uniform(-3, -0.1, 3, 4)),
     lambda g, y: P("log_softmax_backward")(g, y, dim=1),
     lambda g, y: g - np.exp(y) * g.sum(axis=1, keepdims=True))

case("dropout", "mask", inputs(normal(3, 4)),
     lambda x: P("dropout")(x, mg.tensor(_KEEP), scale=2.0), lambda x: x * _KEEP * 2.0)
case("dropout", "public-seeded", inputs(normal(4, 5)), _seeded(lambda x: F.dropout(x, 0.4)))

case("layer_norm", "affine", inputs(normal(3, 4), normal(4), normal(4)),
     lambda x, w, b: P("layer_norm")(x, w, b, ndim=1, eps=1e-5),
     lambda x, w, b: _np_normalized(x, 1, 1e-5) * w + b)
case("layer_norm", "public-2dims", inputs(normal(2, 3, 4)), lambda x: F.layer_norm(x, (3, 4)),
     lambda x: _np_normalized(x, 2, 1e-5))
case("layer_norm", "public-weight-eps", inputs(normal(2, 3, 4), normal(4)),
     lambda x, w: F.layer_norm(x, 4, w, eps=1e-2), lambda x, w: _np_normalized(x, 1, 1e-2) * w)
case("layer_norm_backward", "weight", inputs(normal(3, 4), normal(3, 4), normal(4)),
     lambda g, x, w: P("layer_norm_backward")(g, x, w, ndim=1, eps=1e-5),
     lambda g, x, w: _np_layer_norm_grad(g, x, w, 1))
case("layer_norm_backward", "2dims", inputs(normal(2, 3, 4), normal(2, 3, 4)),
     lambda g, x: P("layer_norm_backward")(g, x, None, ndim=2, eps=1e-5),
     lambda g, x: _np_layer_norm_grad(g, x, 1.0, 2))
case("layer_norm_weight_grad", "1dim", inputs(normal(3, 4), normal(3, 4)),
     lambda g, x: P("layer_norm_weight_grad")(g, x, ndim=1, eps=1e-5),
     lambda g, x: (g * _np_normalized(x, 1, 1e-5)).sum(axis=0))
case("layer_norm_weight_grad", "2dims", inputs(normal(2, 3, 4), normal(2, 3, 4)),
     lambda g, x: P("layer_norm_weight_grad")(g, x, ndim=2, eps=1e-5),
     lambda g, x: (g * _np_normalized(x, 2, 1e-5)).sum(axis=0))

case("layer_norm_grads", "weight", inputs(normal(3, 4), normal(3, 4), normal(4)),
     lambda g, x, w: P("layer_norm_grads")(g, x, w, ndim=1, eps=1e-5),
     lambda g, x, w: np.concatenate([_np_layer_norm_grad(g, x, w, 1),
                                     (g * _np_normalized(x, 1, 1e-5)).sum(axis=0)[None],
                                     g.sum(axis=0)[None]]))
case("layer_norm_grads", "2dims", inputs(normal(2, 3, 4), normal(2, 3, 4), normal(3, 4)),
     lambda g, x, w: P("layer_norm_grads")(g, x, w, ndim=2, eps=1e-5),
     lambda g, x, w: np.concatenate([_np_layer_norm_grad(g, x, w, 2).reshape(2, 12),
                                     (g * _np_normalized(x, 2, 1e-5)).sum(axis=0).reshape(1, 12),
                                     g.sum(axis=0).reshape(1, 12)]))
case("layer_norm_grads", "no-weight", inputs(normal(5, 3), normal(5, 3)),
     lambda g, x: P("layer_norm_grads")(g, x, None, ndim=1, eps=1e-2),
     lambda g, x: np.concatenate([_np_layer_norm_grad(g, x, 1.0, 1, 1e-2),
                                  (g * _np_normalized(x, 1, 1e-2)).sum(axis=0)[None],
                                  g.sum(axis=0)[None]]))
case("layer_norm", "public-affine-2dims", inputs(normal(2, 3, 4), normal(3, 4), normal(3, 4)),
     lambda x, w, b: F.layer_norm(x, (3, 4), w, b),
     lambda x, w, b: _np_normalized(x, 2, 1e-5) * w + b)

case("embedding", "2d-indices", inputs(normal(6, 3)),
     lambda w: P("embedding")(mg.tensor(_INDICES), w, padding_idx=None), lambda w: w[_INDICES])
case("embedding", "public", inputs(normal(6, 3)), lambda w: F.embedding(mg.tensor([5, 5, 0]), w),
     lambda w: w[[5, 5, 0]])

case("squared_error_sum", "3d", inputs(normal(2, 3, 4), normal(2, 3, 4)),
     lambda x, t: P("squared_error_sum")(x, t), lambda x, t: ((x - t) ** 2).sum())
case("squared_error_sum", "mse-mean", inputs(normal(3, 5), normal(3, 5)),
     lambda x, t: F.mse_loss(x, t), lambda x, t: ((x - t) ** 2).mean())
case("squared_error_grad", "3d", inputs(normal(), normal(2, 3, 4), normal(2, 3, 4)),
     lambda g, x, t: P("squared_error_grad")(g, x, t), lambda g, x, t: 2 * g * (x - t))

case("nll_loss", "ignore-smoothing", inputs(normal(5, 4)),
     lambda x: P("nll_loss")(x, mg.tensor(_TARGET), ignore_index=-100, label_smoothing=0.1),
     lambda x: _np_nll(x, _TARGET, 0.1))
case("nll_loss", "public", inputs(normal(5, 4)),
     lambda x: F.nll_loss(x, mg.tensor(_TARGET), reduction="sum"),
     lambda x: _np_nll(x, _TARGET, 0.0).sum())
case("nll_loss", "cross-entropy-smoothing", inputs(normal(5, 4)),
     lambda x: F.cross_entropy(x, mg.tensor(_TARGET), label_smoothing=0.1, reduction="none"),
     lambda x: _np_cross_entropy(x, _TARGET, 0.1))
case("nll_loss", "cross-entropy-mean", inputs(normal(5, 4)),
     lambda x: F.cross_entropy(x, mg.tensor(_TARGET)),
     lambda x: _np_cross_entropy(x, _TARGET, 0.0).sum() / 4)
case("nll_loss", "cross-entropy-4d-none", inputs(normal(2, 3, 2, 2)),
     lambda x: F.cross_entropy(x, mg.tensor(_TARGET_4D), reduction="none"),
     lambda x: _np_cross_entropy(np.moveaxis(x, 1, -1).reshape(-1, 3), _TARGET_4D.reshape(-1),
                                 0.0).reshape(2, 2, 2))
case("nll_loss_backward", "ignore-smoothing", inputs(normal(5)),
     lambda g: P("nll_loss_backward")(g, mg.tensor(_TARGET), classes=4, ignore_index=-100,
                                      label_smoothing=0.1),
     lambda g: _np_nll_grad(g, _TARGET, 4, 0.1))

# activations (NOTE [ Activation primitives ] in memgrad/ops/nn.py)


def _np_softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


case("silu", "normal", inputs(normal(3, 4)), lambda x: P("silu")(x),
     lambda x: x / (1 + np.exp(-x)))
case("silu", "public-wide", inputs(uniform(-30, 30, 2, 5)), lambda x: F.silu(x),
     lambda x: x / (1 + np.exp(-x)))
case("leaky_relu", "slope", inputs(away(0.1, 2, 3, 4)),
     lambda x: P("leaky_relu")(x, negative_slope=0.2), lambda x: np.where(x > 0, x, 0.2 * x))
case("leaky_relu", "public-default", inputs(away(0.1, 2, 2, 3)), lambda x: F.leaky_relu(x),
     lambda x: np.where(x > 0, x, 0.01 * x))
case("elu", "alpha", inputs(away(0.1, 3, 3, 4)), lambda x: P("elu")(x, alpha=1.5),
     lambda x: np.where(x > 0, x, 1.5 * (np.exp(x) - 1)))
case("elu", "public", inputs(away(0.1, 3, 5)), lambda x: F.elu(x),
     lambda x: np.where(x > 0, x, np.exp(x) - 1))
case("softplus", "beta", inputs(normal(3, 4)),
     lambda x: P("softplus")(x, beta=2.0, threshold=20.0), lambda x: _np_softplus(x, 2.0))
case("softplus", "public-threshold", inputs(away(0.2, 3, 2, 5, center=1.0)),
     lambda x: F.softplus(x, threshold=1.0), lambda x: _np_softplus(x, 1.0, 1.0))
case("softplus", "bce-with-logits", inputs(normal(3, 4), uniform(0, 1, 3, 4)),
     lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
     lambda x, y: -(y * np.log(1 / (1 + np.exp(-x))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-x)))))
case("mish", "normal", inputs(normal(3, 4)), lambda x: P("mish")(x),
     lambda x: x * np.tanh(np.log1p(np.exp(x))))
case("mish", "public", inputs(uniform(-5, 5, 6)), lambda x: F.mish(x),
     lambda x: x * np.tanh(np.log1p(np.exp(x))))

# conv and pooling (memgrad/ops/conv.py); NumPy references are direct sums over the window


def _np_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, co, oh, ow))
    og = co // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                           j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                         w[g * og:(g + 1) * og, :, i, j])
    return out if b is None else out + b[:, None, None]


def _np_conv2d_weight_grad(x, g, kernel, padding):
    """The weight gradient of a stride-1 convolution, groups 1: sum over samples and
    outputs of ``g`` times the input window."""
    (kh, kw), (ph, pw) = kernel, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = g.shape[2:]
    return np.stack([np.stack([np.einsum("nchw,nohw->oc", xp[:, :, i:i + oh, j:j + ow], g)
                               for j in range(kw)], axis=-1) for i in range(kh)], axis=-2)


def _np_max_pool2d(x, k, s, p=(0, 0), d=(1, 1)):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=-np.inf)
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.full((n, c, oh, ow), -np.inf)
    for i in range(k[0]):
        for j in range(k[1]):
            out = np.maximum(out, xp[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                                     j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]])
    return out


def _np_max_pool2d_indices(x, k, s, p=(0, 0), d=(1, 1)):
    """The flat argmax of each window (the first maximum; -1 where a window holds no input
    element), by brute force over the windows."""
    n, c, h, w = x.shape
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.full((n, c, oh, ow), -1, dtype=np.int64)
    for idx in np.ndindex(n, c, oh, ow):
        best = -np.inf
        for i in range(k[0]):
            for j in range(k[1]):
                y, z = idx[2] * s[0] - p[0] + i * d[0], idx[3] * s[1] - p[1] + j * d[1]
                if 0 <= y < h and 0 <= z < w and (out[idx] < 0 or x[idx[:2]][y, z] > best):
                    best, out[idx] = x[idx[:2]][y, z], y * w + z
    return out


_POOL_AT = np.array([[[[0, 5, 5], [11, 0, 7]], [[3, 3, 3], [4, 9, 10]]]])  # repeats on purpose


def _np_pool_scatter(g, shape=(1, 2, 3, 4)):
    out = np.zeros((shape[0] * shape[1], shape[2] * shape[3]))
    for plane in range(out.shape[0]):
        np.add.at(out[plane], _POOL_AT.reshape(out.shape[0], -1)[plane],
                  g.reshape(out.shape[0], -1)[plane])
    return out.reshape(shape)


case("conv2d", "bias-stride-pad-dilation", inputs(normal(2, 3, 5, 6), normal(4, 3, 3, 2),
                                                  normal(4)),
     lambda x, w, b: P("conv2d")(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                                 groups=1),
     lambda x, w, b: _np_conv2d(x, w, b, (2, 1), (1, 0), (1, 2)))
case("conv2d", "public-no-bias", inputs(normal(1, 2, 5, 5), normal(3, 2, 3, 3)),
     lambda x, w: mg.nn.functional.conv2d(x, w, padding=1),
     lambda x, w: _np_conv2d(x, w, None, (1, 1), (1, 1)))
# 22 channels x 3 kernel columns: the stacked row-shifted forward (NOTE [ Row-shifted
# convolution ] in memgrad/ops/conv.py)
case("conv2d", "stacked-rows", inputs(normal(1, 22, 3, 3), normal(2, 22, 3, 3), normal(2)),
     lambda x, w, b: mg.nn.functional.conv2d(x, w, b, padding=1),
     lambda x, w, b: _np_conv2d(x, w, b, (1, 1), (1, 1)))
case("conv2d", "public-groups", inputs(normal(2, 4, 4, 4), normal(6, 2, 2, 2), normal(6)),
     lambda x, w, b: mg.nn.functional.conv2d(x, w, b, stride=2, padding=1, groups=2),
     lambda x, w, b: _np_conv2d(x, w, b, (2, 2), (1, 1), (1, 1), 2))
case("conv2d", "public-unbatched", inputs(normal(2, 4, 4), normal(3, 2, 2, 2)),
     lambda x, w: mg.nn.functional.conv2d(x, w, dilation=2),
     lambda x, w: _np_conv2d(x[None], w, None, (1, 1), (0, 0), (2, 2))[0])
case("conv2d_input_grad", "stride-pad", inputs(normal(2, 4, 3, 3), normal(4, 3, 3, 3)),
     lambda g, w: P("conv2d_input_grad")(g, w, input_shape=(2, 3, 6, 6), stride=(2, 2),
                                         padding=(1, 1), dilation=(1, 1), groups=1))
case("conv2d_input_grad", "groups-dilation", inputs(normal(1, 4, 3, 5), normal(4, 1, 2, 2)),
     lambda g, w: P("conv2d_input_grad")(g, w, input_shape=(1, 2, 5, 5), stride=(1, 1),
                                         padding=(0, 1), dilation=(2, 2), groups=2))
case("conv2d_weight_grad", "stride-pad", inputs(normal(2, 3, 6, 6), normal(2, 4, 3, 3)),
     lambda x, g: P("conv2d_weight_grad")(x, g, weight_shape=(4, 3, 3, 3), stride=(2, 2),
                                          padding=(1, 1), dilation=(1, 1), groups=1))
case("conv2d_weight_grad", "with-bias", inputs(normal(2, 3, 5, 6), normal(2, 4, 5, 6)),
     lambda x, g: P("conv2d_weight_grad")(x, g, weight_shape=(4, 3, 3, 3), stride=(1, 1),
                                          padding=(1, 1), dilation=(1, 1), groups=1, bias=True),
     lambda x, g: np.concatenate([_np_conv2d_weight_grad(x, g, (3, 3), (1, 1)).reshape(-1),
                                  g.sum(axis=(0, 2, 3))]))
case("conv2d_weight_grad", "groups-dilation", inputs(normal(1, 2, 5, 5), normal(1, 4, 3, 5)),
     lambda x, g: P("conv2d_weight_grad")(x, g, weight_shape=(4, 1, 2, 2), stride=(1, 1),
                                          padding=(0, 1), dilation=(2, 2), groups=2))

case("max_pool2d", "public-2x2", inputs(distinct(2, 2, 4, 6)),
     lambda x: mg.nn.functional.max_pool2d(x, 2), lambda x: _np_max_pool2d(x, (2, 2), (2, 2)))
case("max_pool2d", "overlap-pad", inputs(distinct(1, 2, 5, 4)),
     lambda x: mg.nn.functional.max_pool2d(x, 3, stride=(2, 1), padding=1),
     lambda x: _np_max_pool2d(x, (3, 3), (2, 1), (1, 1)))
case("max_pool2d", "given-indices", inputs(normal(1, 2, 3, 4)),
     lambda x: P("max_pool2d")(x, mg.tensor(_POOL_AT)),
     lambda x: np.take_along_axis(x.reshape(1, 2, 12), _POOL_AT.reshape(1, 2, 6),
                                  axis=2).reshape(_POOL_AT.shape))
case("max_pool2d", "public-dilation-unbatched", inputs(distinct(2, 5, 5)),
     lambda x: mg.nn.functional.max_pool2d(x, 2, stride=1, dilation=2),
     lambda x: _np_max_pool2d(x[None], (2, 2), (1, 1), (0, 0), (2, 2))[0])
case("max_pool2d_backward", "repeats", inputs(normal(1, 2, 2, 3)),
     lambda g: P("max_pool2d_backward")(g, mg.tensor(_POOL_AT), input_shape=(1, 2, 3, 4)),
     _np_pool_scatter)

# ---------------------------------------------------------------------------- more math

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_unfold(x, k, d, p, s):
    """PyTorch's unfold by its definition: one column per window, rows (c, i, j)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.empty((n, c, k[0], k[1], oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            out[:, :, i, j] = xp[:, :, i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0],
                                 j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


def _np_fold(cols, size, k, d, p, s):
    """PyTorch's fold: each column's entries added back where unfold read them."""
    n, ck, _ = cols.shape
    c = ck // (k[0] * k[1])
    h, w = size
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    blocks = cols.reshape(n, c, k[0], k[1], oh, ow)
    xp = np.zeros((n, c, h + 2 * p[0], w + 2 * p[1]))
    for i in range(k[0]):
        for j in range(k[1]):
            xp[:, :, i * d[0]: i * d[0] + s[0] * (oh - 1) + 1: s[0],
               j * d[1]: j * d[1] + s[1] * (ow - 1) + 1: s[1]] += blocks[:, :, i, j]
    return xp[:, :, p[0]: p[0] + h, p[1]: p[1] + w]
case("sin", "2d", inputs(normal(3, 4)), lambda x: P("sin")(x), np.sin)
case("sin", "method", inputs(normal(5)), lambda x: x.sin(), np.sin)
case("cos", "2d", inputs(normal(3, 4)), lambda x: P("cos")(x), np.cos)
case("cos", "public", inputs(normal(5)), lambda x: mg.cos(x), np.cos)
case("rsqrt", "2d", inputs(uniform(0.3, 3, 3, 4)), lambda x: P("rsqrt")(x),
     lambda x: 1 / np.sqrt(x))
case("log1p", "2d", inputs(uniform(-0.7, 3, 3, 4)), lambda x: P("log1p")(x), np.log1p)
case("log1p", "tiny", inputs(uniform(-1e-3, 1e-3, 5)), lambda x: x.log1p(), np.log1p)
case("expm1", "2d", inputs(uniform(-2, 2, 3, 4)), lambda x: P("expm1")(x), np.expm1)
case("erf", "2d", inputs(uniform(-3, 3, 3, 4)), lambda x: P("erf")(x), _erf)
case("erf", "method-0d", inputs(normal()), lambda x: x.erf(), _erf)
for op, npf in (("floor", np.floor), ("ceil", np.ceil)):
    case(op, "2d", inputs(avoiding((-2.0, -1.0, 0.0, 1.0, 2.0), 3, 4, lo=-2.5, hi=2.5)),
         lambda x, op=op: P(op)(x), npf)
case("floor", "method", inputs(avoiding((-1.0, 0.0, 1.0), 5)), lambda x: x.floor(), np.floor)
case("round", "2d", inputs(avoiding((-1.5, -0.5, 0.5, 1.5), 3, 4)),
     lambda x: P("round")(x), np.round)
case("round", "public-decimals", inputs(avoiding((-0.05, 0.05, 0.15, -0.15), 6, lo=-0.2, hi=0.2,
                                                 gap=0.01)),
     lambda x: mg.round(x, decimals=1), lambda x: np.round(x * 10) / 10)

case("tan", "2d", inputs(uniform(-1.2, 1.2, 3, 4)), lambda x: P("tan")(x), np.tan)
case("tan", "method", inputs(uniform(-1, 1, 5)), lambda x: x.tan(), np.tan)
case("asin", "2d", inputs(uniform(-0.9, 0.9, 3, 4)), lambda x: P("asin")(x), np.arcsin)
case("acos", "public", inputs(uniform(-0.9, 0.9, 5)), lambda x: mg.acos(x), np.arccos)
case("atan", "2d", inputs(normal(3, 4)), lambda x: P("atan")(x), np.arctan)
case("atan2", "same", inputs(normal(3, 4), away(0.3, 2, 3, 4)),
     lambda x, y: P("atan2")(x, y), np.arctan2)
case("atan2", "public-bcast", inputs(away(0.3, 2, 2, 1, 3), away(0.3, 2, 4, 1)),
     lambda x, y: mg.atan2(x, y), np.arctan2)
case("atan2", "method-scalar", inputs(normal(5)), lambda x: x.atan2(-0.5),
     lambda x: np.arctan2(x, -0.5))
case("sinh", "2d", inputs(normal(3, 4)), lambda x: P("sinh")(x), np.sinh)
case("cosh", "method", inputs(normal(5)), lambda x: x.cosh(), np.cosh)
case("log2", "2d", inputs(uniform(0.2, 4, 3, 4)), lambda x: P("log2")(x), np.log2)
case("log10", "method", inputs(uniform(0.2, 4, 5)), lambda x: x.log10(), np.log10)
case("trunc", "2d", inputs(avoiding((-2.0, -1.0, 0.0, 1.0, 2.0), 3, 4, lo=-2.5, hi=2.5)),
     lambda x: P("trunc")(x), np.trunc)
case("fmod", "same", quotients((3, 4), (3, 4)), lambda x, y: P("fmod")(x, y), np.fmod)
case("fmod", "public-bcast", quotients((2, 1, 3), (4, 1)), lambda x, y: mg.fmod(x, y), np.fmod)
case("fmod", "method-scalar", lambda rng: (np.array([0.5, 1.9, -2.3, -0.2, 3.3]),),
     lambda x: x.fmod(0.7), lambda x: np.fmod(x, 0.7))

# composites under other PyTorch names, sampled under the primitive they run
case("cat", "concat", inputs(normal(2, 3), normal(2, 1)), lambda x, y: mg.concat([x, y], 1),
     lambda x, y: np.concatenate([x, y], 1))
case("cat", "hstack-1d", inputs(normal(2), normal(3)), lambda x, y: mg.hstack([x, y]),
     lambda x, y: np.hstack([x, y]))
case("cat", "hstack-2d", inputs(normal(2, 1), normal(2, 3)), lambda x, y: mg.hstack([x, y]),
     lambda x, y: np.hstack([x, y]))
case("cat", "vstack", inputs(normal(3), normal(2, 3)), lambda x, y: mg.vstack([x, y]),
     lambda x, y: np.vstack([x, y]))
case("permute", "movedim", inputs(normal(2, 3, 4)), lambda x: x.movedim((0, 1), (2, 0)),
     lambda x: np.moveaxis(x, (0, 1), (2, 0)))
case("expand", "broadcast_to", inputs(normal(3, 1)), lambda x: mg.broadcast_to(x, (2, 3, 4)),
     lambda x: np.broadcast_to(x, (2, 3, 4)))
case("reshape", "unflatten", inputs(normal(2, 12)), lambda x: x.unflatten(1, (3, -1)),
     lambda x: x.reshape(2, 3, 4))
case("expand", "tile", inputs(normal(2, 3)), lambda x: mg.tile(x, (2, 1, 2)),
     lambda x: np.tile(x, (2, 1, 2)))
case("matmul", "mm", inputs(normal(3, 4), normal(4, 2)), lambda x, y: mg.mm(x, y), np.matmul)
case("matmul", "dot", inputs(normal(5), normal(5)), lambda x, y: x.dot(y), np.dot)
case("div", "true_divide", inputs(normal(3, 4), away(0.5, 2, 4)),
     lambda x, y: mg.true_divide(x, y), np.true_divide)
case("mul", "lerp", inputs(normal(3, 4), normal(3, 4), uniform(0, 1, 4)),
     lambda x, y, w: mg.lerp(x, y, w), lambda x, y, w: x + w * (y - x))

case("index_scatter", "diag-above", inputs(normal(3)), lambda x: mg.diag(x, 1),
     lambda x: np.diag(x, 1))
case("index_scatter", "diag-below", inputs(normal(2)), lambda x: x.diag(-2),
     lambda x: np.diag(x, -2))
case("getitem", "diag-of-matrix", inputs(normal(3, 4)), lambda x: mg.diag(x, -1),
     lambda x: np.diag(x, -1))
case("getitem", "masked_select-bcast", inputs(normal(3, 1)),
     lambda x: x.masked_select(mg.tensor(_COND)),
     lambda x: np.broadcast_to(x, _COND.shape)[_COND])
case("expand", "meshgrid-xy", inputs(normal(2), normal(3)),
     lambda x, y: mg.meshgrid(x, y, indexing="xy")[0] * mg.meshgrid(x, y, indexing="xy")[1],
     lambda x, y: np.prod(np.meshgrid(x, y, indexing="xy"), axis=0))

case("unfold", "3x3-pad-stride", inputs(normal(2, 2, 5, 4)),
     lambda x: _F.unfold(x, 3, padding=1, stride=(2, 1)),
     lambda x: _np_unfold(x, (3, 3), (1, 1), (1, 1), (2, 1)))
case("unfold", "dilated-unbatched", inputs(normal(2, 5, 5)),
     lambda x: _F.unfold(x, 2, dilation=2),
     lambda x: _np_unfold(x[None], (2, 2), (2, 2), (0, 0), (1, 1))[0])
case("fold", "overlapping", inputs(normal(2, 8, 6)),
     lambda c: _F.fold(c, (3, 4), 2),
     lambda c: _np_fold(c, (3, 4), (2, 2), (1, 1), (0, 0), (1, 1)))
case("fold", "pad-stride", inputs(normal(1, 9, 4)),
     lambda c: _F.fold(c, (4, 4), 3, padding=1, stride=2),
     lambda c: _np_fold(c, (4, 4), (3, 3), (1, 1), (1, 1), (2, 2)))
case("max_pool2d", "max_pool1d", inputs(distinct(2, 3, 7)),
     lambda x: _F.max_pool1d(x, 3, stride=2, padding=1),
     lambda x: _np_max_pool2d(x[:, :, None], (1, 3), (1, 2), (0, 1), (1, 1))[:, :, 0])

case("contiguous", "transposed", inputs(normal(3, 4)), lambda x: x.T.contiguous(),
     lambda x: np.ascontiguousarray(x.T))
case("contiguous", "prim", inputs(normal(2, 3)), lambda x: P("contiguous")(x), lambda x: x)
for op, npf in (("tril", np.tril), ("triu", np.triu)):
    case(op, "2d", inputs(normal(3, 4)), lambda x, op=op: P(op)(x, diagonal=0), npf)
    case(op, "batched-diag", inputs(normal(2, 4, 3)),
         lambda x, op=op: getattr(mg, op)(x, 1), lambda x, npf=npf: npf(x, 1))
    case(op, "method-neg-diag", inputs(normal(4, 4)),
         lambda x, op=op: getattr(x, op)(diagonal=-1), lambda x, npf=npf: npf(x, -1))
case("roll", "dims", inputs(normal(3, 4)), lambda x: mg.roll(x, (1, -3), (0, 1)),
     lambda x: np.roll(x, (1, -3), axis=(0, 1)))
case("roll", "flat", inputs(normal(2, 3)), lambda x: x.roll(2), lambda x: np.roll(x, 2))
case("flip", "dims", inputs(normal(2, 3, 4)), lambda x: mg.flip(x, (0, 2)),
     lambda x: np.flip(x, (0, 2)))
case("flip", "method-neg", inputs(normal(3, 4)), lambda x: x.flip(-1), lambda x: x[:, ::-1])
case("expand", "repeat", inputs(normal(2, 3)), lambda x: x.repeat(2, 1, 3),
     lambda x: np.tile(x, (2, 1, 3)))
case("expand", "repeat-1d", inputs(normal(3)), lambda x: mg.repeat(x, (2,)),
     lambda x: np.tile(x, 2))

_PICK = np.array([2, 0, 2, 1])
case("getitem", "index-select", inputs(normal(3, 4)),
     lambda x: mg.index_select(x, 1, mg.tensor(_PICK[:3])), lambda x: x[:, _PICK[:3]])
case("getitem", "index-select-dim0", inputs(normal(3, 2)),
     lambda x: x.index_select(0, mg.tensor(_PICK)), lambda x: x[_PICK])
case("getitem", "repeat-interleave", inputs(normal(2, 3)),
     lambda x: mg.repeat_interleave(x, mg.tensor([1, 0, 2]), dim=1),
     lambda x: np.repeat(x, [1, 0, 2], axis=1))
case("getitem", "repeat-interleave-flat", inputs(normal(2, 2)),
     lambda x: x.repeat_interleave(2), lambda x: np.repeat(x, 2))

_SCATTER = np.array([[2, 0], [1, 3], [0, 2]])
_SCATTER_DUP = np.array([[1, 1, 0], [3, 3, 3]])


def _np_scatter(x: np.ndarray, dim: int, index: np.ndarray, src: Any) -> np.ndarray:
    out = x.copy()
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    out[tuple(grid)] = src[tuple(slice(0, k) for k in index.shape)] if np.ndim(src) else src
    return out


case("scatter", "dim1", inputs(normal(3, 4), normal(3, 2)),
     lambda x, s: P("scatter")(x, mg.tensor(_SCATTER), s, dim=1),
     lambda x, s: _np_scatter(x, 1, _SCATTER, s))
case("scatter", "public-larger-src", inputs(normal(4, 3), normal(3, 4)),
     lambda x, s: mg.scatter(x, 0, mg.tensor(_SCATTER.T.copy()), s),
     lambda x, s: _np_scatter(x, 0, _SCATTER.T, s))
case("scatter", "public-value", inputs(normal(3, 4)),
     lambda x: x.scatter(1, mg.tensor(_SCATTER), value=0.5),
     lambda x: _np_scatter(x, 1, _SCATTER, 0.5))
case("scatter", "public-repeats", inputs(normal(2, 4), normal(2, 3)),
     lambda x, s: mg.scatter(x, 1, mg.tensor(_SCATTER_DUP), s),
     lambda x, s: _np_scatter(x, 1, _SCATTER_DUP, s))
case("where", "masked-fill", inputs(normal(3, 4)),
     lambda x: x.masked_fill(mg.tensor(_COND), -1.5), lambda x: np.where(_COND, -1.5, x))
case("where", "masked-fill-bcast-tensor-value", inputs(normal(3, 4), normal()),
     lambda x, v: mg.masked_fill(x, mg.tensor(_COND_COL), v),
     lambda x, v: np.where(_COND_COL, v, x))
case("gather", "sort", inputs(distinct(3, 4)), lambda x: mg.sort(x, dim=1).values,
     lambda x: np.sort(x, axis=1))
case("gather", "sort-descending-dim0", inputs(distinct(3, 4)),
     lambda x: x.sort(0, descending=True)[0], lambda x: -np.sort(-x, axis=0))
case("gather", "topk", inputs(distinct(3, 5)), lambda x: mg.topk(x, 2).values,
     lambda x: -np.sort(-x, axis=1)[:, :2])
case("gather", "topk-smallest-dim0", inputs(distinct(4, 3)),
     lambda x: x.topk(3, dim=0, largest=False)[0], lambda x: np.sort(x, axis=0)[:3])

case("cumsum", "dim1", inputs(normal(3, 4)), lambda x: P("cumsum")(x, dim=1),
     lambda x: np.cumsum(x, 1))
case("cumsum", "public-neg-dim", inputs(normal(2, 3, 4)), lambda x: x.cumsum(-2),
     lambda x: np.cumsum(x, -2))
case("cumprod", "dim1", inputs(away(0.3, 2, 3, 4)), lambda x: P("cumprod")(x, dim=1),
     lambda x: np.cumprod(x, 1))
case("cumprod", "public-neg-dim", inputs(away(0.3, 2, 2, 3, 4)), lambda x: x.cumprod(-2),
     lambda x: np.cumprod(x, -2))
case("cumprod", "zeros", lambda rng: (np.array([[0.0, 2.0, -1.5, 0.7], [0.5, 0.0, 1.3, 0.0],
                                                [1.1, -0.8, 0.0, 2.0]]),),
     lambda x: mg.cumprod(x, 1), lambda x: np.cumprod(x, 1))
case("cumprod", "zeros-dim0", lambda rng: (np.array([[0.0, 2.0], [0.5, 0.0], [1.2, 0.0],
                                                     [-0.9, 1.4]]),),
     lambda x: mg.cumprod(x, 0), lambda x: np.cumprod(x, 0))
case("mul", "prod-dim", inputs(normal(3, 5)), lambda x: mg.prod(x, 1), lambda x: np.prod(x, 1))
case("mul", "prod-all-keepdim", inputs(normal(2, 3)), lambda x: x.prod(keepdim=True),
     lambda x: np.prod(x, keepdims=True))
case("mul", "prod-with-zero", lambda rng: (np.array([[0.0, 2.0, -1.5], [0.5, 0.0, 0.0]]),),
     lambda x: x.prod(1), lambda x: np.prod(x, 1))

_EINSUM = (
    ("matmul", "ij,jk->ik", ((2, 3), (3, 4))),
    ("batched", "bij,bjk->bik", ((2, 2, 3), (2, 3, 2))),
    ("outer-implicit", "i,j", ((3,), (2,))),
    ("summed-away", "ij,k->k", ((2, 3), (4,))),
    ("ellipsis", "...j,jk->...k", ((2, 2, 3), (3, 2))),
    ("three", "ij,jk,k->i", ((2, 3), (3, 4), (4,))),
    ("transpose", "ij->ji", ((2, 3),)),
    ("reduce", "ijk->j", ((2, 3, 2),)),
)
for label, eq, shapes in _EINSUM:
    case("einsum", label, inputs(*(normal(*sh) for sh in shapes)),
         lambda *xs, eq=eq: mg.einsum(eq, *xs), lambda *xs, eq=eq: np.einsum(eq, *xs))
case("einsum", "prim", inputs(normal(2, 3), normal(3, 4)),
     lambda x, y: P("einsum")(x, y, equation="ij,jk->ik"), lambda x, y: x @ y)
case("mul", "outer", inputs(normal(3), normal(4)), lambda x, y: mg.outer(x, y), np.outer)
case("matmul", "bmm", inputs(normal(2, 3, 4), normal(2, 4, 2)), lambda x, y: mg.bmm(x, y),
     np.matmul)
case("matmul", "addmm", inputs(normal(3), normal(2, 4), normal(4, 3)),
     lambda b, x, y: mg.addmm(b, x, y, beta=0.5, alpha=2.0),
     lambda b, x, y: 0.5 * b + 2.0 * (x @ y))
case("matmul", "addmm-beta0", inputs(normal(2, 4), normal(4, 3)),
     lambda x, y: mg.addmm(mg.tensor(np.full((2, 3), np.nan)), x, y, beta=0),
     lambda x, y: x @ y)
case("matmul", "baddbmm", inputs(normal(2, 3, 2), normal(2, 3, 4), normal(2, 4, 2)),
     lambda b, x, y: b.baddbmm(x, y, alpha=0.5), lambda b, x, y: b + 0.5 * (x @ y))

case("vector_norm", "2-all", inputs(normal(3, 4)), lambda x: mg.linalg.vector_norm(x),
     lambda x: np.sqrt((x * x).sum()))
case("vector_norm", "3-dim-keepdim", inputs(away(0.2, 2, 3, 4)),
     lambda x: P("vector_norm")(x, ord=3.0, dim=(1,), keepdim=True),
     lambda x: (np.abs(x) ** 3).sum(1, keepdims=True) ** (1 / 3))
case("vector_norm", "public-fro-dims", inputs(normal(2, 3, 4)), lambda x: x.norm(dim=(0, 2)),
     lambda x: np.sqrt((x * x).sum((0, 2))))
case("vector_norm", "public-p1.5", inputs(away(0.2, 2, 5)), lambda x: mg.norm(x, p=1.5),
     lambda x: (np.abs(x) ** 1.5).sum() ** (1 / 1.5))
case("abs", "norm-1", inputs(away(0.2, 2, 3, 4)), lambda x: mg.norm(x, p=1, dim=1),
     lambda x: np.abs(x).sum(1))
case("amax", "norm-inf", inputs(distinct(3, 4)), lambda x: mg.linalg.vector_norm(x, math.inf, 1),
     lambda x: np.abs(x).max(1))


_F = mg.nn.functional
case("pad", "prim-grow-and-crop", inputs(normal(3, 4)),
     lambda x: P("pad")(x, widths=((1, -1), (-2, 3)), value=0.5),
     lambda x: np.pad(x[:-1, 2:], ((1, 0), (0, 3)), constant_values=0.5))
case("pad", "public-last-two", inputs(normal(2, 3, 2)), lambda x: _F.pad(x, (1, 0, 2, 1)),
     lambda x: np.pad(x, ((0, 0), (2, 1), (1, 0))))
for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
    case("getitem", f"pad-{mode}", inputs(normal(2, 3, 4)),
         lambda x, mode=mode: _F.pad(x, (2, 1, 1, 2), mode=mode),
         lambda x, np_mode=np_mode: np.pad(x, ((0, 0), (1, 2), (2, 1)), mode=np_mode))
case("getitem", "interpolate-nearest", inputs(normal(1, 2, 3, 2)),
     lambda x: _F.interpolate(x, size=(5, 3)),
     lambda x: x[:, :, [0, 0, 1, 1, 2]][:, :, :, [0, 0, 1]])
case("getitem", "interpolate-nearest-1d-down", inputs(normal(2, 1, 5)),
     lambda x: _F.interpolate(x, scale_factor=0.5), lambda x: x[:, :, [0, 2]])
case("mul", "interpolate-bilinear", inputs(normal(1, 2, 2, 3)),
     lambda x: _F.interpolate(x, scale_factor=2, mode="bilinear"),
     lambda x: _np_bilinear(x, 4, 6, False))
case("mul", "interpolate-bilinear-align-corners", inputs(normal(2, 1, 3, 2)),
     lambda x: _F.interpolate(x, size=(4, 3), mode="bilinear", align_corners=True),
     lambda x: _np_bilinear(x, 4, 3, True))
case("mul", "interpolate-linear", inputs(normal(1, 2, 4)),
     lambda x: _F.interpolate(x, size=3, mode="linear"),
     lambda x: _np_bilinear(x[:, :, None], 1, 3, False)[:, :, 0])


def _np_bilinear(x: np.ndarray, oh: int, ow: int, align: bool) -> np.ndarray:
    """Bilinear resizing one output pixel at a time, as PyTorch's formulas state it."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))

    def src(i: int, size_in: int, size_out: int) -> float:
        if align:
            return i * (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
        return max((i + 0.5) * size_in / size_out - 0.5, 0.0)

    for i in range(oh):
        for j in range(ow):
            y, z = src(i, h, oh), src(j, w, ow)
            y0, z0 = min(int(y), h - 1), min(int(z), w - 1)
            y1, z1 = min(y0 + 1, h - 1), min(z0 + 1, w - 1)
            ly, lz = y - y0, z - z0
            out[:, :, i, j] = ((1 - ly) * (1 - lz) * x[:, :, y0, z0]
                               + (1 - ly) * lz * x[:, :, y0, z1]
                               + ly * (1 - lz) * x[:, :, y1, z0] + ly * lz * x[:, :, y1, z1])
    return out


# ---------------------------------------------------------------------------- non-differentiable

def _ties(rng: np.random.Generator) -> Arrays:
    x = rng.integers(-2, 3, (3, 4)).astype(np.float64)
    y = rng.integers(-2, 3, (3, 4)).astype(np.float64)
    return x, y


def _bools(rng: np.random.Generator) -> Arrays:
    return rng.random((3, 4)) < 0.5, rng.random((4,)) < 0.5


nondiff("max_pool2d_indices", "overlap-pad", inputs(distinct(2, 2, 5, 4)),
        lambda x: P("max_pool2d_indices")(x, kernel_size=(3, 3), stride=(2, 1),
                                          padding=(1, 1), dilation=(1, 1)),
        lambda x: _np_max_pool2d_indices(x, (3, 3), (2, 1), (1, 1)))
nondiff("max_pool2d_indices", "dilation-empty-window", inputs(distinct(1, 2, 2, 3)),
        lambda x: P("max_pool2d_indices")(x, kernel_size=(2, 2), stride=(1, 1),
                                          padding=(1, 1), dilation=(3, 2)),
        lambda x: _np_max_pool2d_indices(x, (2, 2), (1, 1), (1, 1), (3, 2)))
nondiff("sign", "2d", lambda rng: (np.array([[-2.0, 0.0, 3.0], [0.5, -0.0, -1e-9]]),),
        lambda x: P("sign")(x), np.sign)
nondiff("sign", "public", inputs(normal(5)), lambda x: mg.sign(x), np.sign)
for op, npf, opf in (
    ("eq", np.equal, lambda a, b: a == b),
    ("ne", np.not_equal, lambda a, b: a != b),
    ("lt", np.less, lambda a, b: a < b),
    ("le", np.less_equal, lambda a, b: a <= b),
    ("gt", np.greater, lambda a, b: a > b),
    ("ge", np.greater_equal, lambda a, b: a >= b),
):
    nondiff(op, "ties", _ties, lambda x, y, op=op: P(op)(x, y), npf)
    nondiff(op, "operator-bcast", lambda rng: (_ties(rng)[0], _ties(rng)[1][0]), opf, npf)
    nondiff(op, "scalar", lambda rng: (_ties(rng)[0],), lambda x, opf=opf: opf(x, 1.0),
            lambda x, npf=npf: npf(x, 1.0))
for op, npf, opf in (
    ("logical_and", np.logical_and, lambda a, b: a & b),
    ("logical_or", np.logical_or, lambda a, b: a | b),
    ("logical_xor", np.logical_xor, lambda a, b: a ^ b),
):
    nondiff(op, "prim", _bools, lambda x, y, op=op: P(op)(x, y), npf)
    nondiff(op, "operator", _bools, opf, npf)
nondiff("logical_not", "prim", lambda rng: _bools(rng)[:1], lambda x: P("logical_not")(x),
        np.logical_not)
nondiff("logical_not", "operator", lambda rng: _bools(rng)[:1], lambda x: ~x, np.logical_not)


nondiff("isfinite", "special", lambda rng: (np.array([1.0, np.inf, -np.inf, np.nan, 0.0]),),
        lambda x: P("isfinite")(x), np.isfinite)
nondiff("isfinite", "method", inputs(normal(2, 3)), lambda x: x.isfinite(), np.isfinite)
nondiff("isinf", "special", lambda rng: (np.array([1.0, np.inf, -np.inf, np.nan, 0.0]),),
        lambda x: x.isinf(), np.isinf)
nondiff("isnan", "special", lambda rng: (np.array([1.0, np.inf, np.nan, -0.0]),),
        lambda x: mg.isnan(x), np.isnan)


nondiff("one_hot", "2d", lambda rng: (np.array([[0, 3], [2, 2]]),),
        lambda t: _F.one_hot(t, 4), lambda t: np.eye(4, dtype=np.int64)[t])
nondiff("one_hot", "inferred", lambda rng: (np.array([1, 0, 2]),), lambda t: _F.one_hot(t),
        lambda t: np.eye(3, dtype=np.int64)[t])


def all_cases() -> list[Case]:
    return [c for cases in SAMPLES.values() for c in cases]


def nondiff_cases() -> list[Case]:
    return [c for cases in NONDIFF_SAMPLES.values() for c in cases]
