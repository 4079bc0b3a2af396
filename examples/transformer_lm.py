"""Train a tiny byte-level transformer language model with activation checkpointing.

The text is the source of Python's own ``textwrap`` module (nothing is downloaded). The model
is an ``nn.Sequential`` of stages (embeddings, transformer blocks, head), so
``checkpoint_sequential`` can cut it: here into 2 segments, the first recomputed in backward.
A longer run with a memory budget, a progress bar and samples: ``memgrad train``.

Run: python examples/transformer_lm.py
"""

from __future__ import annotations

import inspect
import textwrap

import numpy as np

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.checkpoint import checkpoint_sequential

VOCAB, D_MODEL, SEQ, BATCH, STEPS = 256, 32, 32, 8, 20


class Embed(nn.Module):
    """Byte and position embeddings: (batch, seq) ints -> (batch, seq, D_MODEL)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, D_MODEL)
        self.positions = nn.Embedding(SEQ, D_MODEL)

    def forward(self, idx: mg.Tensor) -> mg.Tensor:
        out: mg.Tensor = self.tokens(idx) + self.positions(mg.arange(idx.shape[-1]))
        return out


class Head(nn.Module):
    """LayerNorm, then logits over the bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(D_MODEL)
        self.proj = nn.Linear(D_MODEL, VOCAB)

    def forward(self, h: mg.Tensor) -> mg.Tensor:
        logits: mg.Tensor = self.proj(self.norm(h))
        return logits


mg.manual_seed(0)
rng = np.random.default_rng(0)
data = np.frombuffer(inspect.getsource(textwrap).encode(), dtype=np.uint8)
model = nn.Sequential(Embed(), nn.TransformerBlock(D_MODEL, 4), nn.TransformerBlock(D_MODEL, 4),
                      Head())
opt = mg.optim.AdamW(model.parameters(), lr=1e-2)

losses = []
for step in range(STEPS):
    starts = rng.integers(0, len(data) - SEQ - 1, size=BATCH)
    windows = np.stack([data[s : s + SEQ + 1] for s in starts]).astype(np.int64)
    x, y = mg.tensor(windows[:, :-1]), mg.tensor(windows[:, 1:].reshape(-1))
    opt.zero_grad()
    logits = checkpoint_sequential(model, 2, x)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if step % 5 == 0 or step == STEPS - 1:
        print(f"step {step:3d}  loss {loss.item():.3f}")

late = sum(losses[-5:]) / 5
print(f"trained on {len(data):,} bytes of textwrap.py; loss {losses[0]:.3f} at first, "
      f"{late:.3f} over the last 5 steps")
print(f"loss went down: {late < losses[0] - 1.0}")
