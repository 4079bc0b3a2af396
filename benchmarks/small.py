"""Training steps of two small transformer language models, memgrad against PyTorch.

- ``nanogpt``: nanoGPT's shape at its smallest: 4 pre-LN blocks, 4 heads, d_model 64,
  context 32, batch 8, a 65-symbol vocabulary (Shakespeare's characters);
- ``train``: the model of ``memgrad train`` at its defaults (``memgrad.models.build_lm``:
  4 blocks, 4 heads, d_model 64, context 64, batch 16, the 256 bytes).

A step is ``zero_grad`` + forward + cross-entropy + backward + an AdamW step (float32),
plain and with every block checkpointed (``mg.checkpoint.checkpoint`` / PyTorch's,
non-reentrant). When ``import torch`` works, the same model is built in PyTorch with the
same weights (copied by parameter name) and the same batch, its steps timed in the same
process, interleaved with memgrad's (each repeat times every case in turn) so that both
see the same load on a shared machine; the first step's losses are printed side by side.

Prints one JSON line per measurement, then a table with the ratio memgrad / PyTorch: of
the two medians, and paired (the median and quartiles of the ratios of the steps timed in
the same repeat), and whether the 1.1x target is met (the paired ratios' upper quartile at
or below it), not met (their lower quartile above it) or a tie (the run cannot tell).

Usage:
    python benchmarks/small.py [--repeats 20] [--warmup 3] [--only nanogpt,train]
                               [--clock wall|cpu] [--threads N] [--lead N] [--by-op N]

``--clock cpu`` times with the process's CPU time (all its threads) instead of the wall
clock, and ``--threads 1`` runs PyTorch on one thread (set ``OPENBLAS_NUM_THREADS=1`` for
NumPy's BLAS too): on a machine shared with other jobs that compares the two frameworks'
work rather than the load. Each timed step follows ``--lead`` untimed steps of the same
case (default 3), so that a step follows steps of its own, as in a training loop's steady
state; ``--lead 0`` times each step right after the previous case's (the other framework's
or the other mode's) and the full garbage collection the rounds make before each case: a
cold start, which the figures before 2026-12-07's seventh session measured.
``--by-op 12`` then profiles ``--repeats`` more steps of each case and prints the 12 ops
that take the most time per step in each framework (memgrad's primitives, timed from the
dispatcher in; PyTorch's ops by their self CPU time in ``torch.profiler``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import (
    by_op,
    emit,
    interleaved_rounds,
    machine_info,
    median,
    paired_cell,
    paired_ratio,
    print_by_op,
    table,
    torch_or_none,
    verdict,
)

import memgrad as mg
from memgrad import models, nn
from memgrad.checkpoint import checkpoint
from memgrad.nn import functional as F

__all__ = ["MODELS", "memgrad_model", "memgrad_batch", "torch_model", "main"]

MODELS = {
    "nanogpt": dict(vocab=65, d_model=64, heads=4, blocks=4, seq=32, batch=8, lr=1e-3),
    "train": dict(vocab=models.VOCAB, d_model=64, heads=4, blocks=4, seq=64, batch=16,
                  lr=3e-3),
}
TARGET = 1.1  # memgrad / PyTorch step time


def _batch(sizes: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, sizes["vocab"], size=(sizes["batch"], sizes["seq"] + 1))
    return tokens[:, :-1].astype(np.int64), tokens[:, 1:].reshape(-1).astype(np.int64)


def memgrad_batch(sizes: dict) -> tuple[Any, Callable[[Any], Any]]:
    """The batch of ``_batch`` as memgrad's input tokens and the cross-entropy loss of the
    model's logits on its targets: ``(x, loss_fn)``."""
    xn, yn = _batch(sizes)
    x, y = mg.tensor(xn), mg.tensor(yn)

    def loss_fn(out: Any) -> Any:
        return F.cross_entropy(out.reshape(-1, sizes["vocab"]), y)

    return x, loss_fn


def memgrad_model(sizes: dict) -> nn.Sequential:
    """The model in memgrad: embeddings, the blocks, the head (``models.build_lm``'s
    stages, for any vocabulary)."""
    mg.manual_seed(0)
    d = sizes["d_model"]
    return nn.Sequential(
        models.TokenEmbedding(sizes["vocab"], d, sizes["seq"]),
        *[nn.TransformerBlock(d, sizes["heads"]) for _ in range(sizes["blocks"])],
        models.LMHead(d, sizes["vocab"]),
    )


def _memgrad_step(sizes: dict, checkpointed: bool) -> tuple[Callable[[], Any], Any]:
    model = memgrad_model(sizes)
    x, loss_fn = memgrad_batch(sizes)
    stages = list(model)
    opt = mg.optim.AdamW(model.parameters(), lr=sizes["lr"])

    def forward() -> Any:
        h = stages[0](x)
        for block in stages[1:-1]:
            h = checkpoint(block, h) if checkpointed else block(h)
        return loss_fn(stages[-1](h))

    def step() -> Any:
        opt.zero_grad()
        loss = forward()
        loss.backward()
        opt.step()
        return loss.item()

    return step, model


def torch_model(torch: Any, sizes: dict, weights: dict[str, np.ndarray]) -> Any:
    """The same model in PyTorch, its parameters named as memgrad's and set to
    ``weights``."""
    tnn = torch.nn
    d, heads, vocab, seq = sizes["d_model"], sizes["heads"], sizes["vocab"], sizes["seq"]

    class Attention(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out_proj = tnn.Linear(d, 3 * d), tnn.Linear(d, d)

        def forward(self, x: Any) -> Any:
            b, t, e = x.shape
            q, k, v = (z.reshape(b, t, heads, e // heads).transpose(1, 2)
                       for z in self.qkv(x).chunk(3, -1))
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_proj(a.transpose(1, 2).reshape(b, t, e))

    class Block(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.attn, self.ln2 = tnn.LayerNorm(d), Attention(), tnn.LayerNorm(d)
            self.mlp = tnn.Sequential(tnn.Linear(d, 4 * d), tnn.GELU(approximate="tanh"),
                                      tnn.Linear(4 * d, d), tnn.Dropout(0.0))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Embedding(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = tnn.Embedding(vocab, d), tnn.Embedding(seq, d)

        def forward(self, idx: Any) -> Any:
            return self.tokens(idx) + self.positions(torch.arange(idx.shape[-1]))

    class Head(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.proj = tnn.LayerNorm(d), tnn.Linear(d, vocab)

        def forward(self, h: Any) -> Any:
            return self.proj(self.norm(h))

    model = tnn.Sequential(Embedding(), *[Block() for _ in range(sizes["blocks"])], Head())
    params = dict(model.named_parameters())
    if set(params) != set(weights):
        raise RuntimeError(f"small.py: parameter names differ: {set(params) ^ set(weights)}")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.from_numpy(weights[name]))
    return model


def _torch_step(torch: Any, sizes: dict, weights: dict, checkpointed: bool) -> Callable:
    from torch.utils.checkpoint import checkpoint

    model = torch_model(torch, sizes, weights)
    xn, yn = _batch(sizes)
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)
    stages = list(model)
    opt = torch.optim.AdamW(model.parameters(), lr=sizes["lr"])

    def step() -> Any:
        opt.zero_grad()
        h = stages[0](x)
        for block in stages[1:-1]:
            h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
        logits = stages[-1](h).reshape(-1, sizes["vocab"])
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed steps (default: 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--only", default="nanogpt,train", help="models to run")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or this process's CPU time (default: wall)")
    parser.add_argument("--threads", type=int, default=2,
                        help="PyTorch's intra-op threads (default: 2)")
    parser.add_argument("--lead", type=int, default=3,
                        help="untimed steps of the same case before each timed one (default: 3)")
    parser.add_argument("--by-op", type=int, default=0, metavar="N",
                        help="then print the N ops that take the most time per step")
    args = parser.parse_args(argv)
    if args.lead < 0:
        parser.error(f"--lead: expected a count >= 0, got {args.lead}")
    if args.by_op < 0:
        parser.error(f"--by-op: expected a count >= 0, got {args.by_op}")
    names = args.only.split(",")
    for name in names:
        if name not in MODELS:
            parser.error(f"--only: unknown model {name!r}; choose from {', '.join(MODELS)}")
    machine = machine_info()
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows, profiles = [], []
    for name in names:
        sizes = MODELS[name]
        for checkpointed in (False, True):
            fns: dict[str, Callable[[], Any]] = {}
            fns["memgrad"], model = _memgrad_step(sizes, checkpointed)
            if torch is not None:
                weights = {k: p.numpy().copy() for k, p in model.named_parameters()}
                fns["pytorch"] = _torch_step(torch, sizes, weights, checkpointed)
            first = {k: fn() for k, fn in fns.items()}  # the same weights: the same loss
            t = interleaved_rounds(fns, args.repeats, args.warmup, clock, args.lead)
            ours = median(t["memgrad"])
            theirs = median(t["pytorch"]) if "pytorch" in t else None
            ratio = ours / theirs if theirs else None
            paired = paired_ratio(t["memgrad"], t["pytorch"]) if "pytorch" in t else None
            mode = "checkpointed" if checkpointed else "plain"
            emit({"bench": "small", "model": name, "mode": mode, "sizes": sizes,
                  "memgrad_s": round(ours, 5), "memgrad_best_s": round(min(t["memgrad"]), 5),
                  "pytorch_s": theirs and round(theirs, 5),
                  "pytorch_best_s": theirs and round(min(t["pytorch"]), 5),
                  "ratio": ratio and round(ratio, 3),
                  "paired_ratio": paired and [round(r, 3) for r in paired],
                  "first_loss": first,
                  "target_ratio": TARGET, "repeats": args.repeats, "clock": args.clock,
                  "torch_threads": args.threads, "lead": args.lead, "machine": machine})
            rows.append([name, mode, ours, theirs, None if ratio is None else f"{ratio:.2f}x",
                         None if paired is None else paired_cell(paired),
                         "-" if paired is None else verdict(paired[1], paired[2], TARGET),
                         f"{first['memgrad']:.5f}",
                         f"{first['pytorch']:.5f}" if "pytorch" in first else None])
            if args.by_op:
                tables = by_op(fns, torch, args.repeats, "small_by_op", machine)
                profiles.append((f"{name} {mode}", tables))
    print()
    lead = f", {args.lead} untimed before each" if args.lead else ""
    print(f"training step, seconds ({args.clock} clock, median of {args.repeats}, interleaved"
          f"{lead}); "
          f"{machine['cpu']}, "
          f"{machine['cores']} cores, BLAS {machine['blas']}")
    print(table(["model", "mode", "memgrad", "pytorch", "ratio", "paired [q1, q3]",
                 f"target {TARGET:.1f}x", "loss (mg)", "loss (pt)"], rows))
    if torch is None:
        print("pytorch: not installed, its column is skipped (a comparison only)")
    print_by_op(profiles, args.by_op)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
