"""``memgrad train``: a small causal transformer language model trained on bytes of the
Python standard library's own source, checkpointed with the planner's segmentation under a
memory budget.

Example:
    >>> text, files = stdlib_corpus(max_bytes=10_000)
    >>> len(text), files[0].name
    (10000, 'textwrap.py')
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

import memgrad as mg
from memgrad import nn
from memgrad.checkpoint import Plan, plan, plan_from_profile
from memgrad.cli.measure import accounting, compare_grads, measure_step, run_step, time_step
from memgrad.cli.models import LMHead, TokenEmbedding
from memgrad.cli.output import CliError, check_writable, console
from memgrad.cli.sizes import SizeError, format_bytes, parse_size, size_at_least
from memgrad.errors import PlanError
from memgrad.nn import functional as F

__all__ = [
    "VOCAB",
    "STDLIB_FILES",
    "stdlib_corpus",
    "build_lm",
    "sample_batch",
    "lm_loss",
    "generate",
    "run_train",
]

VOCAB = 256  # bytes
# read in this order until the corpus is full; all are in the standard library of every
# Python memgrad supports, and are ordinary, well-commented code
STDLIB_FILES = (
    "textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py", "bisect.py", "heapq.py",
    "colorsys.py", "queue.py", "sched.py", "difflib.py", "pprint.py", "fractions.py",
    "statistics.py", "dataclasses.py", "functools.py", "contextlib.py", "argparse.py",
)
CORPUS_BYTES = 300_000
PERCENT_OF = "the plain step's peak"


def stdlib_corpus(max_bytes: int = CORPUS_BYTES) -> tuple[bytes, list[Path]]:
    """The first ``max_bytes`` bytes of ``STDLIB_FILES`` from this Python's standard library
    (the directory of the ``os`` module), concatenated in a fixed order.

    Returns:
        ``(text, files)``: the bytes and the files they came from.

    Raises:
        CliError: when this Python was installed without its library's source files.

    Example:
        >>> text, files = stdlib_corpus(max_bytes=100)
        >>> len(text), len(files)
        (100, 1)
    """
    stdlib = Path(os.__file__).resolve().parent
    parts, files, size = [], [], 0
    for name in STDLIB_FILES:
        path = stdlib / name
        if size >= max_bytes or not path.is_file():
            continue
        data = path.read_bytes()[: max_bytes - size]
        parts.append(data)
        files.append(path)
        size += len(data)
    if not files:
        raise CliError(
            f"the standard library's source files are missing from {stdlib}; install this "
            "Python's full standard library (its .py files)"
        )
    return b"".join(parts), files


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


def generate(
    model: nn.Sequential,
    prompts: np.ndarray,
    length: int,
    seq: int,
    temperature: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Continue each row of ``prompts`` (bytes, shape ``(k, p)``) by ``length`` bytes,
    sampling from the model's distribution at ``temperature`` (0 is greedy), with the last
    ``seq`` bytes as context. Runs under ``mg.no_grad()``.

    Returns:
        The continuations, shape ``(k, length)``.

    Example:
        >>> model = build_lm(d_model=16, heads=2, blocks=1, seq=8)
        >>> out = generate(model, np.zeros((2, 3), np.int64), 5, 8, 0.0, np.random.default_rng(0))
        >>> out.shape
        (2, 5)
    """
    context = np.asarray(prompts, dtype=np.int64)
    with mg.no_grad():
        for _ in range(length):
            logits = model(mg.tensor(context[:, -seq:])).numpy()[:, -1, :].astype(np.float64)
            if temperature <= 0:
                nxt = logits.argmax(axis=-1)
            else:
                z = logits / temperature
                p = np.exp(z - z.max(axis=-1, keepdims=True))
                p /= p.sum(axis=-1, keepdims=True)
                nxt = np.array([rng.choice(VOCAB, p=row) for row in p])
            context = np.concatenate([context, nxt[:, None]], axis=1)
    return context[:, prompts.shape[1]:]


def _choose_plan(
    stages: list[nn.Module], x: mg.Tensor, budget_text: str | None, plain_peak: int, out: Console
) -> Plan:
    """The plan under ``--budget`` (default: half the plain peak). An impossible ``--budget``
    is an error; an impossible default falls back to the least peak, and says so."""
    budget = parse_size(budget_text or "50%", PERCENT_OF).resolve(plain_peak)
    try:
        return plan(stages, x, budget)
    except PlanError:
        least = plan(stages, x)
    if budget_text is not None:
        raise CliError(
            f"no segmentation fits --budget {budget_text} ({format_bytes(budget)}, {budget:,} "
            f"bytes); the smallest feasible budget for this model is "
            f"{format_bytes(least.predicted_peak)} ({least.predicted_peak:,} bytes): pass "
            f"--budget {size_at_least(least.predicted_peak)} or more, or shrink --batch or --seq"
        )
    out.print(
        f"[yellow]half the plain peak ({format_bytes(budget)}) is less than any segmentation "
        f"needs; using the smallest feasible budget, {format_bytes(least.predicted_peak)}[/]"
    )
    return plan_from_profile(least.profiles, least.predicted_peak)


def _train(
    model: nn.Sequential, chosen: Plan, tokens: np.ndarray, args: argparse.Namespace,
    rng: np.random.Generator, out: Console,
) -> list[float]:
    """The training loop, under a progress bar; returns the loss of every step. Memory
    accounting must be on (``accounting()``), so that tracking each step costs little."""
    opt = mg.optim.AdamW(model.parameters(), lr=args.lr)
    every = args.log_every or max(1, args.steps // 10)
    tokens_per_step = args.batch * args.seq
    peak, rate, losses = 0, 0.0, []
    columns = (
        TextColumn("[bold]train[/]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} tok/s"),
        TextColumn("peak {task.fields[peak]}"), TimeElapsedColumn(), TimeRemainingColumn(),
    )
    with Progress(*columns, console=out) as progress:
        task = progress.add_task("train", total=args.steps, loss="-", rate="-", peak="-")
        for step in range(1, args.steps + 1):
            x, y = sample_batch(tokens, args.batch, args.seq, rng)
            start = time.perf_counter()
            opt.zero_grad()
            with mg.memory.track() as trace:
                loss = run_step(model, x, lm_loss(y), chosen)
            opt.step()
            now = tokens_per_step / (time.perf_counter() - start)
            rate = now if step == 1 else 0.9 * rate + 0.1 * now
            losses.append(loss)
            peak = max(peak, trace.peak_above_start)
            progress.update(task, advance=1, loss=f"{loss:.3f}", rate=f"{rate:,.0f}",
                            peak=format_bytes(peak))
            if step % every == 0 or step in (1, args.steps):
                progress.console.print(
                    f"step {step:5d}/{args.steps}  loss {loss:.4f}  {rate:8,.0f} tok/s  "
                    f"peak {format_bytes(trace.peak_above_start)}"
                )
    opt.zero_grad()
    return losses


def _compare(
    model: nn.Sequential, chosen: Plan, x: mg.Tensor, y: mg.Tensor, out: Console
) -> None:
    """Print the planned and the plain step side by side, on the same batch and weights."""
    loss_fn = lm_loss(y)
    with accounting():
        plain = measure_step(model, x, loss_fn, None)
        planned = measure_step(model, x, loss_fn, chosen)
    diff = compare_grads(plain.grads, planned.grads)
    plain_s = planned_s = float("inf")
    for _ in range(2):  # interleaved, so that a change in the machine's load hits both alike
        plain_s = min(plain_s, time_step(model, x, loss_fn, None))
        planned_s = min(planned_s, time_step(model, x, loss_fn, chosen))
    table = Table(title="one step (forward + loss + backward), same batch and weights")
    for name in ("step", "segments", "peak", "predicted", "time", "gradients"):
        table.add_column(name, justify="left" if name in ("step", "gradients") else "right",
                         no_wrap=True)
    table.add_row("plain", "1", format_bytes(plain.peak), "-", f"{plain_s * 1e3:.0f} ms",
                  "reference")
    table.add_row(
        "planned", str(chosen.segments),
        f"{format_bytes(planned.peak)} ({100 * planned.peak / plain.peak:.0f}%)",
        format_bytes(chosen.predicted_peak),
        f"{planned_s * 1e3:.0f} ms ({100 * (planned_s / plain_s - 1):+.0f}%)",
        "exact" if diff == 0 else f"differ by up to {diff:.2g}",
    )
    out.print(table)


def _printable(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").replace("\t", "    ")
    return "".join(c if c.isprintable() or c == "\n" else " " for c in text)


def _samples(model: nn.Sequential, held_out: np.ndarray, args: argparse.Namespace,
             out: Console) -> None:
    """Print text the model writes after prompts taken from the starts of held-out lines."""
    starts = [i + 1 for i in np.flatnonzero(held_out[:-100] == ord("\n"))
              if held_out[i + 1] not in b" \n#"]
    picks = np.random.default_rng(args.seed + 2).choice(starts, size=args.samples)
    prompts = np.stack([held_out[s : s + 12] for s in picks]).astype(np.int64)
    texts = generate(model, prompts, 80, args.seq, 0.7, np.random.default_rng(args.seed))
    out.print("samples (a prompt from held-out source in bold, then the model's bytes):")
    for i, (prompt, cont) in enumerate(zip(prompts, texts)):
        head = _printable(bytes(prompt.tolist()))
        lines = (head + _printable(bytes(cont.tolist()))).splitlines()[:3]
        sample = Text("\n".join(lines))
        sample.stylize("bold cyan", 0, len(head))
        out.print(Panel(sample, title=f"sample {i + 1}", title_align="left"))


def run_train(args: argparse.Namespace) -> int:
    """The ``memgrad train`` command. Returns the exit status."""
    began = time.perf_counter()
    if args.d_model % args.heads:
        raise CliError(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}; "
                       "choose sizes such as --d-model 64 --heads 4")
    if args.budget is not None:  # an unreadable size fails before any work
        try:
            parse_size(args.budget, PERCENT_OF)
        except SizeError as e:
            raise CliError(f"--budget: {e}") from None
    save = check_writable(args.save, "--save") if args.save else None
    out = console()

    text, files = stdlib_corpus()
    tokens = np.frombuffer(text, dtype=np.uint8)
    split = int(0.9 * len(tokens))
    train_tokens, held_out = tokens[:split], tokens[split:]
    if len(held_out) < args.seq + 200:
        raise CliError(f"--seq {args.seq} is too long for the corpus; use at most "
                       f"{len(held_out) - 200}")
    mg.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = build_lm(args.d_model, args.heads, args.blocks, args.seq)
    stages = list(model)
    n_params = sum(p.numel() for p in model.parameters())
    names = ", ".join(f.name for f in files)
    out.print(
        f"corpus: {format_bytes(len(text))} of Python's own source ({names} from "
        f"{files[0].parent}); {format_bytes(split)} for training, the rest held out"
    )
    out.print(
        f"model: byte-level transformer, {args.blocks} blocks, d_model {args.d_model}, "
        f"{args.heads} heads, context {args.seq}; {n_params:,} parameters in {len(stages)} "
        f"stages; batch {args.batch}, AdamW lr {args.lr}"
    )

    x0, y0 = sample_batch(train_tokens, args.batch, args.seq, rng)
    xh, yh = sample_batch(held_out, args.batch, args.seq, np.random.default_rng(args.seed + 1))
    with accounting():
        # the plain step's peak sets the default budget; the plan is made in the state the
        # loop trains in (gradients set to None before each step)
        plain = measure_step(model, x0, lm_loss(y0), None)
        chosen = _choose_plan(stages, x0, args.budget, plain.peak, out)
        out.print(
            f"plain step peak {format_bytes(plain.peak)}; plan: {chosen.segments} segments "
            f"of sizes {chosen.sizes}, predicted peak {format_bytes(chosen.predicted_peak)} "
            f"(budget {format_bytes(chosen.budget_bytes)}), predicted recompute "
            f"{chosen.predicted_extra_seconds * 1e3:.0f} ms per step"
        )
        with mg.no_grad():
            held_before = lm_loss(yh)(model(xh)).item()
        losses = _train(model, chosen, train_tokens, args, rng, out)
    with mg.no_grad():
        held_after = lm_loss(yh)(model(xh)).item()
    out.print(
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f} (training batches); held-out "
        f"{held_before:.3f} -> {held_after:.3f}"
    )
    _compare(model, chosen, x0, y0, out)
    if args.samples:
        _samples(model, held_out, args, out)
    if save is not None:
        state = model.state_dict()
        np.savez(save, **state)
        written = save if save.suffix == ".npz" else save.with_name(save.name + ".npz")
        total = sum(a.nbytes for a in state.values())
        out.print(f"saved {len(state)} tensors ({format_bytes(total)}) to {written}")
    out.print(f"done in {time.perf_counter() - began:.1f} s")
    return 0
