"""Traced graphs that cover what the IR printer can print, and a text mutator for fuzzing
``memgrad.jit.parse`` with them."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

import memgrad as mg
from memgrad.checkpoint import checkpoint
from memgrad.ops.conv import conv2d_input_grad, conv2d_weight_grad, max_pool2d_backward
from memgrad.ops.movement import index_put, index_scatter
from memgrad.ops.nn import (
    gelu_backward,
    layer_norm_backward,
    layer_norm_weight_grad,
    nll_backward,
)
from memgrad.ops.reduce import log_softmax_backward, softmax_backward

__all__ = ["seed_cases", "seed_graphs", "mutate", "MUTATIONS", "INSERTS"]

F = mg.nn.functional


def _views_and_regions() -> tuple[Callable, tuple]:
    rng = np.random.default_rng(0)
    w1 = mg.tensor(rng.standard_normal((6, 5)), requires_grad=True)
    b1 = mg.tensor(rng.standard_normal(5), requires_grad=True)
    w2 = mg.tensor(rng.standard_normal((5, 5)), requires_grad=True)
    scale = mg.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=mg.float64)  # a small const

    def model(x):
        h = (x @ w1 + b1).relu()
        h = checkpoint(lambda z: (z @ w2).tanh() * scale, h)
        rows = h[[0, 2, 2]]
        return rows.sum(dim=1), h.mean(), h[:, 1:3].to(mg.float32)

    return model, (mg.tensor(rng.standard_normal((4, 6))),)


def _masks_and_indexing() -> tuple[Callable, tuple]:
    mask = mg.tensor(np.triu(np.full((10, 10), -np.inf), 1))  # 100 values: base64
    keep = mg.tensor(np.arange(10) % 3 == 0)

    def attend(x):
        p = (x + mask).softmax(dim=1)
        picked = p[keep]
        corner = p[None, ::-1, 2]
        pairs = p[mg.tensor([0, 9, -1]), mg.tensor([[1], [2]])]
        return (picked.sum() + corner.sum() * pairs.sum() + p[..., -1].amax(),)

    return attend, (mg.tensor(np.random.default_rng(1).standard_normal((10, 10))),)


class _Block(mg.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = mg.nn.Embedding(7, 8)
        self.norm = mg.nn.LayerNorm(8)
        self.fc = mg.nn.Linear(8, 16)
        self.out_proj = mg.nn.Linear(16, 7)

    def forward(self, tokens, noise):
        h = self.norm(self.embed(tokens))
        h = F.gelu(self.fc(h) + noise * np.float32(0.5), approximate="tanh")
        logits = self.out_proj(h).reshape(-1, 7)
        target = mg.tensor(np.array([1, 0, 6, 3, 3, 2], dtype=np.int64))
        return F.cross_entropy(logits, target, label_smoothing=0.1)


def _module_block() -> tuple[Callable, tuple]:
    mg.manual_seed(0)
    tokens = mg.tensor(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64))
    noise = mg.tensor(np.random.default_rng(2).standard_normal((2, 3, 16)).astype(np.float32))
    return _Block(), (tokens, noise)


def _convolution() -> tuple[Callable, tuple]:
    rng = np.random.default_rng(3)
    weight = mg.tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), requires_grad=True)
    bias = mg.tensor(np.zeros(4, dtype=np.float32), requires_grad=True)
    half = mg.tensor(np.float32(0.5))  # a 0-d const

    def net(x):
        y = F.conv2d(x, weight, bias, stride=1, padding=(1, 0), dilation=1, groups=1)
        y = F.max_pool2d(y, 2, stride=1, padding=1)
        y = mg.where(y > 0, y, y * 0.01).clamp(min=-1.0, max=3.0) ** 2
        return F.sigmoid(y.flatten(1)) * half

    return net, (mg.tensor(rng.standard_normal((2, 2, 6, 5)).astype(np.float32)),)


def _backward_primitives() -> tuple[Callable, tuple]:
    rng = np.random.default_rng(4)
    idx = np.array([[0, 0, 1]]).reshape(1, 1, 1, 3)
    at = mg.tensor(np.broadcast_to(idx, (2, 3, 2, 3)).copy())  # an int64 const: pool argmax
    target = mg.tensor(np.array([2, 0, 1], dtype=np.int64))

    def backwards(g, x, w):
        a = softmax_backward(g, x.softmax(dim=1), dim=1)
        b = log_softmax_backward(g, x.log_softmax(dim=0), dim=0)
        c = layer_norm_backward(g, x, None, ndim=1, eps=1e-5)
        d = layer_norm_weight_grad(g, x, ndim=1, eps=1e-5)
        e = gelu_backward(g, x, approximate="none")
        s = index_scatter(g[[0, 2]], shape=(3, 4), index=(np.array([0, 2]), Ellipsis))
        t = index_scatter(g[:, [1, 3]], shape=(3, 4), index=(slice(None), np.array([1, 3]), ...))
        u = index_put(x, g[0], index=(np.array([True, False, True]), Ellipsis))
        ce = nll_backward(g[:, 0], target, classes=4, ignore_index=-100, label_smoothing=0.1)
        kernel = w.reshape(3, 3, 2, 2)[:, :, :1, :1]
        gi = conv2d_input_grad(w, kernel, input_shape=(2, 3, 2, 3), stride=(1, 1),
                               padding=(0, 0), dilation=(1, 1), groups=1)
        gw = conv2d_weight_grad(w, w, weight_shape=(3, 3, 1, 1), stride=(1, 1),
                                padding=(0, 0), dilation=(1, 1), groups=1)
        mp = max_pool2d_backward(w[:, :, :1, :], at[:, :, :1, :], input_shape=(2, 3, 2, 3))
        grid = mg.cat([a, b, c, e, s, t, u, ce[..., :4]], dim=0).expand(2, 24, 4).permute(1, 0, 2)
        flags = ((x > 0) & (g <= 1)) | ~(x != g)
        return (grid.sum_to((24, 1, 4)) + d, mg.where(flags, x, 0.0), gi + mp, gw.sigmoid())

    shapes = ((3, 4), (3, 4), (2, 3, 2, 3))
    return backwards, tuple(mg.tensor(rng.standard_normal(s)) for s in shapes)


def seed_cases() -> list[tuple[Callable, tuple]]:
    """``(function, example inputs)`` pairs: views and a checkpoint region with a tuple
    output; bool masks and index arrays with a base64 const; a module with dotted parameter
    names, a long header and a numpy scalar; convolution and pooling; backward primitives
    called directly (scatters, kernels, a const of indices)."""
    return [
        _views_and_regions(),
        _masks_and_indexing(),
        _module_block(),
        _convolution(),
        _backward_primitives(),
    ]


def seed_graphs() -> list[mg.jit.Graph]:
    """The traced graphs of ``seed_cases``."""
    return [mg.jit.trace(fn, *inputs) for fn, inputs in seed_cases()]


# ---------------------------------------------------------------------------- mutations

MUTATIONS = ("delete", "insert", "replace", "duplicate_line", "swap_tokens")
# single characters and fragments an edit may insert
INSERTS = tuple("%[](){},:=-.+*#'\"\\ \n0123456789abexyz_") + (
    "**", "9**9**9", "__import__('os')", "...", "inf", "nan", "None", "True", "array(",
    "slice(", "float32", "b64:", "checkpoint f {", "}", "return %0", "1e308", "-", "%x",
    "[2, 3]", "(1,)", "99999999999999999999", "bool",
)
_TOKEN = re.compile(r"%[\w.]+|\w+|\S")


def mutate(text: str, edits: Sequence[tuple[str, int, int]]) -> str:
    """Apply ``edits``, each ``(kind, position, choice)`` with ``kind`` in ``MUTATIONS``;
    positions and choices are taken modulo what they index, so any integers do."""
    for kind, pos, choice in edits:
        if kind == "delete" and text:
            i = pos % len(text)
            text = text[:i] + text[i + 1 + choice % 3:]
        elif kind == "insert":
            i = pos % (len(text) + 1)
            text = text[:i] + INSERTS[choice % len(INSERTS)] + text[i:]
        elif kind == "replace" and text:
            i = pos % len(text)
            text = text[:i] + INSERTS[choice % len(INSERTS)] + text[i + 1:]
        elif kind == "duplicate_line":
            lines = text.split("\n")
            i = pos % len(lines)
            lines.insert(choice % (len(lines) + 1), lines[i])
            text = "\n".join(lines)
        elif kind == "swap_tokens":
            spans = [m.span() for m in _TOKEN.finditer(text)]
            if len(spans) >= 2:
                (a0, a1), (b0, b1) = sorted((spans[pos % len(spans)], spans[choice % len(spans)]))
                if a1 <= b0:
                    text = text[:a0] + text[b0:b1] + text[a1:b0] + text[a0:a1] + text[b1:]
    return text
