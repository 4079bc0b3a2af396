"""Hypothesis strategies for the property tests: random expression graphs over broadcastable
shapes, matmul operand shapes and indexing expressions.

An expression graph is a recipe (``Graph``): leaf shapes, a list of ``Step``s that each apply
one op of ``OPS`` to earlier values (leaves or intermediates, so values are reused), and a
seed for the leaf values. ``Graph.run(backend, leaves)`` evaluates it either with memgrad
(``backend="mg"``) or with plain NumPy (``backend="np"``), so the NumPy side is an
independent reference for both values and (by finite differences) gradients.

Every shape in a graph is broadcast-compatible with one base shape (each dimension is 1 or
the base size, right-aligned; reductions keep their dims or drop only leading ones), so any
two values can meet in a binary op. Ops with a domain (log, sqrt, pow, div) are wrapped to be
total on the reals; ops with kinks (abs, relu, clamp, maximum, minimum, where, amax, amin,
std) report, through ``safe``, whether their inputs are far enough from a kink for finite
differences to be meaningful; the test rejects the example otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import memgrad as mg

__all__ = ["OPS", "Op", "Step", "Graph", "graphs", "matmul_shapes", "index_cases", "MARGIN"]

MARGIN = 1e-3  # minimum distance from a kink (finite differences use eps = 1e-6)


def _np_sigmoid(a: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -a))


def _away(v: np.ndarray, *points: float) -> bool:
    return all(bool(np.all(np.abs(v - p) > MARGIN)) for p in points)


def _top_gap(a: np.ndarray, dims: tuple | None, largest: bool) -> bool:
    """Whether every reduced group has a unique extreme, MARGIN ahead of the runner-up."""
    axes = tuple(range(a.ndim)) if dims is None else dims
    if a.ndim == 0:
        return True
    rest = [i for i in range(a.ndim) if i not in axes]
    groups = np.transpose(a, rest + list(axes)).reshape(-1, int(np.prod([a.shape[i]
                                                                          for i in axes])))
    if groups.shape[1] < 2:
        return True
    s = np.sort(groups if largest else -groups, axis=1)
    return bool(np.all(s[:, -1] - s[:, -2] > MARGIN))


@dataclass(frozen=True)
class Op:
    """One op the graphs draw from.

    ``mg(args, params)`` and ``np(args, params)`` compute it with memgrad and with NumPy;
    ``params(draw, shapes, base)`` draws its parameters (or returns None when it does not
    apply to these shapes); ``shape(shapes, params, base)`` gives the output shape;
    ``safe(arrays, params)`` tells whether the inputs are away from its kinks.
    """

    name: str
    arity: int
    mg: Callable[[list, dict], Any]
    np: Callable[[list, dict], np.ndarray]
    params: Callable[..., dict | None] = lambda draw, shapes, base: {}
    shape: Callable[..., tuple] = lambda shapes, p, base: np.broadcast_shapes(*shapes)
    safe: Callable[[list, dict], bool] = lambda arrays, p: True


def _reduce_params(draw, shapes, base, *, need_two=False):
    (shape,) = shapes
    nd = len(shape)
    if nd == 0 or draw(st.booleans()):
        dims = None
    else:
        dims = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1, max_size=nd))))
    count = int(np.prod(shape if dims is None else [shape[i] for i in dims], dtype=np.int64))
    if need_two and count < 2:
        return None
    # keepdim=False only when the dropped dims are leading ones (keeps shapes compatible)
    leading = dims is None or dims == tuple(range(len(dims)))
    keepdim = draw(st.booleans()) if leading else True
    # PyTorch-style negative dims on the memgrad side
    signed = None if dims is None else tuple(d - nd if draw(st.booleans()) else d for d in dims)
    if signed is not None and len(signed) == 1 and draw(st.booleans()):
        signed = signed[0]  # an int rather than a 1-tuple
    return {"dims": dims, "signed": signed, "keepdim": keepdim, "count": count}


def _reduced_shape(shapes, p, base):
    (shape,) = shapes
    dims = range(len(shape)) if p["dims"] is None else p["dims"]
    if p["keepdim"]:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _dim_param(draw, shapes, base):
    (shape,) = shapes
    if not shape:
        return None
    return {"dim": draw(st.integers(-len(shape), len(shape) - 1))}


def _same(shapes, p, base):
    return shapes[0]


def _var_np(a, p, correction):
    return np.var(a, axis=p["dims"], keepdims=p["keepdim"], ddof=correction)


def _var_params(draw, shapes, base):
    p = _reduce_params(draw, shapes, base, need_two=True)
    if p is not None:
        p["correction"] = draw(st.sampled_from([0, 1]))
    return p


def _softmax_np(a, dim):
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _logsumexp_np(a, p):
    m = np.max(a, axis=p["dims"], keepdims=True)
    r = np.log(np.sum(np.exp(a - m), axis=p["dims"], keepdims=True)) + m
    return r if p["keepdim"] else r.reshape(_reduced_shape([a.shape], p, None))


def _gather_params(draw, shapes, base):
    (shape,) = shapes
    if not shape:
        return None
    dim = draw(st.integers(0, len(shape) - 1))
    n = shape[dim]
    index = draw(st.lists(st.integers(-n, n - 1), min_size=n, max_size=n))  # repeats allowed
    return {"dim": dim, "index": index}


def _gather_index(p, wrap):
    return (slice(None),) * p["dim"] + (wrap(np.array(p["index"], dtype=np.int64)),)


def _flip_params(draw, shapes, base):
    (shape,) = shapes
    if not shape:
        return None
    return {"dim": draw(st.integers(0, len(shape) - 1))}


def _flip_index(p):
    return (slice(None),) * p["dim"] + (slice(None, None, -1),)


def _permute_params(draw, shapes, base):
    (shape,) = shapes
    if len(shape) < 2:
        return None
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return {"perm": perm, "inverse": tuple(int(i) for i in np.argsort(perm)),
            "seed": draw(st.integers(0, 2**16))}


def _permute_weights(shape, p):
    return np.random.default_rng(p["seed"]).uniform(0.5, 1.5, tuple(shape[i] for i in p["perm"]))


def _permute_mg(a, p):
    w = _permute_weights(a.shape, p)
    return (a.permute(*p["perm"]) * mg.tensor(w)).permute(p["inverse"])


def _permute_np(a, p):
    w = _permute_weights(a.shape, p)
    return np.transpose(np.transpose(a, p["perm"]) * w, p["inverse"])


def _put_params(draw, shapes, base):
    shape = np.broadcast_shapes(*shapes)
    n = int(np.prod(shape, dtype=np.int64))
    bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return {"mask": np.array(bits, dtype=bool).reshape(shape)}


def _put_mg(a, b, p):
    shape = np.broadcast_shapes(a.shape, b.shape)
    out = a.expand(shape).clone()
    mask = mg.tensor(p["mask"])
    out[mask] = b.expand(shape)[mask]
    return out


def _expand_params(draw, shapes, base):
    (shape,) = shapes
    target = np.broadcast_shapes(shape, base)
    return None if target == shape else {"shape": target}


def _unsqueeze_params(draw, shapes, base):
    (shape,) = shapes
    return None if len(shape) >= 4 else {}


OPS: tuple[Op, ...] = (
    # ---- unary, shape preserving
    Op("neg", 1, lambda a, p: -a[0], lambda a, p: -a[0], shape=_same),
    Op("tanh", 1, lambda a, p: a[0].tanh(), lambda a, p: np.tanh(a[0]), shape=_same),
    Op("sigmoid", 1, lambda a, p: mg.sigmoid(a[0]), lambda a, p: _np_sigmoid(a[0]), shape=_same),
    Op("exp", 1, lambda a, p: mg.exp(a[0].tanh()), lambda a, p: np.exp(np.tanh(a[0])),
       shape=_same),
    Op("log", 1, lambda a, p: (a[0] * a[0] + 0.5).log(), lambda a, p: np.log(a[0] ** 2 + 0.5),
       shape=_same),
    Op("sqrt", 1, lambda a, p: mg.sqrt(a[0] * a[0] + 0.25),
       lambda a, p: np.sqrt(a[0] ** 2 + 0.25), shape=_same),
    Op("square", 1, lambda a, p: a[0] ** 2, lambda a, p: a[0] ** 2, shape=_same),
    Op("affine", 1, lambda a, p: 0.5 * a[0] - 1.0, lambda a, p: 0.5 * a[0] - 1.0, shape=_same),
    Op("abs", 1, lambda a, p: abs(a[0]), lambda a, p: np.abs(a[0]), shape=_same,
       safe=lambda a, p: _away(a[0], 0.0)),
    Op("relu", 1, lambda a, p: a[0].relu(), lambda a, p: np.maximum(a[0], 0), shape=_same,
       safe=lambda a, p: _away(a[0], 0.0)),
    Op("clamp", 1, lambda a, p: a[0].clamp(-0.5, 0.5), lambda a, p: np.clip(a[0], -0.5, 0.5),
       shape=_same, safe=lambda a, p: _away(a[0], -0.5, 0.5)),
    Op("softmax", 1, lambda a, p: a[0].softmax(p["dim"]),
       lambda a, p: _softmax_np(a[0], p["dim"]), params=_dim_param, shape=_same),
    Op("log_softmax", 1, lambda a, p: mg.log_softmax(a[0], p["dim"]),
       lambda a, p: np.log(_softmax_np(a[0], p["dim"])), params=_dim_param, shape=_same),
    # ---- movement and indexing
    Op("flip", 1, lambda a, p: a[0][_flip_index(p)], lambda a, p: a[0][_flip_index(p)],
       params=_flip_params, shape=_same),
    Op("gather", 1, lambda a, p: a[0][_gather_index(p, mg.tensor)],
       lambda a, p: a[0][_gather_index(p, lambda i: i)], params=_gather_params, shape=_same),
    Op("reshape", 1, lambda a, p: a[0].reshape(-1).view(a[0].shape),
       lambda a, p: a[0].copy(), shape=_same),
    Op("permute", 1, lambda a, p: _permute_mg(a[0], p), lambda a, p: _permute_np(a[0], p),
       params=_permute_params, shape=_same),
    Op("expand", 1, lambda a, p: a[0].expand(*p["shape"]),
       lambda a, p: np.broadcast_to(a[0], p["shape"]), params=_expand_params,
       shape=lambda s, p, base: p["shape"]),
    Op("unsqueeze", 1, lambda a, p: a[0].unsqueeze(0), lambda a, p: a[0][None],
       params=_unsqueeze_params, shape=lambda s, p, base: (1,) + s[0]),
    # ---- binary, broadcasting
    Op("add", 2, lambda a, p: a[0] + a[1], lambda a, p: a[0] + a[1]),
    Op("sub", 2, lambda a, p: mg.sub(a[0], a[1]), lambda a, p: a[0] - a[1]),
    Op("mul", 2, lambda a, p: a[0] * a[1], lambda a, p: a[0] * a[1]),
    Op("div", 2, lambda a, p: a[0] / (a[1] * a[1] + 0.5), lambda a, p: a[0] / (a[1] ** 2 + 0.5)),
    Op("pow", 2, lambda a, p: (a[0] * a[0] + 0.5) ** a[1].tanh(),
       lambda a, p: (a[0] ** 2 + 0.5) ** np.tanh(a[1])),
    Op("maximum", 2, lambda a, p: mg.maximum(a[0], a[1]), lambda a, p: np.maximum(a[0], a[1]),
       safe=lambda a, p: _away(a[0] - a[1], 0.0)),
    Op("minimum", 2, lambda a, p: a[0].minimum(a[1]), lambda a, p: np.minimum(a[0], a[1]),
       safe=lambda a, p: _away(a[0] - a[1], 0.0)),
    Op("where", 2, lambda a, p: mg.where(a[0] > 0, a[0], a[1]),
       lambda a, p: np.where(a[0] > 0, a[0], a[1]), safe=lambda a, p: _away(a[0], 0.0)),
    Op("put", 2, lambda a, p: _put_mg(a[0], a[1], p),
       lambda a, p: np.where(p["mask"], a[1], a[0]), params=_put_params),
    # ---- reductions over int, negative and tuple dims, with and without keepdim
    Op("sum", 1, lambda a, p: a[0].sum(p["signed"], keepdim=p["keepdim"]),
       lambda a, p: np.sum(a[0], axis=p["dims"], keepdims=p["keepdim"]),
       params=_reduce_params, shape=_reduced_shape),
    Op("mean", 1, lambda a, p: mg.mean(a[0], p["signed"], p["keepdim"]),
       lambda a, p: np.mean(a[0], axis=p["dims"], keepdims=p["keepdim"]),
       params=_reduce_params, shape=_reduced_shape),
    Op("amax", 1, lambda a, p: a[0].amax(p["signed"], p["keepdim"]),
       lambda a, p: np.max(a[0], axis=p["dims"], keepdims=p["keepdim"]),
       params=_reduce_params, shape=_reduced_shape,
       safe=lambda a, p: _top_gap(a[0], p["dims"], True)),
    Op("amin", 1, lambda a, p: mg.amin(a[0], p["signed"], p["keepdim"]),
       lambda a, p: np.min(a[0], axis=p["dims"], keepdims=p["keepdim"]),
       params=_reduce_params, shape=_reduced_shape,
       safe=lambda a, p: _top_gap(a[0], p["dims"], False)),
    Op("logsumexp", 1, lambda a, p: a[0].logsumexp(p["signed"], p["keepdim"]),
       lambda a, p: _logsumexp_np(a[0], p), params=_reduce_params, shape=_reduced_shape),
    Op("var", 1, lambda a, p: a[0].var(p["signed"], p["keepdim"], correction=p["correction"]),
       lambda a, p: _var_np(a[0], p, p["correction"]), params=_var_params,
       shape=_reduced_shape),
    Op("std", 1, lambda a, p: mg.std(a[0], p["signed"], p["keepdim"], correction=p["correction"]),
       lambda a, p: np.sqrt(_var_np(a[0], p, p["correction"])), params=_var_params,
       shape=_reduced_shape, safe=lambda a, p: bool(np.all(_var_np(a[0], p, 0) > 1e-2))),
)
OP_BY_NAME = {op.name: op for op in OPS}


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[int, ...]
    params: dict = field(default_factory=dict, compare=False)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.params.items() if k not in ("mask", "count")}
        return f"{self.op}{self.args}{shown or ''}"


@dataclass(frozen=True)
class Graph:
    """A random expression DAG; ``run`` returns the scalar loss and all values."""

    leaf_shapes: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    shapes: tuple[tuple[int, ...], ...]  # of every value: leaves, then one per step
    seed: int

    def leaves(self) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return [rng.uniform(-1.5, 1.5, s) for s in self.leaf_shapes]

    def sinks(self) -> list[int]:
        used = {a for s in self.steps for a in s.args}
        return [i for i in range(len(self.shapes)) if i not in used]

    def weights(self) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed + 1)
        return [rng.standard_normal(self.shapes[i]) for i in self.sinks()]

    def run(self, backend: str, leaves: list) -> tuple[Any, list]:
        values = list(leaves)
        for step in self.steps:
            op = OP_BY_NAME[step.op]
            fn = op.mg if backend == "mg" else op.np
            values.append(fn([values[a] for a in step.args], step.params))
        loss = None
        for i, w in zip(self.sinks(), self.weights()):
            term = (values[i] * (mg.tensor(w) if backend == "mg" else w)).sum()
            loss = term if loss is None else loss + term
        return loss, values

    def safe(self, values: list[np.ndarray]) -> bool:
        """Whether every kinked op sees inputs MARGIN away from its kinks."""
        for step in self.steps:
            op = OP_BY_NAME[step.op]
            if not op.safe([values[a] for a in step.args], step.params):
                return False
        return True

    def __repr__(self) -> str:
        steps = "; ".join(f"%{len(self.leaf_shapes) + k} = {s!r}" for k, s in
                          enumerate(self.steps))
        return f"Graph(leaves={self.leaf_shapes}, seed={self.seed}: {steps})"


def sub_shapes(base: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes that broadcast to ``base``: leading dims dropped, some sizes set to 1."""

    @st.composite
    def draw_shape(draw):
        lead = draw(st.integers(0, len(base)))
        return tuple(s if draw(st.booleans()) else 1 for s in base[lead:])

    return draw_shape()


@st.composite
def graphs(
    draw, min_ops: int = 2, max_ops: int = 8, max_leaves: int = 3, max_side: int = 4,
    max_ndim: int = 3,
) -> Graph:
    """A random DAG of ``min_ops..max_ops`` ops over 1..``max_leaves`` leaves whose shapes
    broadcast to a base shape of up to ``max_ndim`` dims of size up to ``max_side``."""
    base = tuple(draw(st.lists(st.integers(1, max_side), min_size=0, max_size=max_ndim)))
    leaf_shapes = tuple(draw(sub_shapes(base)) for _ in range(draw(st.integers(1, max_leaves))))
    shapes = list(leaf_shapes)
    steps = []
    n_ops = draw(st.integers(min_ops, max_ops))
    while len(steps) < n_ops:
        op = draw(st.sampled_from(OPS))
        n = len(shapes)
        # prefer recent values (deeper graphs) but allow any earlier one (reuse)
        pick = st.one_of(st.integers(max(0, n - 2), n - 1), st.integers(0, n - 1))
        args = tuple(draw(pick) for _ in range(op.arity))
        arg_shapes = [shapes[a] for a in args]
        params = op.params(draw, arg_shapes, base)
        if params is None:
            continue
        shapes.append(tuple(op.shape(arg_shapes, params, base)))
        steps.append(Step(op.name, args, params))
    seed = draw(st.integers(0, 2**31))
    return Graph(leaf_shapes, tuple(steps), tuple(shapes), seed)


@st.composite
def matmul_shapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Operand shapes for matmul: 1-D, 2-D and batched with broadcast batch dimensions."""
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))

    def batch_of(shape):
        lead = draw(st.integers(0, len(batch)))
        return tuple(s if draw(st.booleans()) else 1 for s in batch[lead:])

    x = (k,) if draw(st.integers(0, 3)) == 0 else batch_of(batch) + (m, k)
    y = (k,) if draw(st.integers(0, 3)) == 0 else batch_of(batch) + (k, n)
    return x, y


@st.composite
def index_cases(draw, unique: bool = False) -> tuple[tuple[int, ...], tuple]:
    """An array shape and a NumPy index into it mixing ints, slices, integer arrays (with
    repeats, unless ``unique``, and negatives), bool masks, None and Ellipsis."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    parts = []
    advanced = 0
    dim = 0
    while dim < len(shape):
        n = shape[dim]
        kind = draw(st.sampled_from(["slice", "int", "array", "mask", "none", "full"]))
        if kind == "slice":
            start = draw(st.integers(-n, n))
            step = draw(st.sampled_from([1, 2, -1]))
            parts.append(slice(start, None, step))
        elif kind == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        elif kind == "array" and advanced == 0:
            if unique:  # distinct positions (a negative index may name one)
                positions = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n,
                                          unique=True))
                rows = [p - n if draw(st.booleans()) else p for p in positions]
            else:
                rows = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5))
            parts.append(np.array(rows, dtype=np.int64))
            advanced += 1
        elif kind == "mask" and advanced == 0:
            parts.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))))
            advanced += 1
        elif kind == "none":
            parts.append(None)
            continue
        else:
            parts.append(slice(None))
        dim += 1
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(parts)))
        parts = parts[:cut] + [Ellipsis]
    return shape, tuple(parts)
