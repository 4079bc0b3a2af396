"""Self-attention in one op (NOTE [ Fused self-attention ] in memgrad/ops/nn.py) against the
same attention as separate ops (``MultiheadSelfAttention._composite``: three projections,
head views, two causal products and the attention softmax): one attention layer forward
and backward at the sizes of each model of ``benchmarks/small.py`` and of W2 (and
PyTorch's ``Linear`` + ``scaled_dot_product_attention`` + ``Linear`` when ``import torch``
works, a comparison only), the two small models' training steps, plain and checkpointed,
and W2's plain step; each case's variants in turn in one process.

Prints one JSON line per measurement, then a table of medians (and best) in milliseconds.

Usage:
    python benchmarks/attention.py [--repeats 30]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np
from checkpointing import make_step
from common import emit, interleaved, machine_info, table, torch_or_none
from small import MODELS, memgrad_batch, memgrad_model

import memgrad as mg
from memgrad import models, nn

__all__ = ["main"]

VARIANTS = ("fused", "composite", "pytorch")
W2 = dict(batch=16, seq=128, d_model=256, heads=4)  # models.transformer's defaults


def _composite(model: nn.Module) -> nn.Module:
    """``model`` with every self-attention module running its separate ops."""
    for m in model.modules():
        if isinstance(m, nn.MultiheadSelfAttention):
            m.forward = m._composite
    return model


def _layer_cases(sizes: dict, torch: Any) -> dict[str, Callable[[], None]]:
    """One causal attention layer forward and backward, by variant."""
    n, t, d, h = sizes["batch"], sizes["seq"], sizes["d_model"], sizes["heads"]
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((n, t, d)).astype(np.float32)
    gn = rng.standard_normal((n, t, d)).astype(np.float32)
    mg.manual_seed(0)
    fused = nn.MultiheadSelfAttention(d, h, causal=True)
    composite = nn.MultiheadSelfAttention(d, h, causal=True)
    composite.load_state_dict(fused.state_dict())
    x, g = mg.tensor(xn, requires_grad=True), mg.tensor(gn)

    def run(fn: Callable[[mg.Tensor], mg.Tensor]) -> Callable[[], None]:
        def step() -> None:
            fn(x).backward(g)
            x.grad = None

        return step

    cases = {"fused": run(fused), "composite": run(composite._composite)}
    if torch is not None:
        qkv, proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        tx, tg = torch.tensor(xn, requires_grad=True), torch.tensor(gn)

        def torch_step() -> None:
            q, k, v = (z.reshape(n, t, h, d // h).transpose(1, 2) for z in qkv(tx).chunk(3, -1))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            proj(y.transpose(1, 2).reshape(n, t, d)).backward(tg)
            tx.grad = None

        cases["pytorch"] = torch_step
    return cases


def _step_cases(name: str, sizes: dict) -> dict[str, dict[str, Callable[[], None]]]:
    x, loss_fn = memgrad_batch(sizes)
    return {
        f"{name} step, {mode}": {
            "fused": make_step(memgrad_model(sizes), x, loss_fn, segments),
            "composite": make_step(_composite(memgrad_model(sizes)), x, loss_fn, segments),
        }
        for mode, segments in (("plain", None), ("checkpointed", sizes["blocks"]))
    }


def main(argv: list[str] | None = None) -> int:
    """Measure, print the JSON lines and the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs (default: 30)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    machine = machine_info()
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(machine["cores_available"])
    cases = {}
    for name, sizes in MODELS.items():
        cases[f"{name} attention layer"] = _layer_cases(sizes, torch)
        cases.update(_step_cases(name, sizes))
    cases["W2 attention layer"] = _layer_cases(W2, torch)
    fused, x, loss_fn = models.transformer()
    composite = _composite(models.transformer()[0])
    cases["W2 step, plain"] = {"fused": make_step(fused, x, loss_fn, None),
                               "composite": make_step(composite, x, loss_fn, None)}
    rows = []
    for label, fns in cases.items():
        times = interleaved(fns, args.repeats, 2, lead=1)
        ms = {k: (best * 1e3, median * 1e3) for k, (best, median) in times.items()}
        emit({"bench": "attention", "case": label,
              **{f"{k}_ms": round(v[1], 4) for k, v in ms.items()},
              "repeats": args.repeats, "machine": machine})
        cells = [f"{ms[k][1]:.3f} ({ms[k][0]:.3f})" if k in ms else "-" for k in VARIANTS]
        rows.append([label, *cells, f"{ms['fused'][1] / ms['composite'][1]:.2f}x"])
    print()
    print(f"self-attention in one op, ms, median (best) of {args.repeats}, interleaved; "
          f"{machine['cpu']}, {machine['cores']} cores, BLAS {machine['blas']}")
    print(table(["case", *VARIANTS, "fused / composite"], rows))
    if torch is None:
        print("pytorch: not installed, its column is skipped (a comparison only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
