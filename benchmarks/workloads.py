"""Training-step time of the workloads W1-W3, in memgrad and (when installed) PyTorch.

A step is forward + loss + backward + an SGD step, float32, two threads:
- W1 deep MLP: 32 x (Linear(1024, 1024) + ReLU), batch 256, MSE loss;
- W2 causal transformer LM: 8 pre-LN blocks, d_model 256, 4 heads, seq 128, batch 16,
  vocab 256, cross-entropy;
- W3 conv net: 8 x (Conv2d(32, 32, 3, padding=1) + ReLU) on 16x32x32x32, MSE loss.

The two frameworks' steps are timed in turn within each repeat (interleaved), so that both
see the same load on a shared machine; the table gives the medians. Prints one JSON line
per measurement, then a table with the ratio memgrad / PyTorch: of the two medians, and
paired (the median and quartiles of the ratios of the steps timed in the same repeat).
The target is met when the paired ratios' upper quartile is at or below it, not met when
their lower quartile is above it, and a tie otherwise: the run cannot tell.

``--by-op 12`` then profiles ``--repeats`` more steps of each workload and prints the 12
ops that take the most time per step in each framework (memgrad's primitives, timed from the
dispatcher in; PyTorch's ops by their self CPU time in ``torch.profiler``).

Usage:
    python benchmarks/workloads.py [--repeats 5] [--only W1,W2,W3] [--small] [--by-op N]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
    workload_args,
)

import memgrad as mg
from memgrad import models

__all__ = ["WORKLOADS", "memgrad_step", "torch_step", "main"]

FULL = {
    "W1": ("mlp", dict(depth=32, width=1024, batch=256)),
    "W2": ("transformer", dict(blocks=8, d_model=256, heads=4, seq=128, batch=16, vocab=256)),
    "W3": ("convnet", dict(layers=8, channels=32, size=32, batch=16)),
}
SMALL = {
    "W1": ("mlp", dict(depth=8, width=256, batch=64)),
    "W2": ("transformer", dict(blocks=2, d_model=64, heads=4, seq=32, batch=4, vocab=64)),
    "W3": ("convnet", dict(layers=2, channels=8, size=16, batch=4)),
}
WORKLOADS = FULL
TARGETS = {"W1": 1.10, "W2": 1.0, "W3": 1.2}  # memgrad / PyTorch step time


def memgrad_step(name: str, sizes: dict) -> Callable[[], None]:
    """One training step of workload ``name`` in memgrad."""
    model, x, loss_fn = models.BUILTIN[name](**sizes)
    opt = mg.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x)).backward()
        opt.step()

    return step


def torch_step(torch: Any, name: str, sizes: dict) -> Callable[[], None]:
    """The same step in PyTorch eager on the CPU."""
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(*[nn.Sequential(nn.Linear(sizes["width"], sizes["width"]),
                                              nn.ReLU()) for _ in range(sizes["depth"])])
        x = torch.randn(sizes["batch"], sizes["width"])
        target = torch.randn(sizes["batch"], sizes["width"])

        def loss_fn(out: Any) -> Any:
            return F.mse_loss(out, target)
    elif name == "convnet":
        c, n = sizes["channels"], sizes["size"]
        model = nn.Sequential(*[nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU())
                                for _ in range(sizes["layers"])])
        x = torch.randn(sizes["batch"], c, n, n)
        target = torch.randn(sizes["batch"], c, n, n)

        def loss_fn(out: Any) -> Any:
            return F.mse_loss(out, target)
    else:
        model, x, loss_fn = _torch_transformer(torch, **sizes)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(x)).backward()
        opt.step()

    return step


def _torch_transformer(torch: Any, blocks: int, d_model: int, heads: int, seq: int, batch: int,
                       vocab: int) -> tuple:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * d_model, d_model))

        def forward(self, x: Any) -> Any:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(seq, d_model)
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.ln, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab)

        def forward(self, idx: Any) -> Any:
            h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            return self.head(self.ln(self.blocks(h)))

    tokens = torch.randint(0, vocab, (batch, seq + 1))
    x, target = tokens[:, :-1], tokens[:, 1:].reshape(-1)
    return LM(), x, lambda logits: F.cross_entropy(logits.reshape(-1, vocab), target)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    args = workload_args(__doc__, argv, repeats=5, warmup=2, by_op=True)
    machine = machine_info()
    torch = torch_or_none()
    sizes_of = SMALL if args.small else FULL
    rows, profiles = [], []
    for key in args.only.split(","):
        name, sizes = sizes_of[key]
        fns = {"memgrad": memgrad_step(name, sizes)}
        if torch is not None:
            fns["pytorch"] = torch_step(torch, name, sizes)
        rounds = interleaved_rounds(fns, args.repeats, args.warmup)
        ours, ours_best = median(rounds["memgrad"]), min(rounds["memgrad"])
        theirs = median(rounds["pytorch"]) if torch is not None else None
        ratio = ours / theirs if theirs else None
        paired = paired_ratio(rounds["memgrad"], rounds["pytorch"]) if torch is not None \
            else None
        emit({"bench": "workload", "workload": key, "model": name, "sizes": sizes,
              "memgrad_s": round(ours, 4), "memgrad_best_s": round(ours_best, 4),
              "pytorch_s": theirs and round(theirs, 4),
              "pytorch_best_s": theirs and round(min(rounds["pytorch"]), 4),
              "ratio": ratio and round(ratio, 3),
              "paired_ratio": paired and [round(r, 3) for r in paired],
              "target_ratio": TARGETS[key], "machine": machine})
        rows.append([key, ours, theirs, None if ratio is None else f"{ratio:.2f}x",
                     None if paired is None else paired_cell(paired),
                     f"{TARGETS[key]:.2f}x",
                     "-" if paired is None else verdict(paired[1], paired[2], TARGETS[key])])
        if args.by_op:
            profiles.append((key, by_op(fns, torch, args.repeats, "workload_by_op", machine)))
    print()
    print(f"training step, seconds (median of {args.repeats}, interleaved with PyTorch's); "
          f"{machine['cpu']}, "
          f"{machine['cores']} cores, BLAS {machine['blas']}")
    print(table(["workload", "memgrad", "pytorch", "ratio", "paired [q1, q3]", "target", ""],
                rows))
    if torch is None:
        print("pytorch: not installed, its column is skipped (a comparison only)")
    print_by_op(profiles, args.by_op)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
