"""The built-in workloads: each factory returns ``(model, example_input, loss_fn)``, the form
``memgrad tune`` and ``memgrad plan`` take, with ``model`` an ``nn.Sequential`` of stages.

Their defaults are the benchmark workloads W1-W3 (see docs/performance.md); smaller sizes
keep the command line quick.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import memgrad as mg
from memgrad import nn
from memgrad.nn import functional as F

__all__ = ["mlp", "transformer", "convnet", "TokenEmbedding", "LMHead", "BUILTIN"]

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


BUILTIN: dict[str, Callable[..., Workload]] = {
    "mlp": mlp,
    "transformer": transformer,
    "convnet": convnet,
}
