"""Model definitions the command line, the benchmarks and the tests share.

The built-in workloads: each factory returns ``(model, example_input, loss_fn)``, the form
``memgrad tune`` and ``memgrad plan`` take, with ``model`` an ``nn.Sequential`` of stages.
Their defaults are the benchmark workloads W1-W3 (see docs/performance.md); smaller sizes
keep the command line quick. And the byte-level language model ``memgrad train`` trains
(``build_lm``), with its loss and batches.

Example:
    >>> from memgrad.models import BUILTIN
    >>> model, x, loss_fn = BUILTIN["mlp"](depth=2, width=8, batch=4)
    >>> loss_fn(model(x)).shape
    ()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import memgrad as mg
from memgrad import nn
from memgrad.nn import functional as F

__all__ = [
    "mlp",
    "transformer",
    "convnet",
    "gpt",
    "GPT",
    "TokenEmbedding",
    "LMHead",
    "BUILTIN",
    "VOCAB",
    "build_lm",
    "lm_parameters",
    "sample_batch",
    "lm_loss",
]

VOCAB = 256  # bytes: the vocabulary of the language model of ``memgrad train``

Workload = tuple[nn.Sequential, mg.Tensor, Callable[[mg.Tensor], mg.Tensor]]


def _generator(seed: int) -> np.random.Generator:
    mg.manual_seed(seed)
    return np.random.default_rng(seed)


def mlp(depth: int = 32, width: int = 1024, batch: int = 256, seed: int = 0) -> Workload:
    """W1: ``depth`` x (Linear(width, width) + ReLU), MSE loss against a fixed target. The
    stages are the ``depth`` blocks."""
    rng = _generator(seed)
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]
    )
    x = mg.tensor(rng.standard_normal((batch, width), dtype=np.float32))
    target = mg.tensor(rng.standard_normal((batch, width), dtype=np.float32))
    return model, x, lambda out: F.mse_loss(out, target)


class TokenEmbedding(nn.Module):
    """Token plus learned position embeddings: (batch, seq) ints -> (batch, seq, d_model)."""

    def __init__(self, vocab: int, d_model: int, max_seq: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_seq, d_model)

    def forward(self, idx: mg.Tensor) -> mg.Tensor:
        seq = idx.shape[-1]
        return self.tokens(idx) + self.positions(mg.arange(seq))


class LMHead(nn.Module):
    """Final LayerNorm and the projection to the vocabulary."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, h: mg.Tensor) -> mg.Tensor:
        return self.proj(self.norm(h))


def transformer(
    blocks: int = 8,
    d_model: int = 256,
    heads: int = 4,
    seq: int = 128,
    batch: int = 16,
    vocab: int = 256,
    seed: int = 0,
) -> Workload:
    """W2: a causal transformer language model (pre-LN blocks), cross-entropy on the next
    token of random sequences."""
    rng = _generator(seed)
    model = nn.Sequential(
        TokenEmbedding(vocab, d_model, seq),
        *[nn.TransformerBlock(d_model, heads) for _ in range(blocks)],
        LMHead(d_model, vocab),
    )
    tokens = rng.integers(0, vocab, size=(batch, seq + 1))
    x = mg.tensor(tokens[:, :-1])
    target = mg.tensor(tokens[:, 1:].reshape(-1))
    return model, x, lambda logits: F.cross_entropy(logits.reshape(-1, vocab), target)


def convnet(
    layers: int = 8, channels: int = 32, size: int = 32, batch: int = 16, seed: int = 0
) -> Workload:
    """W3: ``layers`` x (Conv2d(channels, channels, 3, padding=1) + ReLU), MSE loss. The
    stages are the ``layers`` blocks."""
    rng = _generator(seed)
    model = nn.Sequential(
        *[nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU())
          for _ in range(layers)]
    )
    x = mg.tensor(rng.standard_normal((batch, channels, size, size), dtype=np.float32))
    target = mg.tensor(rng.standard_normal((batch, channels, size, size), dtype=np.float32))
    return model, x, lambda out: F.mse_loss(out, target)


class GPT(nn.Module):
    """A nanoGPT-shaped language model written as one Module: token and position embeddings,
    a ModuleList of pre-LN blocks run in a loop, a final LayerNorm and a head tied to the
    token embedding (``logits = ln(h) @ wte.T``)."""

    def __init__(self, vocab: int, seq: int, d_model: int, heads: int, blocks: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.h = nn.ModuleList([nn.TransformerBlock(d_model, heads) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, idx: mg.Tensor) -> mg.Tensor:
        x = self.wte(idx) + self.wpe(mg.arange(idx.shape[-1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T


def gpt(
    blocks: int = 8,
    d_model: int = 256,
    heads: int = 4,
    seq: int = 128,
    batch: int = 16,
    vocab: int = 256,
    seed: int = 0,
) -> tuple[GPT, mg.Tensor, Callable[[mg.Tensor], mg.Tensor]]:
    """W2's sizes as a nanoGPT-shaped ``GPT`` (one Module, not a Sequential), with
    cross-entropy on the next token of random sequences.

    Example:
        >>> model, x, loss_fn = gpt(blocks=1, d_model=16, heads=2, seq=8, batch=2, vocab=32)
        >>> loss_fn(model(x)).shape
        ()
    """
    rng = _generator(seed)
    model = GPT(vocab, seq, d_model, heads, blocks)
    tokens = rng.integers(0, vocab, size=(batch, seq + 1))
    x = mg.tensor(tokens[:, :-1])
    target = mg.tensor(tokens[:, 1:].reshape(-1))
    return model, x, lambda logits: F.cross_entropy(logits.reshape(-1, vocab), target)


BUILTIN: dict[str, Callable[..., Any]] = {
    "mlp": mlp,
    "transformer": transformer,
    "convnet": convnet,
    "gpt": gpt,
}


# ---------------------------------------------------------------------------- language model


def build_lm(d_model: int, heads: int, blocks: int, seq: int) -> nn.Sequential:
    """A byte-level causal transformer language model as a chain of stages: token and
    position embeddings, ``blocks`` pre-LN transformer blocks, and the LayerNorm + linear
    head, for contexts of up to ``seq`` bytes.

    Example:
        >>> model = build_lm(d_model=32, heads=4, blocks=2, seq=16)
        >>> len(model), model(mg.zeros(3, 16, dtype=mg.int64)).shape
        (4, (3, 16, 256))
    """
    return nn.Sequential(
        TokenEmbedding(VOCAB, d_model, seq),
        *[nn.TransformerBlock(d_model, heads) for _ in range(blocks)],
        LMHead(d_model, VOCAB),
    )

def lm_parameters(d_model: int, blocks: int, seq: int) -> int:
    """The number of parameters of ``build_lm(d_model, heads, blocks, seq)`` (the heads
    split ``d_model``, so they change nothing): embeddings, ``blocks`` times the block's
    attention, MLP and two LayerNorms, and the head.

    Example:
        >>> model = build_lm(d_model=32, heads=4, blocks=2, seq=16)
        >>> lm_parameters(32, 2, 16) == sum(p.numel() for p in model.parameters())
        True
    """
    embeddings = (VOCAB + seq) * d_model
    block = 12 * d_model**2 + 13 * d_model  # qkv and out projections, MLP 4x, 2 LayerNorms
    head = 2 * d_model + d_model * VOCAB + VOCAB
    return embeddings + blocks * block + head

def sample_batch(
    tokens: np.ndarray, batch: int, seq: int, rng: np.random.Generator
) -> tuple[mg.Tensor, mg.Tensor]:
    """``batch`` random windows of ``seq`` bytes and, for each position, the byte after it.

    Returns:
        ``(x, y)``: int64 tensors of shapes ``(batch, seq)`` and ``(batch * seq,)``.

    Example:
        >>> x, y = sample_batch(np.arange(100) % 256, 2, 8, np.random.default_rng(0))
        >>> x.shape, y.shape, int(y[0].item()) == int(x[0, 1].item())
        ((2, 8), (16,), True)
    """
    starts = rng.integers(0, len(tokens) - seq - 1, size=batch)
    windows = np.stack([tokens[s : s + seq + 1] for s in starts]).astype(np.int64)
    return mg.tensor(windows[:, :-1]), mg.tensor(windows[:, 1:].reshape(-1))

def lm_loss(y: mg.Tensor) -> Callable[[mg.Tensor], mg.Tensor]:
    """The loss of a batch: cross-entropy of the logits against the next bytes ``y``.

    Example:
        >>> loss = lm_loss(mg.zeros(4, dtype=mg.int64))(mg.zeros(2, 2, VOCAB))
        >>> round(loss.item(), 4)  # uniform logits: log(256)
        5.5452
    """
    return lambda logits: F.cross_entropy(logits.reshape(-1, VOCAB), y)
