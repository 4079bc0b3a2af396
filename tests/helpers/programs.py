"""Random programs for the differential test (``tests/test_differential.py``).

A program is a small register machine. Its inputs are float64 leaves (``requires_grad``),
int64 index tensors and bool mask tensors; each instruction applies one op to earlier
registers and either appends its result as a new register or changes a register in place
(``add_``, ``mul_``, ``fill_``, ``t[index] = v``, ``copy_`` on an index tensor). The same
program runs three ways:

- ``run_np``: plain NumPy, the independent reference. NumPy's aliasing is PyTorch's (basic
  indexing, reshape-when-possible, transpose, expand... are views; advanced indexing copies),
  so in-place changes seen through views behave as in PyTorch. It also reports, for each op
  with a kink (relu, abs, maximum, amax, max(dim), std...), which side of the kink its
  inputs are on, so that finite differences can be rejected when they straddle one.
- ``run_mg``: memgrad in eager mode, or with some contiguous instruction ranges run as
  ``memgrad.checkpoint.checkpoint`` regions (``Region``), optionally with an in-place
  change (``Mutation``) between the forward pass and ``backward()``.
- ``Program.source()``: the program as memgrad code (printed in a failing example; never
  evaluated).

The generator (``programs``) evaluates each instruction with NumPy as it draws it, so it
knows every register's shape, which registers share memory, which are read-only (expanded),
and the current values of every index and mask tensor. It uses that to draw only valid
instructions: index tensors always stay in bounds for every use they had (also after an
in-place change), masks keep their number of True entries, advanced-index writes never
repeat a position, and no in-place change reads a value that shares memory with the tensor it
writes (PyTorch refuses most of those; tests/ops/test_overlapping_writes.py covers them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import memgrad as mg
import memgrad.nn.functional as F
from memgrad.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from memgrad.checkpoint import policy as ckpt_policy
from tests.helpers.op_samples import _np_conv2d, _np_max_pool2d

__all__ = [
    "BIG",
    "POLICIES",
    "Instr",
    "Region",
    "Mutation",
    "Program",
    "NpRun",
    "MgRun",
    "programs",
    "mutations",
    "run_np",
    "run_mg",
    "leaf_values",
]

BIG = 1e4  # examples whose values grow past this are rejected (cancellation)
TIE = 1e-7  # a kink this close but not exactly hit (0 < distance < TIE) is rejected
VAR_MIN = 1e-4  # std of a group whose variance is below this is rejected (sqrt's kink)
MAX_ELEMS = 64

POLICIES: dict[str, Callable | None] = {
    "none": None,
    "save_all": ckpt_policy.save_all,
    "save_none": ckpt_policy.save_none,
    "save_matmuls": ckpt_policy.save_matmuls,
    "save_only(exp)": ckpt_policy.save_only("exp"),
    "save_only(mul, getitem)": ckpt_policy.save_only("mul", "getitem"),
    "save_only(tanh, softmax, layer_norm)": ckpt_policy.save_only("tanh", "softmax",
                                                                  "layer_norm"),
    "save_only(reshape, permute, expand)": ckpt_policy.save_only("reshape", "permute",
                                                                 "expand"),
    "save_only(index_put, add)": ckpt_policy.save_only("index_put", "add"),
    "negate(save_matmuls)": ckpt_policy.negate(ckpt_policy.save_matmuls),
}


# ---------------------------------------------------------------------------- records


@dataclass
class Instr:
    """One instruction: ``op`` applied to registers ``args``; ``out`` is the register it
    defines, or None for an in-place change of ``args[0]``."""

    op: str
    args: tuple[int, ...]
    params: dict
    out: int | None


@dataclass
class Region:
    """Instructions ``start:stop`` run as one checkpointed function. ``args`` are passed as
    arguments, ``closure`` registers are read from the enclosing program when the function
    runs (in the forward and in every recomputation), ``outputs`` are returned."""

    start: int
    stop: int
    args: tuple[int, ...]
    closure: tuple[int, ...]
    outputs: tuple[int, ...]
    reentrant: bool
    policy: str
    # non-reentrant only: early stop, PyTorch's spelling of the policy (context_fn with
    # create_selective_checkpoint_contexts) instead of policy=, and a nested region run as
    # its own checkpoint inside this one
    early_stop: bool = True
    sac: bool = False
    inner: Region | None = None


@dataclass
class Mutation:
    """An in-place change of register ``target`` between forward and backward, under
    ``mg.no_grad()``: ``method`` is ``mul_``, ``add_``, ``fill_``, ``setitem`` or
    ``copy_``; ``value`` its argument; ``index`` the position for ``setitem``."""

    target: int
    method: str
    value: Any
    index: Any = None


@dataclass
class Program:
    """A drawn program (see the module docstring)."""

    seed: int
    kinds: list[str]  # per register: "f" float64, "i" int64, "b" bool
    names: list[str]
    inputs: list[tuple[int, Any]]  # (register, leaf shape | index/mask values)
    instrs: list[Instr]
    outputs: tuple[int, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    regions: list[Region] = field(default_factory=list)
    # facts about the final state, used to draw a mutation
    writeable: list[bool] = field(default_factory=list)
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    bounds: list[tuple[int, int]] = field(default_factory=list)  # int regs: allowed values
    final: list[Any] = field(default_factory=list)  # int/bool regs: values at the end

    @property
    def leaves(self) -> list[int]:
        return [r for r, _ in self.inputs if self.kinds[r] == "f"]

    @property
    def has_inplace(self) -> bool:
        return any(ins.out is None for ins in self.instrs)

    def weights(self) -> list[np.ndarray]:
        return [np.random.default_rng([self.seed, 7, k]).standard_normal(s)
                for k, s in enumerate(self.out_shapes)]

    def internal(self) -> set[int]:
        """Registers that live only inside a checkpointed region."""
        inside = set()
        for reg in self.regions:
            for ins in self.instrs[reg.start:reg.stop]:
                if ins.out is not None and ins.out not in reg.outputs:
                    inside.add(ins.out)
        return inside

    def inplace_after(self, k: int) -> bool:
        return any(ins.out is None for ins in self.instrs[k:])

    def source(self, mutation: Mutation | None = None) -> str:
        """The program as memgrad code (for reading; never evaluated)."""
        n = self.names
        lines = ["import numpy as np, memgrad as mg, memgrad.nn.functional as F",
                 "from memgrad.checkpoint import checkpoint, policy"]
        for r, spec in self.inputs:
            if self.kinds[r] == "f":
                lines.append(
                    f"{n[r]} = mg.tensor(np.random.default_rng([{self.seed}, {r}])"
                    f".standard_normal({tuple(spec)}), dtype=mg.float64, requires_grad=True)"
                )
            else:
                lines.append(f"{n[r]} = mg.tensor({np.asarray(spec).tolist()})")
        starts = {reg.start: reg for reg in self.regions}
        k = 0
        while k < len(self.instrs):
            reg = starts.get(k)
            if reg is None:
                lines.append(_code(self.instrs[k], n))
                k += 1
                continue
            lines += self._region_source(reg, "")
            k = reg.stop
        terms = [f"({n[r]} * mg.tensor(np.random.default_rng([{self.seed}, 7, {j}])"
                 f".standard_normal({self.out_shapes[j]}))).sum()"
                 for j, r in enumerate(self.outputs)]
        lines.append("loss = " + "\n    + ".join(terms))
        if mutation is not None:
            lines.append("with mg.no_grad():")
            lines.append("    " + _mutation_code(mutation, n))
        lines.append("loss.backward()")
        return "\n".join(lines)

    def _region_source(self, reg: Region, pad: str) -> list[str]:
        n = self.names
        a = ", ".join(n[r] for r in reg.args)
        lines = [f"{pad}def region{reg.start}({a}):  # reads by closure: "
                 f"{', '.join(n[r] for r in reg.closure) or '-'}"]
        k = reg.start
        while k < reg.stop:
            if reg.inner is not None and k == reg.inner.start:
                lines += self._region_source(reg.inner, pad + "    ")
                k = reg.inner.stop
            else:
                lines.append(pad + "    " + _code(self.instrs[k], n))
                k += 1
        outs = ", ".join(n[r] for r in reg.outputs)
        lines.append(f"{pad}    return ({outs},)")
        if reg.reentrant:
            opts = "use_reentrant=True"
        else:
            opts = "use_reentrant=False" + ("" if reg.early_stop else ", early_stop=False")
            if reg.policy != "none":
                opts += (f", context_fn=sac(policy.{reg.policy})" if reg.sac
                         else f", policy=policy.{reg.policy}")
        lines.append(f"{pad}({outs},) = checkpoint(region{reg.start}, {a}{', ' if a else ''}"
                     f"{opts})")
        return lines

    def __repr__(self) -> str:
        return "Program:\n" + self.source()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # Hypothesis prints this
        p.text(repr(self))


def leaf_values(prog: Program) -> list[np.ndarray]:
    """The values of the program's leaves, in ``prog.leaves`` order."""
    return [np.random.default_rng([prog.seed, r]).standard_normal(spec)
            for r, spec in prog.inputs if prog.kinds[r] == "f"]


# ---------------------------------------------------------------------------- ops
#
# Each op has a NumPy form ``np(args, p)``, a memgrad form ``mg(args, p)`` and a code
# template ``code(names, p)``; pure ops return the new value, in-place ops change args[0]
# and return None. ``kink(args, out, p)`` (optional) returns (side, distance, exact_ok):
# which side of its kinks the op is on (compared across the finite-difference points),
# how far from them, and whether sitting exactly on one is fine (a tie between copies of
# one value keeps its gradient).


@dataclass(frozen=True)
class OpSpec:
    np: Callable
    mg: Callable
    code: Callable
    kink: Callable | None = None


def _arr(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def _fmt_index_item(i: Any) -> str:
    if i is Ellipsis:
        return "..."
    if isinstance(i, slice):
        s = f"{'' if i.start is None else i.start}:{'' if i.stop is None else i.stop}"
        return s + ("" if i.step is None else f":{i.step}")
    return str(i)


def _fmt_index(index: tuple) -> str:
    return ", ".join(_fmt_index_item(i) for i in index)


def _np_basic(index: tuple) -> tuple:
    # as memgrad (and PyTorch): an integer index gives a 0-d view, not a copied scalar
    return index if any(i is Ellipsis for i in index) else index + (Ellipsis,)


def _extreme_kink(x: np.ndarray, dim: Any, largest: bool):
    axes = tuple(range(x.ndim)) if dim is None else (dim if isinstance(dim, tuple) else (dim,))
    axes = tuple(a % x.ndim for a in axes) if x.ndim else ()
    top = np.max(x, axis=axes, keepdims=True) if largest else np.min(x, axis=axes, keepdims=True)
    side = x == top
    if x.ndim == 0:
        return side, np.array([1.0]), True
    rest = [i for i in range(x.ndim) if i not in axes]
    groups = np.transpose(x, rest + list(axes)).reshape(
        -1, int(np.prod([x.shape[i] for i in axes])))
    if groups.shape[1] < 2:
        return side, np.array([1.0]), True
    s = np.sort(groups if largest else -groups, axis=1)
    return side, s[:, -1] - s[:, -2], True


def _np_logsumexp(a: np.ndarray, dim: Any, keepdim: bool) -> np.ndarray:
    m = np.max(a, axis=dim, keepdims=True)
    r = np.log(np.sum(np.exp(a - m), axis=dim, keepdims=True)) + m
    return r if keepdim else np.squeeze(r, axis=dim if dim is not None else None)


def _np_log_softmax(a: np.ndarray, dim: int) -> np.ndarray:
    m = np.max(a, axis=dim, keepdims=True)
    return a - m - np.log(np.sum(np.exp(a - m), axis=dim, keepdims=True))


def _np_layer_norm(a, w, b, k):
    # a C-contiguous result whatever the input's layout, as PyTorch's and memgrad's (a
    # reshape of it is then a view: an in-place change of that reaches it)
    a = np.ascontiguousarray(a)
    axes = tuple(range(a.ndim - k, a.ndim))
    mu = a.mean(axis=axes, keepdims=True)
    var = ((a - mu) ** 2).mean(axis=axes, keepdims=True)
    out = (a - mu) / np.sqrt(var + 1e-5)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out


def _np_batch_norm(a, w, b):
    axes = (0,) + tuple(range(2, a.ndim))
    shape = (-1,) + (1,) * (a.ndim - 2)
    mu = a.mean(axis=axes, keepdims=True)
    out = (a - mu) / np.sqrt(((a - mu) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    out = out if w is None else out * w.reshape(shape)
    return out if b is None else out + b.reshape(shape)


def _np_group_norm(a, w, b, groups):
    g = a.reshape(a.shape[0], groups, -1)
    mu = g.mean(axis=2, keepdims=True)
    out = ((g - mu) / np.sqrt(((g - mu) ** 2).mean(axis=2, keepdims=True) + 1e-5))
    out = out.reshape(a.shape)
    shape = (-1,) + (1,) * (a.ndim - 2)
    out = out if w is None else out * w.reshape(shape)
    return out if b is None else out + b.reshape(shape)


def _np_rms_norm(a, w, k):
    axes = tuple(range(a.ndim - k, a.ndim))
    out = a / np.sqrt((a * a).mean(axis=axes, keepdims=True) + np.finfo(np.float64).eps)
    return out if w is None else out * w


def _kink_batch_norm(a, out, p):
    axes = (0,) + tuple(range(2, a[0].ndim))
    # like std: a variance too small for finite differences is rejected
    return None, np.var(a[0], axis=axes) * (TIE / VAR_MIN), False


def _kink_group_norm(a, out, p):
    var = np.var(a[0].reshape(a[0].shape[0], p["groups"], -1), axis=2)
    return None, var * (TIE / VAR_MIN), False


def _kink_rms_norm(a, out, p):
    axes = tuple(range(a[0].ndim - len(p["shape"]), a[0].ndim))
    return None, (a[0] * a[0]).mean(axis=axes) * (TIE / VAR_MIN), False


def _np_cross_entropy(a, t, reduction):
    t = np.asarray(t)
    if a.ndim == 1:
        losses = -_np_log_softmax(a, 0)[t]
    elif a.ndim == 2:
        losses = -_np_log_softmax(a, 1)[np.arange(a.shape[0]), t]
    else:
        logp = _np_log_softmax(a, 1)
        n, d = np.meshgrid(np.arange(a.shape[0]), np.arange(a.shape[2]), indexing="ij")
        losses = -logp[n, t, d]
    if reduction == "none":
        return np.asarray(losses, dtype=np.float64)
    return np.asarray(losses.sum() if reduction == "sum" else losses.mean())


def _np_mse(a, b, reduction):
    d = np.asarray((a - b) ** 2)
    return d if reduction == "none" else np.asarray(d.sum() if reduction == "sum" else d.mean())


def _split_args(args, p):
    """(tensor args, optional weight, optional bias) for layer_norm."""
    it = iter(args[1:])
    w = next(it) if p["weight"] else None
    b = next(it) if p["bias"] else None
    return w, b


def _other(args, p):
    return args[1] if len(args) > 1 else p["c"]


def _ocode(n, p):
    return n[1] if len(n) > 1 else repr(p["c"])


def _binary(np_fn, mg_fn, sym):
    return OpSpec(
        np=lambda a, p: _arr(np_fn(a[0], _other(a, p))),
        mg=lambda a, p: mg_fn(a[0], _other(a, p)),
        code=lambda n, p: f"{n[0]} {sym} {_ocode(n, p)}",
    )


def _div_np(a, p):
    if len(a) > 1:
        return _arr(a[0] / (a[1] * a[1] + 0.5))
    return _arr(a[0] / p["c"])


def _div_mg(a, p):
    if len(a) > 1:
        return a[0] / (a[1] * a[1] + 0.5)
    return a[0] / p["c"]


def _div_code(n, p):
    return f"{n[0]} / ({n[1]} * {n[1]} + 0.5)" if len(n) > 1 else f"{n[0]} / {p['c']!r}"


def _linear_np(a, p):
    lo, hi = p.get("rows", (0, a[1].shape[0]))
    out = np.matmul(a[0], a[1][lo:hi].T)
    return _arr(out + a[2][lo:hi] if len(a) > 2 else out)


def _linear_mg(a, p):
    bias = a[2] if len(a) > 2 else None
    if "rows" in p:
        lo, hi = p["rows"]
        return mg.ops.nn.linear_rows(a[0], a[1], bias, lo=lo, hi=hi)
    return F.linear(a[0], a[1], bias)


def _linear_code(n, p):
    bias = n[2] if len(n) > 2 else "None"
    if "rows" in p:
        lo, hi = p["rows"]
        return f"mg.ops.nn.linear_rows({n[0]}, {n[1]}, {bias}, lo={lo}, hi={hi})"
    return f"F.linear({n[0]}, {n[1]}, {bias})"


def _conv2d_np(a, p):
    pad = (p["padding"],) * 2
    return _np_conv2d(a[0], a[1], a[2] if len(a) > 2 else None, padding=pad)


def _conv2d_mg(a, p):
    return F.conv2d(a[0], a[1], a[2] if len(a) > 2 else None, padding=p["padding"])


def _conv2d_code(n, p):
    return f"F.conv2d({n[0]}, {n[1]}, {n[2] if len(n) > 2 else 'None'}, padding={p['padding']})"


def _pool_windows(x: np.ndarray, p: dict) -> np.ndarray:
    """The (N, C, OH, OW, KH*KW) windows of max pooling ``x``, the padding as -inf."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p["kernel"], p["stride"], p["padding"], p["dilation"]
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1),
                                                   axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    return win.reshape(*win.shape[:4], kh * kw)


def _kink_max_pool2d(a, out, p):
    # the gradient goes to each window's first maximum: which one it is, and how far the
    # runner-up is (an exact tie between two elements is a kink: a finite difference splits)
    win = _pool_windows(a[0], p)
    if win.shape[-1] < 2:
        return np.zeros(out.shape, np.int64), np.array([1.0]), True
    top = np.sort(win, axis=-1)
    return np.argmax(win, axis=-1), top[..., -1] - top[..., -2], False


def _max_pool2d_np(a, p):
    return _np_max_pool2d(a[0], p["kernel"], p["stride"], p["padding"], p["dilation"])


def _max_pool2d_mg(a, p):
    return F.max_pool2d(a[0], p["kernel"], p["stride"], p["padding"], p["dilation"])


def _max_pool2d_code(n, p):
    return (f"F.max_pool2d({n[0]}, {p['kernel']}, {p['stride']}, {p['padding']}, "
            f"{p['dilation']})")


def _setitem_index_np(args, p):
    if p["kind"] == "basic":
        return _np_basic(p["index"]), args[1:]
    if p["kind"] == "idx":
        lead = (slice(None),) * p["dim"]
        return lead + (args[1],), args[2:]
    return (args[1],), args[2:]  # mask


def _setitem_np(a, p):
    index, rest = _setitem_index_np(a, p)
    a[0][index] = rest[0] if rest else p["c"]


def _setitem_mg(a, p):
    if p["kind"] == "basic":
        index, rest = p["index"], a[1:]
    elif p["kind"] == "idx":
        index, rest = (slice(None),) * p["dim"] + (a[1],), a[2:]
    else:
        index, rest = a[1], a[2:]
    a[0][index] = rest[0] if rest else p["c"]


def _setitem_code(n, p):
    if p["kind"] == "basic":
        index, rest = _fmt_index(p["index"]), n[1:]
    elif p["kind"] == "idx":
        index, rest = ":, " * p["dim"] + n[1], n[2:]
    else:
        index, rest = n[1], n[2:]
    return f"{n[0]}[{index}] = {rest[0] if rest else repr(p['c'])}"


def _red(method, np_fn):
    def mg_fn(a, p):
        return getattr(a[0], method)(dim=p["dim"], keepdim=p["keepdim"])

    def np_f(a, p):
        return _arr(np_fn(a[0], axis=p["dim"], keepdims=p["keepdim"]))

    return mg_fn, np_f


def _kink_relu(a, out, p):
    return a[0] > 0, np.abs(a[0]), True


def _kink_max2(a, out, p):
    x, y = a[0], _other(a, p)
    return np.asarray(x > y), np.abs(np.asarray(x - y)), True


def _kink_extreme(largest):
    def kink(a, out, p):
        return _extreme_kink(a[0], p["dim"], largest)
    return kink


def _kink_std(a, out, p):
    var = np.var(a[0], axis=p["dim"], ddof=1)
    # distances are compared with TIE: scale so that a variance below VAR_MIN is rejected
    return None, np.asarray(var) * (TIE / VAR_MIN), False


def _np_inplace(fn: Callable, a: list, p: dict) -> None:
    fn(a[0], _other(a, p), out=a[0])


def _mg_inplace(method: str, a: list, p: dict) -> None:
    getattr(a[0], method)(_other(a, p))


def _mg_fill(t: mg.Tensor, c: Any) -> None:
    t.fill_(c)


def _mg_copy(t: mg.Tensor, values: Any) -> None:
    t.copy_(mg.tensor(np.asarray(values, dtype=t.dtype)))


_np_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_attention(x: np.ndarray, causal: bool) -> np.ndarray:
    """softmax(x x^T / sqrt(E) + mask) x, by the definition."""
    scores = x @ np.swapaxes(x, -1, -2) / np.sqrt(x.shape[-1])
    if causal:
        length = x.shape[-2]
        scores = np.where(np.triu(np.ones((length, length), bool), 1), -np.inf, scores)
    return np.exp(_np_log_softmax(scores, -1)) @ x


def _np_self_attention(x: np.ndarray, heads: int, causal: bool) -> np.ndarray:
    """Multi-head self-attention of ``x`` (N, T, E) as queries, keys and values alike, each
    head by the definition, the heads merged back."""
    n, t, e = x.shape
    h = x.reshape(n, t, heads, e // heads).transpose(0, 2, 1, 3)
    return _np_attention(h, causal).transpose(0, 2, 1, 3).reshape(n, t, e)


def _np_index_select(a: list, p: dict) -> np.ndarray:
    return np.take(a[0], np.asarray(p["index"], dtype=np.int64), axis=p["dim"])


OPS: dict[str, OpSpec] = {
    "sin": OpSpec(lambda a, p: _arr(np.sin(a[0])), lambda a, p: a[0].sin(),
                  lambda n, p: f"{n[0]}.sin()"),
    "cos": OpSpec(lambda a, p: _arr(np.cos(a[0])), lambda a, p: mg.cos(a[0]),
                  lambda n, p: f"mg.cos({n[0]})"),
    "erf": OpSpec(lambda a, p: _arr(_np_erf(a[0])), lambda a, p: a[0].erf(),
                  lambda n, p: f"{n[0]}.erf()"),
    "log1p_safe": OpSpec(lambda a, p: _arr(np.log1p(a[0] * a[0])),
                         lambda a, p: (a[0] * a[0]).log1p(),
                         lambda n, p: f"({n[0]} * {n[0]}).log1p()"),
    "rsqrt_safe": OpSpec(lambda a, p: _arr(1 / np.sqrt(a[0] * a[0] + 0.5)),
                         lambda a, p: (a[0] * a[0] + 0.5).rsqrt(),
                         lambda n, p: f"({n[0]} * {n[0]} + 0.5).rsqrt()"),
    "atan": OpSpec(lambda a, p: _arr(np.arctan(a[0])), lambda a, p: a[0].atan(),
                   lambda n, p: f"{n[0]}.atan()"),
    "sinh": OpSpec(lambda a, p: _arr(np.sinh(a[0])), lambda a, p: mg.sinh(a[0]),
                   lambda n, p: f"mg.sinh({n[0]})"),
    "log2_safe": OpSpec(lambda a, p: _arr(np.log2(a[0] * a[0] + 0.5)),
                        lambda a, p: (a[0] * a[0] + 0.5).log2(),
                        lambda n, p: f"({n[0]} * {n[0]} + 0.5).log2()"),
    "flip": OpSpec(lambda a, p: np.flip(a[0], p["dims"]).copy(),
                   lambda a, p: a[0].flip(p["dims"]),
                   lambda n, p: f"{n[0]}.flip({p['dims']})"),
    "roll": OpSpec(lambda a, p: np.roll(a[0], p["shift"], axis=p["dim"]),
                   lambda a, p: mg.roll(a[0], p["shift"], p["dim"]),
                   lambda n, p: f"mg.roll({n[0]}, {p['shift']}, {p['dim']})"),
    "cumsum": OpSpec(lambda a, p: np.cumsum(a[0], axis=p["dim"]),
                     lambda a, p: a[0].cumsum(p["dim"]),
                     lambda n, p: f"{n[0]}.cumsum({p['dim']})"),
    "cumprod": OpSpec(lambda a, p: np.cumprod(a[0], axis=p["dim"]),
                      lambda a, p: a[0].cumprod(p["dim"]),
                      lambda n, p: f"{n[0]}.cumprod({p['dim']})"),
    "tril": OpSpec(lambda a, p: np.tril(a[0], p["diagonal"]),
                   lambda a, p: a[0].tril(p["diagonal"]),
                   lambda n, p: f"{n[0]}.tril({p['diagonal']})"),
    "index_select": OpSpec(_np_index_select,
                           lambda a, p: a[0].index_select(p["dim"], mg.tensor(p["index"])),
                           lambda n, p: f"{n[0]}.index_select({p['dim']}, "
                                        f"mg.tensor({p['index']}))"),
    "add": _binary(np.add, lambda x, y: x + y, "+"),
    "sub": _binary(np.subtract, lambda x, y: x - y, "-"),
    "mul": _binary(np.multiply, lambda x, y: x * y, "*"),
    "div": OpSpec(_div_np, _div_mg, _div_code),
    "maximum": OpSpec(lambda a, p: _arr(np.maximum(a[0], a[1])),
                      lambda a, p: mg.maximum(a[0], a[1]),
                      lambda n, p: f"mg.maximum({n[0]}, {n[1]})", _kink_max2),
    "minimum": OpSpec(lambda a, p: _arr(np.minimum(a[0], a[1])),
                      lambda a, p: mg.minimum(a[0], a[1]),
                      lambda n, p: f"mg.minimum({n[0]}, {n[1]})", _kink_max2),
    "exp": OpSpec(lambda a, p: _arr(np.exp(a[0])), lambda a, p: a[0].exp(),
                  lambda n, p: f"{n[0]}.exp()"),
    "tanh": OpSpec(lambda a, p: _arr(np.tanh(a[0])), lambda a, p: a[0].tanh(),
                   lambda n, p: f"{n[0]}.tanh()"),
    "sigmoid": OpSpec(lambda a, p: _arr(np.exp(-np.logaddexp(0.0, -a[0]))),
                      lambda a, p: a[0].sigmoid(), lambda n, p: f"{n[0]}.sigmoid()"),
    "relu": OpSpec(lambda a, p: _arr(np.maximum(a[0], 0.0)), lambda a, p: a[0].relu(),
                   lambda n, p: f"{n[0]}.relu()", _kink_relu),
    "abs": OpSpec(lambda a, p: _arr(np.abs(a[0])), lambda a, p: a[0].abs(),
                  lambda n, p: f"{n[0]}.abs()", _kink_relu),
    "neg": OpSpec(lambda a, p: _arr(-a[0]), lambda a, p: -a[0], lambda n, p: f"-{n[0]}"),
    "square": OpSpec(lambda a, p: _arr(a[0] ** 2), lambda a, p: a[0] ** 2,
                     lambda n, p: f"{n[0]} ** 2"),
    "log_safe": OpSpec(lambda a, p: _arr(np.log(a[0] * a[0] + 0.5)),
                       lambda a, p: (a[0] * a[0] + 0.5).log(),
                       lambda n, p: f"({n[0]} * {n[0]} + 0.5).log()"),
    "sqrt_safe": OpSpec(lambda a, p: _arr(np.sqrt(a[0] * a[0] + 0.5)),
                        lambda a, p: (a[0] * a[0] + 0.5).sqrt(),
                        lambda n, p: f"({n[0]} * {n[0]} + 0.5).sqrt()"),
    "reshape": OpSpec(lambda a, p: np.reshape(a[0], p["shape"]),
                      lambda a, p: getattr(a[0], p["how"])(*p["shape"]),
                      lambda n, p: f"{n[0]}.{p['how']}{tuple(p['shape'])}"),
    "transpose": OpSpec(lambda a, p: np.swapaxes(a[0], p["d0"], p["d1"]),
                        lambda a, p: a[0].transpose(p["d0"], p["d1"]),
                        lambda n, p: f"{n[0]}.transpose({p['d0']}, {p['d1']})"),
    "narrow": OpSpec(lambda a, p: a[0][(slice(None),) * (p["dim"] % a[0].ndim)
                                       + (slice(p["start"], p["start"] + p["length"]),)],
                     lambda a, p: a[0].narrow(p["dim"], p["start"], p["length"]),
                     lambda n, p: f"{n[0]}.narrow({p['dim']}, {p['start']}, {p['length']})"),
    # the trailing Ellipsis keeps a 0-d result a view, as PyTorch's unbind gives
    "unbind": OpSpec(lambda a, p: a[0][(slice(None),) * (p["dim"] % a[0].ndim)
                                       + (p["i"], Ellipsis)],
                     lambda a, p: a[0].unbind(p["dim"])[p["i"]],
                     lambda n, p: f"{n[0]}.unbind({p['dim']})[{p['i']}]"),
    "permute": OpSpec(lambda a, p: np.transpose(a[0], p["dims"]),
                      lambda a, p: a[0].permute(*p["dims"]),
                      lambda n, p: f"{n[0]}.permute{tuple(p['dims'])}"),
    "unsqueeze": OpSpec(lambda a, p: np.expand_dims(a[0], p["dim"]),
                        lambda a, p: a[0].unsqueeze(p["dim"]),
                        lambda n, p: f"{n[0]}.unsqueeze({p['dim']})"),
    "squeeze": OpSpec(
        lambda a, p: np.squeeze(a[0]) if p["dim"] is None else np.squeeze(a[0], p["dim"]),
        lambda a, p: a[0].squeeze() if p["dim"] is None else a[0].squeeze(p["dim"]),
        lambda n, p: f"{n[0]}.squeeze({'' if p['dim'] is None else p['dim']})"),
    "expand": OpSpec(lambda a, p: np.broadcast_to(a[0], p["shape"]),
                     lambda a, p: a[0].expand(*p["sizes"]),
                     lambda n, p: f"{n[0]}.expand{tuple(p['sizes'])}"),
    "getitem": OpSpec(lambda a, p: a[0][_np_basic(p["index"])],
                      lambda a, p: a[0][p["index"]],
                      lambda n, p: f"{n[0]}[{_fmt_index(p['index'])}]"),
    "index": OpSpec(lambda a, p: a[0][(slice(None),) * p["dim"] + (a[1],)],
                    lambda a, p: a[0][(slice(None),) * p["dim"] + (a[1],)],
                    lambda n, p: f"{n[0]}[{':, ' * p['dim']}{n[1]}]"),
    "mask": OpSpec(lambda a, p: a[0][a[1]], lambda a, p: a[0][a[1]],
                   lambda n, p: f"{n[0]}[{n[1]}]"),
    "sum": OpSpec(*reversed(_red("sum", np.sum)),
                  code=lambda n, p: f"{n[0]}.sum(dim={p['dim']}, keepdim={p['keepdim']})"),
    "mean": OpSpec(*reversed(_red("mean", np.mean)),
                   code=lambda n, p: f"{n[0]}.mean(dim={p['dim']}, keepdim={p['keepdim']})"),
    "amax": OpSpec(*reversed(_red("amax", np.max)),
                   code=lambda n, p: f"{n[0]}.amax(dim={p['dim']}, keepdim={p['keepdim']})",
                   kink=_kink_extreme(True)),
    "amin": OpSpec(*reversed(_red("amin", np.min)),
                   code=lambda n, p: f"{n[0]}.amin(dim={p['dim']}, keepdim={p['keepdim']})",
                   kink=_kink_extreme(False)),
    "max_dim": OpSpec(
        lambda a, p: _arr(np.max(a[0], axis=p["dim"], keepdims=p["keepdim"])),
        lambda a, p: a[0].max(dim=p["dim"], keepdim=p["keepdim"]).values,
        lambda n, p: f"{n[0]}.max(dim={p['dim']}, keepdim={p['keepdim']}).values",
        _kink_extreme(True)),
    "min_dim": OpSpec(
        lambda a, p: _arr(np.min(a[0], axis=p["dim"], keepdims=p["keepdim"])),
        lambda a, p: a[0].min(dim=p["dim"], keepdim=p["keepdim"]).values,
        lambda n, p: f"{n[0]}.min(dim={p['dim']}, keepdim={p['keepdim']}).values",
        _kink_extreme(False)),
    "var": OpSpec(
        lambda a, p: _arr(np.var(a[0], axis=p["dim"], keepdims=p["keepdim"], ddof=1)),
        lambda a, p: a[0].var(dim=p["dim"], keepdim=p["keepdim"]),
        lambda n, p: f"{n[0]}.var(dim={p['dim']}, keepdim={p['keepdim']})"),
    "std": OpSpec(
        lambda a, p: _arr(np.std(a[0], axis=p["dim"], keepdims=p["keepdim"], ddof=1)),
        lambda a, p: a[0].std(dim=p["dim"], keepdim=p["keepdim"]),
        lambda n, p: f"{n[0]}.std(dim={p['dim']}, keepdim={p['keepdim']})", _kink_std),
    "logsumexp": OpSpec(
        lambda a, p: _arr(_np_logsumexp(a[0], p["dim"], p["keepdim"])),
        lambda a, p: a[0].logsumexp(dim=p["dim"], keepdim=p["keepdim"]),
        lambda n, p: f"{n[0]}.logsumexp(dim={p['dim']}, keepdim={p['keepdim']})"),
    "matmul": OpSpec(lambda a, p: _arr(np.matmul(a[0], a[1])), lambda a, p: a[0] @ a[1],
                     lambda n, p: f"{n[0]} @ {n[1]}"),
    "linear": OpSpec(_linear_np, _linear_mg, _linear_code),
    "conv2d": OpSpec(_conv2d_np, _conv2d_mg, _conv2d_code),
    "max_pool2d": OpSpec(_max_pool2d_np, _max_pool2d_mg, _max_pool2d_code, _kink_max_pool2d),
    # softmax and log_softmax return C-contiguous results whatever their input's layout,
    # as PyTorch's do (a reshape of one is then a view: an in-place change of it reaches it)
    "softmax": OpSpec(lambda a, p: np.ascontiguousarray(np.exp(_np_log_softmax(a[0], p["dim"]))),
                      lambda a, p: F.softmax(a[0], dim=p["dim"]),
                      lambda n, p: f"F.softmax({n[0]}, dim={p['dim']})"),
    "self_attention": OpSpec(
        lambda a, p: _np_self_attention(a[0], p["heads"], p["causal"]),
        lambda a, p: mg.ops.nn.self_attention(mg.cat([a[0]] * 3, -1), heads=p["heads"],
                                              causal=p["causal"],
                                              scale=1 / np.sqrt(a[0].shape[-1] // p["heads"])),
        lambda n, p: f"mg.ops.nn.self_attention(mg.cat([{n[0]}] * 3, -1), heads={p['heads']}, "
                     f"causal={p['causal']}, scale=1 / np.sqrt({n[0]}.shape[-1] // "
                     f"{p['heads']}))"),
    "attention": OpSpec(lambda a, p: _np_attention(a[0], p["causal"]),
                        lambda a, p: F.scaled_dot_product_attention(a[0], a[0], a[0],
                                                                    is_causal=p["causal"]),
                        lambda n, p: f"F.scaled_dot_product_attention({n[0]}, {n[0]}, "
                                     f"{n[0]}, is_causal={p['causal']})"),
    "log_softmax": OpSpec(lambda a, p: np.ascontiguousarray(_np_log_softmax(a[0], p["dim"])),
                          lambda a, p: F.log_softmax(a[0], dim=p["dim"]),
                          lambda n, p: f"F.log_softmax({n[0]}, dim={p['dim']})"),
    "layer_norm": OpSpec(
        lambda a, p: _np_layer_norm(a[0], *_split_args(a, p), len(p["shape"])),
        lambda a, p: F.layer_norm(a[0], p["shape"], *_split_args(a, p)),
        lambda n, p: f"F.layer_norm({n[0]}, {tuple(p['shape'])}, "
                     f"{', '.join(str(x) for x in _split_args(n, p))})"),
    "batch_norm": OpSpec(
        lambda a, p: _np_batch_norm(a[0], *_split_args(a, p)),
        lambda a, p: F.batch_norm(a[0], None, None, *_split_args(a, p), training=True),
        lambda n, p: f"F.batch_norm({n[0]}, None, None, "
                     f"{', '.join(str(x) for x in _split_args(n, p))}, training=True)",
        _kink_batch_norm),
    "group_norm": OpSpec(
        lambda a, p: _np_group_norm(a[0], *_split_args(a, p), p["groups"]),
        lambda a, p: F.group_norm(a[0], p["groups"], *_split_args(a, p)),
        lambda n, p: f"F.group_norm({n[0]}, {p['groups']}, "
                     f"{', '.join(str(x) for x in _split_args(n, p))})",
        _kink_group_norm),
    "rms_norm": OpSpec(
        lambda a, p: _np_rms_norm(a[0], a[1] if p["weight"] else None, len(p["shape"])),
        lambda a, p: F.rms_norm(a[0], p["shape"], a[1] if p["weight"] else None),
        lambda n, p: f"F.rms_norm({n[0]}, {tuple(p['shape'])}, "
                     f"{n[1] if p['weight'] else None})",
        _kink_rms_norm),
    "cross_entropy": OpSpec(
        lambda a, p: _np_cross_entropy(a[0], a[1], p["reduction"]),
        lambda a, p: F.cross_entropy(a[0], a[1], reduction=p["reduction"]),
        lambda n, p: f"F.cross_entropy({n[0]}, {n[1]}, reduction={p['reduction']!r})"),
    "mse_loss": OpSpec(lambda a, p: _np_mse(a[0], a[1], p["reduction"]),
                       lambda a, p: F.mse_loss(a[0], a[1], reduction=p["reduction"]),
                       lambda n, p: f"F.mse_loss({n[0]}, {n[1]}, reduction={p['reduction']!r})"),
    "cat": OpSpec(lambda a, p: np.concatenate(a, axis=p["dim"]),
                  lambda a, p: mg.cat(list(a), dim=p["dim"]),
                  lambda n, p: f"mg.cat([{', '.join(n)}], dim={p['dim']})"),
    "stack": OpSpec(lambda a, p: np.stack(a, axis=p["dim"]),
                    lambda a, p: mg.stack(list(a), dim=p["dim"]),
                    lambda n, p: f"mg.stack([{', '.join(n)}], dim={p['dim']})"),
    "clone": OpSpec(lambda a, p: a[0].copy(), lambda a, p: a[0].clone(),
                    lambda n, p: f"{n[0]}.clone()"),
    # in place
    "add_": OpSpec(lambda a, p: _np_inplace(np.add, a, p),
                   lambda a, p: _mg_inplace("add_", a, p),
                   lambda n, p: f"{n[0]}.add_({_ocode(n, p)})"),
    "mul_": OpSpec(lambda a, p: _np_inplace(np.multiply, a, p),
                   lambda a, p: _mg_inplace("mul_", a, p),
                   lambda n, p: f"{n[0]}.mul_({_ocode(n, p)})"),
    "fill_": OpSpec(lambda a, p: a[0].fill(p["c"]), lambda a, p: _mg_fill(a[0], p["c"]),
                    lambda n, p: f"{n[0]}.fill_({p['c']!r})"),
    "setitem": OpSpec(_setitem_np, _setitem_mg, _setitem_code),
    "masked_fill_": OpSpec(
        lambda a, p: np.copyto(a[0], p["c"], where=np.asarray(p["mask"])),
        lambda a, p: a[0].masked_fill_(mg.tensor(p["mask"]), p["c"]),
        lambda n, p: f"{n[0]}.masked_fill_(mg.tensor({p['mask']!r}), {p['c']!r})"),
    "copy_": OpSpec(lambda a, p: np.copyto(a[0], np.asarray(p["values"], dtype=a[0].dtype)),
                    lambda a, p: _mg_copy(a[0], p["values"]),
                    lambda n, p: f"{n[0]}.copy_(mg.tensor({np.asarray(p['values']).tolist()}))"),
}


def _zeros_code(n, p):
    shape = ", ".join(str(s) for s in p["shape"])
    return f"mg.zeros({shape}{', ' if shape else ''}dtype=mg.float64)"


OPS["zeros"] = OpSpec(lambda a, p: np.zeros(p["shape"]),
                      lambda a, p: mg.zeros(*p["shape"], dtype=mg.float64), _zeros_code)


def _code(ins: Instr, names: list[str]) -> str:
    expr = OPS[ins.op].code([names[r] for r in ins.args], ins.params)
    return expr if ins.out is None else f"{names[ins.out]} = {expr}"


def _mutation_code(m: Mutation, names: list[str]) -> str:
    t = names[m.target]
    if m.method == "setitem":
        return f"{t}[{_fmt_index(m.index)}] = {m.value!r}"
    if m.method == "copy_":
        return f"{t}.copy_(mg.tensor({np.asarray(m.value).tolist()}))"
    return f"{t}.{m.method}({m.value!r})"


# ---------------------------------------------------------------------------- NumPy run


@dataclass
class NpRun:
    loss: float
    values: dict[int, np.ndarray]  # every register's value at the end
    sides: list[np.ndarray]  # the side of each kink, in evaluation order
    safe: bool  # away from kinks and from huge values
    scale: float  # sum of |terms| of the loss (for the finite-difference tolerance)


def run_np(prog: Program, leaves: list[np.ndarray]) -> NpRun:
    """Evaluate ``prog`` with NumPy on the given leaf values."""
    env: dict[int, np.ndarray] = {}
    it = iter(leaves)
    for r, spec in prog.inputs:
        if prog.kinds[r] == "f":
            env[r] = np.array(next(it), dtype=np.float64)
        else:
            env[r] = np.array(spec, dtype=np.int64 if prog.kinds[r] == "i" else np.bool_)
    sides: list[np.ndarray] = []
    safe = True
    with np.errstate(all="ignore"):
        for ins in prog.instrs:
            spec = OPS[ins.op]
            args = [env[r] for r in ins.args]
            out = spec.np(args, ins.params)
            if spec.kink is not None:
                side, dist, exact_ok = spec.kink(args, out, ins.params)
                dist = np.asarray(dist)
                near = (dist < TIE) & ((dist != 0) | (not exact_ok))
                if np.any(near):
                    safe = False
                if side is not None:
                    sides.append(np.asarray(side))
            if ins.out is not None:
                env[ins.out] = out
            value = env[ins.args[0]] if ins.out is None else out
            if value.dtype.kind == "f" and not np.all(np.abs(value) < BIG):
                safe = False
        terms = [float((env[r] * w).sum()) for r, w in zip(prog.outputs, prog.weights())]
    scale = float(sum(np.abs(env[r] * w).sum() for r, w in zip(prog.outputs, prog.weights())))
    loss = float(sum(terms))
    if not np.isfinite(loss):
        safe = False
    return NpRun(loss, env, sides, safe, scale)


# ---------------------------------------------------------------------------- memgrad run


@dataclass
class MgRun:
    """What a memgrad run did: ``stage`` is "ok", "forward" (raised in the forward pass)
    or "backward" (raised in backward); ``values`` the registers after the forward."""

    stage: str
    error: BaseException | None
    values: dict[int, np.ndarray]
    grads: list[np.ndarray]


def _mg_input(prog: Program, r: int, spec: Any) -> mg.Tensor:
    if prog.kinds[r] == "f":
        a = np.random.default_rng([prog.seed, r]).standard_normal(spec)
        return mg.tensor(a, dtype=mg.float64, requires_grad=True)
    return mg.tensor(np.array(spec, dtype=np.int64 if prog.kinds[r] == "i" else np.bool_))


def _exec(env: dict, ins: Instr) -> None:
    out = OPS[ins.op].mg([env[r] for r in ins.args], ins.params)
    if ins.out is not None:
        env[ins.out] = out


def _sac(predicate: Callable | None) -> Callable:
    """``predicate`` (over op records) as a selective-checkpoint ``context_fn``."""

    def policy_fn(ctx: Any, op: Any, *args: Any, **params: Any) -> CheckpointPolicy:
        prim = mg.ops.REGISTRY[_NAME_OF[id(op)]]
        return (CheckpointPolicy.MUST_SAVE if predicate is not None and predicate(prim)
                else CheckpointPolicy.PREFER_RECOMPUTE)

    return functools.partial(create_selective_checkpoint_contexts, policy_fn,
                             allow_cache_entry_mutation=True)


_NAME_OF = {id(h): name for name, h in mg.ops.HANDLES.items()}


def _run_region(prog: Program, env: dict, reg: Region) -> None:
    def region(*tensors: mg.Tensor) -> tuple:
        local = {r: env[r] for r in reg.closure}  # read when the function runs
        local.update(zip(reg.args, tensors))
        k = reg.start
        while k < reg.stop:
            if reg.inner is not None and k == reg.inner.start:
                _run_region(prog, local, reg.inner)
                k = reg.inner.stop
            else:
                _exec(local, prog.instrs[k])
                k += 1
        return tuple(local[r] for r in reg.outputs)

    args = [env[r] for r in reg.args]
    if reg.reentrant:
        outs = checkpoint(region, *args, use_reentrant=True)
    elif reg.sac:
        outs = checkpoint(region, *args, use_reentrant=False, early_stop=reg.early_stop,
                          context_fn=_sac(POLICIES[reg.policy]))
    else:
        outs = checkpoint(region, *args, use_reentrant=False, early_stop=reg.early_stop,
                          policy=POLICIES[reg.policy])
    if isinstance(outs, mg.Tensor):
        outs = (outs,)
    env.update(zip(reg.outputs, outs))


def _mutate(env: dict, m: Mutation) -> None:
    t = env[m.target]
    with mg.no_grad():
        if m.method == "setitem":
            t[m.index] = m.value
        elif m.method == "copy_":
            t.copy_(mg.tensor(np.asarray(m.value, dtype=t.dtype)))
        else:
            getattr(t, m.method)(m.value)


def run_mg(prog: Program, regions: list[Region], mutation: Mutation | None = None) -> MgRun:
    """Run ``prog`` with memgrad from fresh inputs, with ``regions`` checkpointed, apply
    ``mutation`` after the forward, then ``backward()``. RuntimeErrors (CheckpointError
    included) are caught and reported; any other exception propagates."""
    env: dict[int, mg.Tensor] = {}
    for r, spec in prog.inputs:
        env[r] = _mg_input(prog, r, spec)
    leaves = [env[r] for r in prog.leaves]
    values: dict[int, np.ndarray] = {}
    starts = {reg.start: reg for reg in regions}
    try:
        k = 0
        while k < len(prog.instrs):
            reg = starts.get(k)
            if reg is None:
                _exec(env, prog.instrs[k])
                k += 1
            else:
                _run_region(prog, env, reg)
                k = reg.stop
        loss = None
        for r, w in zip(prog.outputs, prog.weights()):
            term = (env[r] * mg.tensor(w, dtype=mg.float64)).sum()
            loss = term if loss is None else loss + term
    except RuntimeError as e:
        return MgRun("forward", e, values, [])
    values = {r: np.array(t.numpy(), copy=True) for r, t in env.items()}
    if mutation is not None:
        _mutate(env, mutation)
    try:
        if loss.requires_grad:
            loss.backward()
    except RuntimeError as e:
        return MgRun("backward", e, values, [])
    grads = [np.zeros(t.shape) if t.grad is None else np.array(t.grad.numpy(), copy=True)
             for t in leaves]
    return MgRun("ok", None, values, grads)


# ---------------------------------------------------------------------------- generator


class _Gen:
    """The state of one program being drawn: every register's NumPy value so far."""

    def __init__(self, draw: Callable, seed: int, inplace: bool, max_leaves: int) -> None:
        self.draw = draw
        self.seed = seed
        self.inplace = inplace
        self.max_leaves = max_leaves
        self.kinds: list[str] = []
        self.names: list[str] = []
        self.np: list[np.ndarray] = []
        self.origin: list[str] = []  # "leaf", "input", "op", "buffer"
        self.grad: list[bool] = []  # surely requires grad (not through a stale view)
        self.grad_before: list[list[bool]] = []  # per instruction: ``grad`` before it ran
        self.bounds: list[list[int]] = []  # int registers: values must stay in [lo, hi)
        self.inputs: list[tuple[int, Any]] = []
        self.instrs: list[Instr] = []
        self.writes: list[tuple[int, ...]] = []
        self.forced: list[int] = []  # registers the loss must read
        self.counts = {"f": 0, "i": 0, "b": 0, "leaf": 0}

    # -- registers
    def _new(self, kind: str, value: np.ndarray, origin: str, grad: bool) -> int:
        r = len(self.kinds)
        self.kinds.append(kind)
        prefix = {"f": "x" if origin == "leaf" else "v", "i": "i", "b": "m"}[kind]
        key = "leaf" if origin == "leaf" else kind
        self.names.append(f"{prefix}{self.counts[key]}")
        self.counts[key] += 1
        self.np.append(value)
        self.origin.append(origin)
        self.grad.append(grad)
        self.bounds.append([-(10**9), 10**9])
        return r

    def leaf(self, shape: tuple[int, ...]) -> int:
        r = len(self.kinds)
        value = np.random.default_rng([self.seed, r]).standard_normal(shape)
        r = self._new("f", value, "leaf", True)
        self.inputs.append((r, tuple(shape)))
        return r

    def index_input(self, values: np.ndarray, kind: str) -> int:
        r = self._new(kind, np.array(values), "input", False)
        self.inputs.append((r, np.array(values).tolist()))
        return r

    def can_add_leaf(self) -> bool:
        return self.counts["leaf"] < self.max_leaves

    def emit(self, op: str, args: tuple[int, ...], params: dict, kind: str = "f",
             origin: str = "op") -> int | None:
        spec = OPS[op]
        vals = [self.np[r] for r in args]
        self.grad_before.append(list(self.grad))
        if op in ("add_", "mul_", "fill_", "setitem", "copy_", "masked_fill_"):
            target = self.np[args[0]]
            writes = tuple(r for r in range(len(self.np))
                           if np.shares_memory(self.np[r], target))
            spec.np(vals, params)
            self.instrs.append(Instr(op, args, params, None))
            self.writes.append(writes)
            if any(self.grad[r] for r in args[1:] if self.kinds[r] == "f"):
                self.grad[args[0]] = True
            return None
        out = _arr(spec.np(vals, params))
        grad = any(self.grad[r] for r in args if self.kinds[r] == "f")
        r = self._new(kind, out, origin, grad and kind == "f")
        self.instrs.append(Instr(op, args, params, r))
        self.writes.append(())
        return r

    # -- choosing
    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def choose(self, items: list) -> Any:
        return items[self.draw(st.integers(0, len(items) - 1))]

    def pick(self, kind: str = "f", pred: Callable[[int], bool] = lambda r: True) -> int | None:
        """A register of ``kind`` satisfying ``pred``, the most recent ones first."""
        cands = [r for r in reversed(range(len(self.kinds))) if self.kinds[r] == kind
                 and pred(r)]
        return self.choose(cands) if cands else None

    def shape(self, r: int) -> tuple[int, ...]:
        return self.np[r].shape

    def writeable_target(self, r: int) -> bool:
        return (self.kinds[r] == "f" and self.origin[r] != "leaf"
                and self.np[r].flags.writeable and self.np[r].size > 0)

    def apart(self, r: int, t: int) -> bool:
        """Whether register ``r`` shares no memory with ``t``: a write into ``t`` may read it
        (PyTorch refuses writes whose value overlaps the tensor written)."""
        return not np.shares_memory(self.np[r], self.np[t])

    def fits(self, r: int, lo: int, hi: int) -> bool:
        """Whether int register ``r`` can be used where its values must lie in [lo, hi)."""
        v = self.np[r]
        b = self.bounds[r]
        return bool(np.all((v >= lo) & (v < hi))) and max(b[0], lo) < min(b[1], hi)

    def use_int(self, r: int, lo: int, hi: int) -> None:
        b = self.bounds[r]
        b[0], b[1] = max(b[0], lo), min(b[1], hi)

    def partner(self, shape: tuple[int, ...], pred: Callable[[int], bool]) -> int:
        """An existing float register satisfying ``pred`` or a new leaf of ``shape``."""
        if not self.can_add_leaf() or self.flag():
            r = self.pick("f", pred)
            if r is not None:
                return r
        return self.leaf(shape)


def _broadcast_ok(a: tuple, b: tuple) -> bool:
    try:
        out = np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return int(np.prod(out)) <= MAX_ELEMS


def _into(value_shape: tuple, target: tuple) -> bool:
    try:
        return np.broadcast_shapes(value_shape, target) == tuple(target)
    except ValueError:
        return False


def _scalar(g: _Gen) -> float:
    return g.choose([1.5, -0.5, 2.0, 0.25, -3.0])


def _small_shape(g: _Gen, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape broadcastable with ``base``: a suffix of it with some sizes set to 1."""
    k = g.integer(0, len(base))
    return tuple(1 if g.flag() else s for s in base[len(base) - k:])


def _dims(g: _Gen, ndim: int, single: bool = False) -> Any:
    """A ``dim`` argument: None, an int or a tuple (negative sometimes)."""
    if ndim == 0:
        return None if not single else None
    if single:
        d = g.integer(0, ndim - 1)
        return d - ndim if g.flag() else d
    form = g.integer(0, 2)
    if form == 0:
        return None
    if form == 1:
        d = g.integer(0, ndim - 1)
        return d - ndim if g.flag() else d
    ds = sorted(g.draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim)))
    return tuple(d - ndim if g.flag() else d for d in ds)


def _count(shape: tuple, dim: Any) -> int:
    if dim is None:
        return int(np.prod(shape))
    ds = dim if isinstance(dim, tuple) else (dim,)
    return int(np.prod([shape[d] for d in ds]))


# each maker draws operands and parameters and emits the instruction(s); it returns False
# when it does not apply to the current registers


def _mk_binary(op: str):
    def make(g: _Gen) -> bool:
        a = g.pick()
        tensor_only = op in ("maximum", "minimum")
        if not tensor_only and g.flag():
            g.emit(op, (a,), {"c": _scalar(g)})
            return True
        sa = g.shape(a)
        b = g.partner(_small_shape(g, sa), lambda r: _broadcast_ok(sa, g.shape(r)))
        g.emit(op, (a, b), {})
        return True
    return make


def _mk_unary(op: str):
    def make(g: _Gen) -> bool:
        g.emit(op, (g.pick(),), {})
        return True
    return make


def _mk_along(op: str):
    """flip, roll, cumsum, cumprod, tril and index_select of a register along one of its
    dims."""
    def make(g: _Gen) -> bool:
        a = g.pick(pred=lambda r: g.np[r].ndim >= (2 if op == "tril" else 1))
        if a is None:
            return False
        x = g.np[a]
        d = g.integer(-x.ndim, x.ndim - 1)
        if op == "flip":
            params: dict = {"dims": (d,)}
        elif op == "roll":
            params = {"shift": g.integer(-3, 3), "dim": d}
        elif op in ("cumsum", "cumprod"):
            params = {"dim": d}
        elif op == "tril":
            params = {"diagonal": g.integer(-1, 1)}
        else:
            n = x.shape[d]
            params = {"dim": d, "index": [g.integer(0, n - 1) for _ in range(g.integer(1, 4))]}
        g.emit(op, (a,), params)
        return True
    return make


def _shapes_of_size(n: int) -> list[tuple[int, ...]]:
    out = [()] if n == 1 else []
    divs = [d for d in range(1, n + 1) if n % d == 0]
    out += [(n,)]
    out += [(a, n // a) for a in divs]
    out += [(a, b, n // (a * b)) for a in divs for b in divs if n % (a * b) == 0]
    return out


def _mk_reshape(g: _Gen) -> bool:
    a = g.pick()
    x = g.np[a]
    shape = g.choose(_shapes_of_size(x.size))
    how = "reshape"
    if g.flag() and (x.size == 0 or np.may_share_memory(np.reshape(x, shape), x)):
        how = "view"
    g.emit("reshape", (a,), {"shape": shape, "how": how})
    return True


def _mk_narrow(op: str):
    """``narrow`` (a slice along one dim) or one element of ``unbind``: views of a register."""
    def make(g: _Gen) -> bool:
        a = g.pick(pred=lambda r: g.np[r].ndim >= 1 and min(g.np[r].shape) >= 1)
        if a is None:
            return False
        x = g.np[a]
        d = g.integer(-x.ndim, x.ndim - 1)
        n = x.shape[d]
        if op == "narrow":
            start = g.integer(0, n - 1)
            params: dict = {"dim": d, "start": start, "length": g.integer(1, n - start)}
        else:
            params = {"dim": d, "i": g.integer(0, n - 1)}
        g.emit(op, (a,), params)
        return True
    return make


def _mk_transpose(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 2)
    if a is None:
        return False
    nd = g.np[a].ndim
    d0 = g.integer(-nd, nd - 1)
    d1 = g.integer(-nd, nd - 1)
    if d0 % nd == d1 % nd:
        return False
    g.emit("transpose", (a,), {"d0": d0, "d1": d1})
    return True


def _mk_permute(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 2)
    if a is None:
        return False
    dims = tuple(g.draw(st.permutations(range(g.np[a].ndim))))
    g.emit("permute", (a,), {"dims": dims})
    return True


def _mk_unsqueeze(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim <= 2)
    if a is None:
        return False
    nd = g.np[a].ndim
    g.emit("unsqueeze", (a,), {"dim": g.integer(-nd - 1, nd)})
    return True


def _mk_squeeze(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: 1 in g.shape(r))
    if a is None:
        return False
    s = g.shape(a)
    ones = [d for d, n in enumerate(s) if n == 1]
    dim = None if g.flag() else g.choose(ones)
    g.emit("squeeze", (a,), {"dim": dim})
    return True


def _mk_expand(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim <= 3)
    s = g.shape(a)
    sizes = []
    shape = []
    if len(s) < 3 and g.flag():
        n = g.integer(1, 3)
        sizes.append(n)
        shape.append(n)
    for n in s:
        if n == 1:
            m = g.integer(1, 3)
            sizes.append(m)
            shape.append(m)
        else:
            sizes.append(-1 if g.flag() else n)
            shape.append(n)
    if int(np.prod(shape)) > MAX_ELEMS:
        return False
    g.emit("expand", (a,), {"sizes": tuple(sizes), "shape": tuple(shape)})
    return True


def _basic_index(g: _Gen, shape: tuple[int, ...]) -> tuple | None:
    nd = len(shape)
    if nd == 0:
        return None
    form = g.integer(0, 4)
    if form == 0:
        return (g.integer(-shape[0], shape[0] - 1),)
    if form == 1 and shape[0] >= 2:
        return (slice(1, None),)
    if form == 2 and nd >= 2:
        return (slice(None), g.integer(0, shape[1] - 1))
    if form == 3 and shape[-1] >= 2:
        start = g.integer(0, shape[-1] - 2)
        return (Ellipsis, slice(start, g.integer(start + 1, shape[-1])))
    if form == 4 and shape[0] >= 3:
        return (slice(None, None, 2),)
    return (g.integer(0, shape[0] - 1),)


def _mk_getitem(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
    if a is None:
        return False
    g.emit("getitem", (a,), {"index": _basic_index(g, g.shape(a))})
    return True


def _index_values(g: _Gen, n: int, shape: tuple[int, ...], lo: int | None = None,
                  unique: bool = False) -> np.ndarray | None:
    lo = -n if lo is None else lo
    size = int(np.prod(shape))
    if unique:
        if size > n:
            return None
        perm = g.draw(st.permutations(range(n)))[:size]
        vals = [p - n if lo < 0 and g.flag() else p for p in perm]
    else:
        vals = g.draw(st.lists(st.integers(lo, n - 1), min_size=size, max_size=size))
    return np.array(vals, dtype=np.int64).reshape(shape)


def _index_reg(g: _Gen, n: int, max_ndim: int, unique: bool = False) -> int | None:
    """An int register usable to index a dim of size ``n`` (existing or new)."""

    def ok(r: int) -> bool:
        v = g.np[r]
        if v.ndim > max_ndim or v.ndim == 0 or not g.fits(r, -n, n):
            return False
        return not unique or len(set((v % n).ravel().tolist())) == v.size

    if g.flag():
        r = g.pick("i", ok)
        if r is not None:
            return r
    if max_ndim >= 2 and not unique and g.flag():
        shape: tuple[int, ...] = (2, 2)
    else:
        shape = (g.integer(1, min(4, n) if unique else 4),)
    vals = _index_values(g, n, shape, unique=unique)
    return None if vals is None else g.index_input(vals, "i")


def _mk_index(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
    if a is None:
        return False
    s = g.shape(a)
    dim = 1 if len(s) >= 2 and g.flag() else 0
    i = _index_reg(g, s[dim], max_ndim=3 - len(s) + 1)
    if i is None:
        return False
    g.use_int(i, -s[dim], s[dim])
    g.emit("index", (a, i), {"dim": dim})
    return True


def _mask_values(g: _Gen, shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape))
    vals = np.array(g.draw(st.lists(st.booleans(), min_size=size, max_size=size)),
                    dtype=np.bool_)
    if not vals.any():
        vals[0] = True
    return vals.reshape(shape)


def _mask_reg(g: _Gen, shape: tuple[int, ...]) -> int:
    if g.flag():
        r = g.pick("b", lambda r: g.shape(r) == shape)
        if r is not None:
            return r
    return g.index_input(_mask_values(g, shape), "b")


def _mk_mask(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
    if a is None:
        return False
    s = g.shape(a)
    m = _mask_reg(g, s[:g.integer(1, len(s))])
    g.emit("mask", (a, m), {})
    return True


def _mk_reduce(op: str):
    def make(g: _Gen) -> bool:
        a = g.pick()
        s = g.shape(a)
        single = op in ("max_dim", "min_dim")
        if single and not s:
            return False
        dim = _dims(g, len(s), single)
        if op in ("var", "std") and _count(s, dim) < 2:
            return False
        if op in ("amax", "amin", "max_dim", "min_dim", "logsumexp") and \
                int(np.prod(s)) == 0:
            return False
        g.emit(op, (a,), {"dim": dim, "keepdim": g.flag()})
        return True
    return make


def _mk_matmul(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim in (2, 3))
    if a is None:
        return False
    sa = g.shape(a)
    k = sa[-1]
    batch_a = sa[:-2]
    if batch_a:
        batch_b = g.choose([(), (1,), batch_a])
    else:
        batch_b = g.choose([(), (g.integer(1, 3),)])
    m = g.integer(1, 4)

    def ok(r: int) -> bool:
        s = g.shape(r)
        return len(s) in (2, 3) and s[-2] == k and _broadcast_ok(batch_a, s[:-2])

    b = g.partner(batch_b + (k, m), ok)
    g.emit("matmul", (a, b), {})
    return True


def _mk_linear(g: _Gen) -> bool:
    """``F.linear``, or the stacked-weight form ``linear_rows`` (a row range of the weight
    and bias), with or without a bias."""
    x = g.pick(pred=lambda r: g.np[r].ndim in (1, 2, 3) and g.shape(r)[-1] > 0)
    if x is None:
        return False
    k = g.shape(x)[-1]
    rows = g.integer(1, 4)
    params: dict = {}
    if g.flag():
        lo = g.integer(0, rows - 1)
        params["rows"] = (lo, g.integer(lo + 1, rows))
    w = g.partner((rows, k), lambda r: g.shape(r) == (rows, k))
    args = [x, w]
    if g.flag():
        args.append(g.partner((rows,), lambda r: g.shape(r) == (rows,)))
    g.emit("linear", tuple(args), params)
    return True


def _pick_nchw(g: _Gen) -> int | None:
    """An (N, C, H, W) register with no empty dimension, else one reshaped into one to
    three samples of C channels; None when there is no non-empty register."""
    x = g.pick(pred=lambda r: len(g.shape(r)) == 4 and min(g.shape(r)) >= 1)
    if x is not None:
        return x
    a = g.pick(pred=lambda r: g.np[r].size >= 1)
    if a is None:
        return None
    size = g.np[a].size
    shape = g.choose([(n,) + s for n in (1, 2, 3) if size % n == 0
                      for s in _shapes_of_size(size // n) if len(s) == 3])
    return g.emit("reshape", (a,), {"shape": shape, "how": "reshape"})


def _mk_conv2d(g: _Gen) -> bool:
    """``F.conv2d`` of an (N, C, H, W) register with a square kernel of 1 to 3, stride 1, no
    padding or one, with or without a bias (a 3x3 kernel takes the Winograd path in the
    differential test, which lowers its thresholds)."""
    x = _pick_nchw(g)
    if x is None:
        return False
    n, c, h, w = g.shape(x)
    k, pad, co = g.integer(1, 3), g.integer(0, 1), g.integer(1, 3)
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    if min(oh, ow) < 1 or n * co * oh * ow > MAX_ELEMS:
        return False
    args = [x, g.partner((co, c, k, k), lambda r: g.shape(r) == (co, c, k, k))]
    if g.flag():
        args.append(g.partner((co,), lambda r: g.shape(r) == (co,)))
    g.emit("conv2d", tuple(args), {"padding": pad})
    return True


def _mk_max_pool2d(g: _Gen) -> bool:
    """``F.max_pool2d`` of an (N, C, H, W) register: a kernel of 1 to 3 along each axis, a
    stride of 1 or 2, padding up to half the kernel, a dilation of 1 or 2; every window
    holds an input element."""
    x = _pick_nchw(g)
    if x is None:
        return False
    kernel = (g.integer(1, 3), g.integer(1, 3))
    stride = (g.integer(1, 2), g.integer(1, 2))
    padding = (g.integer(0, kernel[0] // 2), g.integer(0, kernel[1] // 2))
    dilation = (g.integer(1, 2), g.integer(1, 2))
    params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    n, c, h, w = g.shape(x)
    sizes = [(s + 2 * p - d * (k - 1) - 1) // st + 1
             for s, k, st, p, d in zip((h, w), kernel, stride, padding, dilation)]
    if min(sizes) < 1 or n * c * sizes[0] * sizes[1] > MAX_ELEMS:
        return False
    if not np.all(np.isfinite(_max_pool2d_np([g.np[x]], params))):
        return False  # a window of padding only (with dilation)
    g.emit("max_pool2d", (x,), params)
    return True


def _mk_attention(g: _Gen) -> bool:
    """Self-attention of one value (query, key and value alike), causal or not."""
    a = g.pick(pred=lambda r: g.np[r].ndim >= 2)
    if a is None:
        return False
    g.emit("attention", (a,), {"causal": g.flag()})
    return True


def _mk_self_attention(g: _Gen) -> bool:
    """The fused multi-head self-attention of one (N, T, E) value as queries, keys and values
    alike (stacked with cat), over 1 or 2 heads, causal or not."""
    a = g.pick(pred=lambda r: g.np[r].ndim == 3 and g.shape(r)[-1] > 0)
    if a is None:
        return False
    e = g.shape(a)[-1]
    heads = 2 if e % 2 == 0 and g.flag() else 1
    g.emit("self_attention", (a,), {"heads": heads, "causal": g.flag()})
    return True


def _mk_softmax(op: str):
    def make(g: _Gen) -> bool:
        a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
        if a is None:
            return False
        g.emit(op, (a,), {"dim": _dims(g, g.np[a].ndim, single=True)})
        return True
    return make


def _mk_layer_norm(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
    if a is None:
        return False
    s = g.shape(a)
    shape = s[len(s) - g.integer(1, min(2, len(s))):]
    args = [a]
    params = {"shape": tuple(shape), "weight": False, "bias": False}
    for key in ("weight", "bias"):
        if g.flag():
            args.append(g.partner(shape, lambda r: g.shape(r) == shape))
            params[key] = True
    g.emit("layer_norm", tuple(args), params)
    return True


def _mk_channel_norm(op: str):
    """batch_norm (batch statistics) or group_norm over (N, C, ...) with optional
    per-channel weight and bias."""

    def make(g: _Gen) -> bool:
        def fits(r: int) -> bool:
            s = g.shape(r)
            if len(s) < 2 or s[1] == 0:
                return False
            return (s[0] * int(np.prod(s[2:], dtype=np.int64)) >= 2 if op == "batch_norm"
                    else int(np.prod(s[2:], dtype=np.int64)) >= 1)

        a = g.pick(pred=fits)
        if a is None:
            return False
        s = g.shape(a)
        c = s[1]
        args = [a]
        params: dict = {"weight": False, "bias": False}
        if op == "group_norm":
            groups = g.choose([k for k in range(1, c + 1) if c % k == 0])
            if c // groups * int(np.prod(s[2:], dtype=np.int64)) < 2:
                return False
            params["groups"] = groups
        for key in ("weight", "bias"):
            if g.flag():
                args.append(g.partner((c,), lambda r: g.shape(r) == (c,)))
                params[key] = True
        g.emit(op, tuple(args), params)
        return True

    return make


def _mk_rms_norm(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
    if a is None:
        return False
    s = g.shape(a)
    shape = s[len(s) - g.integer(1, min(2, len(s))):]
    args = [a]
    params = {"shape": tuple(shape), "weight": g.flag()}
    if params["weight"]:
        args.append(g.partner(shape, lambda r: g.shape(r) == shape))
    g.emit("rms_norm", tuple(args), params)
    return True


def _mk_cross_entropy(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: 1 <= g.np[r].ndim <= 3)
    if a is None:
        return False
    s = g.shape(a)
    classes = s[0] if len(s) == 1 else s[1]
    tshape = () if len(s) == 1 else (s[0],) + s[2:]
    t = None
    if g.flag():
        t = g.pick("i", lambda r: g.shape(r) == tshape and g.fits(r, 0, classes))
    if t is None:
        t = g.index_input(_index_values(g, classes, tshape, lo=0), "i")
    g.use_int(t, 0, classes)
    g.emit("cross_entropy", (a, t), {"reduction": g.choose(["mean", "sum", "none"])})
    return True


def _mk_mse_loss(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: int(np.prod(g.shape(r), dtype=np.int64)) >= 1)
    if a is None:
        return False
    s = g.shape(a)
    b = g.partner(s, lambda r: g.shape(r) == s and r != a)
    g.emit("mse_loss", (a, b), {"reduction": g.choose(["mean", "sum", "none"])})
    return True


def _mk_cat(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim >= 1)
    if a is None:
        return False
    s = g.shape(a)
    d = g.integer(0, len(s) - 1)
    parts = [a]
    for _ in range(g.integer(1, 2)):
        def ok(r: int, d=d) -> bool:
            t = g.shape(r)
            return len(t) == len(s) and t[:d] + t[d + 1:] == s[:d] + s[d + 1:]
        if g.flag():
            parts.append(a)  # the same tensor twice
        else:
            parts.append(g.partner(s[:d] + (g.integer(1, 3),) + s[d + 1:], ok))
    total = sum(g.shape(r)[d] for r in parts)
    if int(np.prod(s)) // max(s[d], 1) * total > MAX_ELEMS:
        return False
    g.emit("cat", tuple(parts), {"dim": d - len(s) if g.flag() else d})
    return True


def _mk_stack(g: _Gen) -> bool:
    a = g.pick(pred=lambda r: g.np[r].ndim <= 2)
    if a is None:
        return False
    s = g.shape(a)
    parts = [a] + [a if g.flag() else g.partner(s, lambda r: g.shape(r) == s)
                   for _ in range(g.integer(1, 2))]
    nd = len(s) + 1
    g.emit("stack", tuple(parts), {"dim": g.integer(-nd, nd - 1)})
    return True


# -- in place


def _mk_inplace_arith(op: str):
    def make(g: _Gen) -> bool:
        t = g.pick(pred=g.writeable_target)
        if t is None:
            return False
        s = g.shape(t)
        if g.flag():
            g.emit(op, (t,), {"c": _scalar(g)})
        else:
            b = g.partner(_small_shape(g, s), lambda r: _into(g.shape(r), s) and r != t
                          and g.apart(r, t))
            g.emit(op, (t, b), {})
        return True
    return make


def _setitem_value(g: _Gen, sel: tuple[int, ...], args: list[int], params: dict) -> None:
    if g.flag() and g.flag():
        params["c"] = _scalar(g)
        return
    args.append(g.partner(sel, lambda r: _into(g.shape(r), sel) and g.grad[r]
                          and g.apart(r, args[0])))


def _mk_setitem(g: _Gen) -> bool:
    t = g.pick(pred=lambda r: g.writeable_target(r) and g.np[r].ndim >= 1)
    if t is None:
        return False
    s = g.shape(t)
    args = [t]
    form = g.integer(0, 2)
    if form == 1:
        dim = 1 if len(s) >= 2 and g.flag() else 0
        i = _index_reg(g, s[dim], max_ndim=1, unique=True)
        if i is None:
            return False
        g.use_int(i, -s[dim], s[dim])
        args.append(i)
        params = {"kind": "idx", "dim": dim}
        sel = g.np[t][(slice(None),) * dim + (g.np[i],)].shape
    elif form == 2:
        m = _mask_reg(g, s[:g.integer(1, len(s))])
        args.append(m)
        params = {"kind": "mask"}
        sel = g.np[t][g.np[m]].shape
    else:
        index = _basic_index(g, s)
        params = {"kind": "basic", "index": index}
        sel = g.np[t][_np_basic(index)].shape
    _setitem_value(g, sel, args, params)
    g.emit("setitem", tuple(args), params)
    return True


def _mk_fill(g: _Gen) -> bool:
    t = g.pick(pred=g.writeable_target)
    if t is None:
        return False
    g.emit("fill_", (t,), {"c": _scalar(g)})
    return True


def _mk_masked_fill(g: _Gen) -> bool:
    t = g.pick(pred=g.writeable_target)
    if t is None:
        return False
    mask = np.array([g.flag() for _ in range(int(np.prod(g.shape(t), dtype=int)))],
                    dtype=bool).reshape(g.shape(t))
    g.emit("masked_fill_", (t,), {"mask": mask.tolist(), "c": _scalar(g)})
    return True


def _mk_buffer(g: _Gen) -> bool:
    """A preallocated zeros buffer filled row by row with values that require grad,
    maybe with a view of it taken before the writes (used by the loss)."""
    src = g.pick(pred=lambda r: g.np[r].ndim <= 2)
    if src is None:
        return False
    s = g.shape(src)
    n = g.integer(2, 4)
    buf = g.emit("zeros", (), {"shape": (n,) + s}, origin="buffer")
    view = None
    if g.flag():
        vshape = (n,) + s
        how = g.integer(0, 2)
        if how == 0:
            view = g.emit("getitem", (buf,), {"index": (g.integer(0, n - 1),)})
        elif how == 1 and len(vshape) >= 2:
            view = g.emit("transpose", (buf,), {"d0": 0, "d1": -1})
        else:
            view = g.emit("reshape", (buf,), {"shape": (int(np.prod(vshape)),),
                                              "how": "view"})
    rows = list(range(n))
    if g.flag():
        rows = rows[:g.integer(1, n)]
    for j in rows:
        if g.flag():
            v = g.emit("mul", (src,), {"c": float(j + 2)})
        else:
            v = g.partner(s, lambda r: g.shape(r) == s and g.grad[r])
        g.emit("setitem", (buf, v), {"kind": "basic", "index": (j,)})
    g.forced.append(buf)
    if view is not None:
        g.forced.append(view)
    return True


def _mk_index_clone(g: _Gen) -> bool:
    kind = g.choose(["i", "b"])
    r = g.pick(kind)
    if r is None:
        return False
    c = g.emit("clone", (r,), {}, kind=kind)
    g.bounds[c] = list(g.bounds[r])
    return True


def new_index_values(values: np.ndarray, kind: str, bounds: list[int],
                     choose: Callable) -> tuple[str, Any] | None:
    """An in-place change of an index (kind "i") or mask ("b") tensor that keeps it valid:
    ints stay inside ``bounds``, masks keep their number of True entries. Returns
    (method, value) with method ``fill_``, ``add_`` or ``copy_``."""
    if kind == "b":
        return "copy_", choose("perm", values)
    lo, hi = bounds
    lo, hi = max(lo, -4), min(hi, 4)
    if lo >= hi:
        return None
    form = choose("form", 3)
    if form == 0:
        return "fill_", choose("int", (lo, hi - 1))
    if form == 1:
        k = choose("int", (1, 2))
        if values.size and values.max() + k < hi:
            return "add_", k
    flat = [choose("int", (lo, hi - 1)) for _ in range(values.size)]
    return "copy_", np.array(flat, dtype=np.int64).reshape(values.shape).tolist()


def _gen_choose(g: _Gen) -> Callable:
    def choose(what: str, arg: Any) -> Any:
        if what == "form":
            return g.integer(0, arg - 1)
        if what == "int":
            return g.integer(*arg)
        perm = g.draw(st.permutations(range(arg.size)))
        return arg.ravel()[list(perm)].reshape(arg.shape).tolist()
    return choose


def _mk_index_inplace(g: _Gen) -> bool:
    kind = g.choose(["i", "b"])
    r = g.pick(kind)
    if r is None:
        return False
    change = new_index_values(g.np[r], kind, g.bounds[r], _gen_choose(g))
    if change is None:
        return False
    method, value = change
    if method == "copy_":
        g.emit("copy_", (r,), {"values": value})
    elif method == "fill_":
        g.emit("fill_", (r,), {"c": value})
    else:
        g.emit("add_", (r,), {"c": value})
    return True


# pure ops in families, drawn family first so that each family gets its share
FAMILIES: list[list[tuple[str, Callable[[_Gen], bool]]]] = [
    [("add", _mk_binary("add")), ("mul", _mk_binary("mul")), ("sub", _mk_binary("sub")),
     ("div", _mk_binary("div")), ("maximum", _mk_binary("maximum")),
     ("minimum", _mk_binary("minimum"))],
    [("tanh", _mk_unary("tanh")), ("exp", _mk_unary("exp")),
     ("sigmoid", _mk_unary("sigmoid")), ("relu", _mk_unary("relu")),
     ("abs", _mk_unary("abs")), ("neg", _mk_unary("neg")), ("square", _mk_unary("square")),
     ("log_safe", _mk_unary("log_safe")), ("sqrt_safe", _mk_unary("sqrt_safe")),
     ("sin", _mk_unary("sin")), ("cos", _mk_unary("cos")), ("erf", _mk_unary("erf")),
     ("log1p_safe", _mk_unary("log1p_safe")), ("rsqrt_safe", _mk_unary("rsqrt_safe")),
     ("atan", _mk_unary("atan")), ("sinh", _mk_unary("sinh")),
     ("log2_safe", _mk_unary("log2_safe"))],
    [("flip", _mk_along("flip")), ("roll", _mk_along("roll")), ("cumsum", _mk_along("cumsum")),
     ("cumprod", _mk_along("cumprod")), ("tril", _mk_along("tril")),
     ("index_select", _mk_along("index_select"))],
    [("reshape", _mk_reshape), ("transpose", _mk_transpose), ("permute", _mk_permute),
     ("unsqueeze", _mk_unsqueeze), ("squeeze", _mk_squeeze), ("expand", _mk_expand),
     ("getitem", _mk_getitem), ("narrow", _mk_narrow("narrow")),
     ("unbind", _mk_narrow("unbind"))],
    [("index", _mk_index), ("mask", _mk_mask), ("cross_entropy", _mk_cross_entropy),
     ("mse_loss", _mk_mse_loss)],
    [("sum", _mk_reduce("sum")), ("mean", _mk_reduce("mean")), ("amax", _mk_reduce("amax")),
     ("amin", _mk_reduce("amin")), ("max_dim", _mk_reduce("max_dim")),
     ("min_dim", _mk_reduce("min_dim")), ("var", _mk_reduce("var")),
     ("std", _mk_reduce("std")), ("logsumexp", _mk_reduce("logsumexp"))],
    [("matmul", _mk_matmul), ("linear", _mk_linear), ("conv2d", _mk_conv2d),
     ("max_pool2d", _mk_max_pool2d),
     ("softmax", _mk_softmax("softmax")),
     ("log_softmax", _mk_softmax("log_softmax")), ("layer_norm", _mk_layer_norm),
     ("attention", _mk_attention), ("self_attention", _mk_self_attention)],
    [("batch_norm", _mk_channel_norm("batch_norm")),
     ("group_norm", _mk_channel_norm("group_norm")), ("rms_norm", _mk_rms_norm)],
    [("cat", _mk_cat), ("stack", _mk_stack)],
]

INPLACE_MAKERS: list[tuple[str, Callable[[_Gen], bool]]] = [
    ("add_", _mk_inplace_arith("add_")),
    ("mul_", _mk_inplace_arith("mul_")),
    ("setitem", _mk_setitem),
    ("buffer", _mk_buffer),
    ("fill_", _mk_fill),
    ("masked_fill_", _mk_masked_fill),
    ("index_inplace", _mk_index_inplace),
    ("index_clone", _mk_index_clone),
]


def _shape_strategy(max_ndim: int = 3) -> st.SearchStrategy:
    return st.lists(st.integers(1, 4), min_size=0, max_size=max_ndim).map(tuple)


def _region_ok(g: _Gen, start: int, stop: int, outputs_after: Callable) -> bool:
    inside = set()
    for k in range(start, stop):
        ins = g.instrs[k]
        if ins.out is not None:
            inside.add(ins.out)
        elif any(w not in inside for w in g.writes[k]):
            return False  # it would change a register of the enclosing program
    outs = outputs_after(start, stop)
    return bool(outs) and all(g.kinds[r] == "f" for r in outs)


def _draw_region(draw: Callable, g: _Gen, start: int, stop: int, outputs: list[int]) -> Region:
    """A checkpointed region over instructions ``start:stop`` returning ``outputs``: which
    registers it takes as arguments and which by closure, its variant and policy."""
    inside = {ins.out for ins in g.instrs[start:stop] if ins.out is not None}
    reads = list(dict.fromkeys(r for ins in g.instrs[start:stop] for r in ins.args
                               if r not in inside))
    closure = [r for r in reads if draw(st.booleans())]
    args = [r for r in reads if r not in closure]
    reentrant = draw(st.booleans())
    before = g.grad_before[start]

    def grad(r: int, before: list[bool] = before) -> bool:
        # at the region's start (leaves drawn later are inputs)
        return g.kinds[r] == "f" and (before[r] if r < len(before) else
                                      g.origin[r] == "leaf")

    if reentrant and not any(grad(r) for r in args):
        # the reentrant variant needs an argument that requires grad (as in PyTorch)
        movable = [r for r in closure if grad(r)]
        if movable:
            closure.remove(movable[0])
            args.append(movable[0])
        else:
            reentrant = False
    pol = "none" if reentrant else draw(st.sampled_from(sorted(POLICIES)))
    early_stop = reentrant or draw(st.booleans(), label="early stop")
    sac = not reentrant and pol != "none" and draw(st.booleans(), label="sac")
    return Region(start, stop, tuple(args), tuple(closure), tuple(outputs), reentrant, pol,
                  early_stop, sac)


@st.composite
def programs(draw: Callable, inplace: bool = False, max_instrs: int = 8,
             max_regions: int = 2, max_leaves: int = 5) -> Program:
    """Random programs (see the module docstring). ``inplace`` adds in-place instructions:
    ``add_``/``mul_``/``fill_``/setitem on non-leaf registers, zeros buffers filled row by
    row (with views taken before the writes) and changes to index and mask tensors."""
    seed = draw(st.integers(0, 2**16), label="seed")
    g = _Gen(draw, seed, inplace, max_leaves)
    base = draw(_shape_strategy(), label="base shape")
    for _ in range(draw(st.integers(1, 2), label="leaves")):
        g.leaf(_small_shape(g, base) if g.flag() else draw(_shape_strategy()))
    n = draw(st.integers(1, max_instrs), label="instructions")
    for _ in range(n):
        if inplace and draw(st.integers(0, 2)) == 0:
            _, make = draw(st.sampled_from(INPLACE_MAKERS))
        else:
            _, make = draw(st.sampled_from(draw(st.sampled_from(FAMILIES))))
        if not make(g):
            _mk_unary("tanh")(g)

    # the loss reads the forced registers (buffers and their views) and a few others
    floats = [r for r in range(len(g.kinds)) if g.kinds[r] == "f"]
    outputs = list(dict.fromkeys(g.forced))
    extra = draw(st.lists(st.integers(0, len(floats) - 1), min_size=0 if outputs else 1,
                          max_size=2, unique=True), label="loss outputs")
    outputs += [floats[len(floats) - 1 - i] for i in extra if
                floats[len(floats) - 1 - i] not in outputs]
    out_shapes = tuple(g.shape(r) for r in outputs)

    def used_after(stop: int) -> set[int]:
        used = set(outputs)
        for ins in g.instrs[stop:]:
            used.update(ins.args)
        return used

    def outputs_after(start: int, stop: int) -> list[int]:
        used = used_after(stop)
        return [ins.out for ins in g.instrs[start:stop] if ins.out is not None
                and ins.out in used]

    regions: list[Region] = []
    taken = 0
    for _ in range(draw(st.integers(0, max_regions), label="regions")):
        if taken >= len(g.instrs):
            break
        start = draw(st.integers(taken, len(g.instrs) - 1))
        stop = draw(st.integers(start + 1, len(g.instrs)))
        while stop > start and not _region_ok(g, start, stop, outputs_after):
            stop -= 1
        if stop == start:
            continue
        reg = _draw_region(draw, g, start, stop, outputs_after(start, stop))
        if stop - start >= 2 and draw(st.booleans(), label="nested"):
            split = draw(st.integers(start + 1, stop - 1))
            if _region_ok(g, start, split, outputs_after):
                reg.inner = _draw_region(draw, g, start, split, outputs_after(start, split))
        regions.append(reg)
        taken = stop

    return Program(
        seed=seed, kinds=g.kinds, names=g.names, inputs=g.inputs, instrs=g.instrs,
        outputs=tuple(outputs), out_shapes=out_shapes, regions=regions,
        writeable=[bool(v.flags.writeable) for v in g.np],
        shapes=[v.shape for v in g.np], bounds=[tuple(b) for b in g.bounds],
        final=[v.tolist() if k != "f" else None for v, k in zip(g.np, g.kinds)],
    )


@st.composite
def mutations(draw: Callable, prog: Program) -> Mutation:
    """An in-place change, between forward and backward, of a register the checkpointed
    run also has: an intermediate, a leaf (changed under no_grad), an index or a mask
    tensor. Index tensors stay in bounds for all their uses; masks keep their count."""
    hidden = prog.internal()
    cands = [r for r in range(len(prog.kinds)) if r not in hidden and prog.shapes[r] != (0,)
             and (prog.kinds[r] != "f" or prog.writeable[r])]
    ints = [r for r in cands if prog.kinds[r] != "f"]
    floats = [r for r in cands if prog.kinds[r] == "f"]
    # index tensors are the interesting case: draw them as often as all floats together
    pool = ints if ints and draw(st.booleans(), label="index target") else floats
    target = pool[draw(st.integers(0, len(pool) - 1), label="target")]
    kind = prog.kinds[target]
    if kind != "f":
        values = np.array(prog.final[target])

        def choose(what: str, arg: Any) -> Any:
            if what == "form":
                return draw(st.integers(0, arg - 1))
            if what == "int":
                return draw(st.integers(*arg))
            perm = draw(st.permutations(range(arg.size)))
            return arg.ravel()[list(perm)].reshape(arg.shape).tolist()

        change = new_index_values(values, kind, list(prog.bounds[target]), choose)
        if change is None:
            return Mutation(target, "copy_", values.tolist())
        return Mutation(target, change[0], change[1])
    shape = prog.shapes[target]
    method = draw(st.sampled_from(["mul_", "add_", "fill_", "setitem"]), label="method")
    if method == "setitem" and shape:
        index = (draw(st.integers(0, shape[0] - 1)),)
        return Mutation(target, "setitem", draw(st.sampled_from([0.5, -2.0])), index)
    value = {"mul_": 2.0, "add_": 0.5, "fill_": 0.25, "setitem": 3.0}[method]
    return Mutation(target, "mul_" if method == "setitem" else method, value)

