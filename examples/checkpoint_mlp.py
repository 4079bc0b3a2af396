"""Checkpoint a deep MLP with ``checkpoint_sequential`` and see what it saves.

Runs one training step (forward, loss, backward) of 16 blocks of Linear + ReLU twice: plainly,
and cut into 4 segments of which the first 3 are checkpointed (their activations are dropped
in forward and recomputed in backward). ``mg.memory.track()`` measures the peak bytes of
tensor storage above the step's start; the gradients of the two runs are compared exactly.

Run: python examples/checkpoint_mlp.py
"""

from __future__ import annotations

import numpy as np

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.checkpoint import checkpoint_sequential

mg.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(16)])
x = mg.randn(512, 256)
target = mg.randn(512, 256)


def step(segments: int | None) -> tuple[int, dict[str, np.ndarray]]:
    """One step from cleared gradients: its peak bytes and a copy of every gradient."""
    model.zero_grad()
    with mg.memory.track() as t:
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
        loss = F.mse_loss(out, target)
        del out
        loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        assert p.grad is not None  # every parameter is used
        grads[n] = p.grad.numpy().copy()
    return t.peak_above_start, grads


plain_peak, plain_grads = step(None)
ckpt_peak, ckpt_grads = step(4)
same = all(np.array_equal(plain_grads[n], ckpt_grads[n]) for n in plain_grads)

print(f"activations of one block: {512 * 256 * 4:,} bytes; parameters' gradients: "
      f"{sum(p.numel() * 4 for p in model.parameters()):,} bytes")
print(f"peak without checkpointing:      {plain_peak:>12,} bytes")
print(f"peak with 4 segments:            {ckpt_peak:>12,} bytes "
      f"({100 * ckpt_peak / plain_peak:.0f}% of plain)")
print(f"checkpointing lowers the peak: {ckpt_peak < plain_peak}")
print(f"gradients match exactly: {same}")
