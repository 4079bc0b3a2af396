"""``memgrad train``: a small causal transformer language model trained on bytes of the
Python standard library's own source, checkpointed with the planner's segmentation under a
memory budget, data-parallel over the ranks of ``memgrad.distributed``.

``memgrad train --nproc N`` starts ``N`` ranks of ``memgrad train`` under ``mpiexec`` (the
``dist`` extra) and waits for them; started directly under ``mpiexec -n N`` the command
trains on that world instead, and without either on one process. Every rank trains the same
model on its own shard of the training windows (``DistributedSampler``), ``--batch`` windows
per rank and step, and ``DistributedDataParallel`` averages the gradients, so ``N`` ranks
take the steps one process would take with ``N`` times the batch.

NOTE [ Data-parallel train ]
One code path serves every world size (with one rank each collective is the identity):
1. Rank 0 alone profiles the model and chooses the plan; it sends every rank the plan, or
   the error that no plan fits, so all ranks checkpoint alike or all stop.
2. Every rank wraps the same model (built from the same seed) in ``DistributedDataParallel``,
   which broadcasts rank 0's weights, and runs the same number of steps: the collectives of
   the wrapper's constructor and of each backward are the only ones, and every rank reaches
   each of them.
3. Rank 0 alone prints (the other ranks' console is quiet), evaluates the held-out loss,
   compares the planned and the plain step, samples text and saves: none of that involves
   another rank, so no rank waits in a collective that another skips.
A ``CliError`` raised on every rank is printed by rank 0 only; all ranks exit with its
status.

Example:
    >>> text, files = stdlib_corpus(max_bytes=10_000)
    >>> len(text), files[0].name
    (10000, 'textwrap.py')
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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
import memgrad.distributed as dist
from memgrad import nn
from memgrad.checkpoint import Plan
from memgrad.checkpoint.graph_plan import plan_from_graph_profile
from memgrad.checkpoint.graph_profile import profile_graph
from memgrad.cli.measure import accounting, compare_grads, measure_step, time_step
from memgrad.cli.output import CliError, check_writable, console, first_line
from memgrad.cli.saved import MODEL_KEYS, load_run, save_run, saved_model
from memgrad.cli.sizes import SizeError, format_bytes, parse_size, size_at_least
from memgrad.cli.timing import (
    StepTimes,
    format_overhead,
    spread_name,
    step_times,
    summarize,
    timed_rounds,
)
from memgrad.distributed import (
    DistributedDataParallel,
    DistributedError,
    DistributedSampler,
    launch,
)
from memgrad.errors import PlanError
from memgrad.models import VOCAB, build_lm, lm_loss, lm_parameters, sample_batch
from memgrad.sizes import physical_memory

__all__ = [
    "STDLIB_FILES",
    "TRAIN_DEFAULTS",
    "stdlib_corpus",
    "num_windows",
    "window_batch",
    "generate",
    "printable",
    "train_argv",
    "run_train",
]

# read in this order until the corpus is full; all are in the standard library of every
# Python memgrad supports, and are ordinary, well-commented code
STDLIB_FILES = (
    "textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py", "bisect.py", "heapq.py",
    "colorsys.py", "queue.py", "sched.py", "difflib.py", "pprint.py", "fractions.py",
    "statistics.py", "dataclasses.py", "functools.py", "contextlib.py", "argparse.py",
)
CORPUS_BYTES = 300_000
PERCENT_OF = "the plain step's peak"
DIST_FIX = "pip install 'memgrad[dist]'"
# the options a run file keeps (memgrad.cli.saved); the parser leaves them None so that
# --resume can tell a value given from a default
TRAIN_DEFAULTS = {"d_model": 64, "heads": 4, "blocks": 4, "seq": 64, "dtype": "float32",
                  "lr": 3e-3, "batch": 16, "seed": 0}
INTERRUPT_WAIT_SECONDS = 5  # for mpiexec to end its ranks after Ctrl-C, per attempt
WARMUP_STEPS = 2  # training steps left out of the step-time statistics (compiling, AdamW state)
COMPARE_ROUNDS = 5  # timed rounds of the plain and the planned step, after one warm-up round


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


def num_windows(n_tokens: int, seq: int) -> int:
    """How many non-overlapping windows of ``seq`` bytes ``n_tokens`` bytes hold, each with
    the byte after it: window ``w`` starts at ``w * seq``.

    Example:
        >>> num_windows(17, 4), num_windows(16, 4)
        (4, 3)
    """
    return max(0, (n_tokens - 1) // seq)


def window_batch(
    tokens: np.ndarray, windows: Sequence[int] | np.ndarray, seq: int
) -> tuple[mg.Tensor, mg.Tensor]:
    """The batch of the non-overlapping windows numbered ``windows``: window ``w`` is the
    ``seq`` bytes from ``w * seq`` and, for each position, the byte after it (see
    ``num_windows`` for how many there are).

    Returns:
        ``(x, y)``: int64 tensors of shapes ``(len(windows), seq)`` and
        ``(len(windows) * seq,)``.

    Example:
        >>> x, y = window_batch(np.arange(20), [2, 0], 4)
        >>> x.tolist(), y.tolist()
        ([[8, 9, 10, 11], [0, 1, 2, 3]], [9, 10, 11, 12, 1, 2, 3, 4])
    """
    starts = np.asarray(windows, dtype=np.int64) * seq
    rows = np.asarray(tokens)[starts[:, None] + np.arange(seq + 1)].astype(np.int64)
    return mg.tensor(rows[:, :-1]), mg.tensor(rows[:, 1:].reshape(-1))


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
    model: nn.Module, x: mg.Tensor, y: mg.Tensor, budget_text: str | None, plain_peak: int,
    out: Console,
) -> Plan:
    """The graph plan under ``--budget`` (default: half the plain peak), made in the state
    the loop trains in (gradients set to None before each step). An impossible ``--budget``
    is an error; an impossible default falls back to the least peak, and says so."""
    budget = parse_size(budget_text or "50%", PERCENT_OF).resolve(plain_peak)
    graph = profile_graph(model, (x,), lm_loss(y), repeats=2, cleared_grads=True)
    try:
        return plan_from_graph_profile(graph, budget)
    except PlanError:
        least = plan_from_graph_profile(graph)
    if budget_text is not None:
        raise CliError(
            f"no schedule fits --budget {budget_text} ({format_bytes(budget)}, {budget:,} "
            f"bytes); the smallest feasible budget for this model is "
            f"{format_bytes(least.predicted_peak)} ({least.predicted_peak:,} bytes): pass "
            f"--budget {size_at_least(least.predicted_peak)} or more, or shrink --batch or --seq"
        )
    out.print(
        f"half the plain peak ({format_bytes(budget)}) is less than any schedule needs; "
        f"using the smallest feasible budget, {format_bytes(least.predicted_peak)}",
        style="yellow",
    )
    return least


def _plan_on_ranks(model: nn.Module, x: mg.Tensor, y: mg.Tensor, budget_text: str | None,
                   out: Console) -> Plan:
    """NOTE [ Data-parallel train ] step 1: rank 0 measures the plain step (its peak sets
    the default budget) and checks the budget, so that an impossible one is reported once;
    then every rank plans its own run (a plan holds the model's tensors)."""
    rank = dist.rank()
    plain_peak = measure_step(model, x, lm_loss(y), None).peak if rank == 0 else None
    plain_peak = dist.broadcast_object(plain_peak, src=0)
    failed: CliError | None = None
    chosen: Plan | None = None
    if rank == 0:
        try:
            chosen = _choose_plan(model, x, y, budget_text, plain_peak, out)
        except CliError as e:
            failed = e
    failed = dist.broadcast_object(failed, src=0)
    if failed is not None:
        raise failed
    if chosen is None:
        chosen = _choose_plan(model, x, y, budget_text, plain_peak, out)
    budget = chosen.budget_bytes or chosen.predicted_peak
    out.print(
        f"plain step peak {format_bytes(plain_peak)}; plan: {_describe(chosen)}, predicted "
        f"peak {format_bytes(chosen.predicted_peak)} (budget {format_bytes(budget)}), "
        f"predicted recompute {chosen.predicted_extra_seconds * 1e3:.0f} ms per step"
    )
    return chosen


def _describe(chosen: Plan) -> str:
    """The plan in a few words: stages, levels of recomputation, kept and recomputed bytes."""
    rows = chosen.rows()
    levels = chosen.depth - 1
    return (f"{chosen.stages} stages, {levels} level{'s' if levels != 1 else ''} of "
            f"recompute; {format_bytes(sum(r.kept_bytes for r in rows))} kept, "
            f"{format_bytes(sum(r.recomputed_bytes for r in rows))} recomputed")


def _shard_batches(sampler: DistributedSampler, batch: int,
                   start: int = 0) -> Iterator[np.ndarray]:
    """This rank's window numbers in consecutive chunks of ``batch``, epoch after epoch, from
    the ``start``-th chunk on (a resumed run continues where the saved one stopped); a short
    tail of an epoch is dropped (every rank's shard has the same length, so all ranks start
    the next epoch together)."""
    per_epoch = len(sampler) // batch
    epoch, first = divmod(start, per_epoch)
    while True:
        sampler.set_epoch(epoch)
        shard = sampler.indices()
        for k in range(first, per_epoch):
            yield shard[k * batch : (k + 1) * batch]
        epoch, first = epoch + 1, 0


def _train(
    model: nn.Sequential, chosen: Plan, tokens: np.ndarray, args: argparse.Namespace,
    out: Console, run: dict[str, Any] | None,
) -> tuple[list[float], list[float], mg.optim.AdamW]:
    """The training loop, under a progress bar, continuing the saved ``run`` when given;
    returns the loss and the seconds of every step of this call (this rank's) and the
    optimizer. Memory
    accounting must be on (``accounting()``), so that tracking each step costs little.
    Every rank runs it (NOTE [ Data-parallel train ])."""
    world = dist.world_size()
    # DDP averages the gradients of a backward that follows a forward through it; the plan
    # runs inside, in the model's own forward
    net = DistributedDataParallel(model, gradient_as_bucket_view=True)
    handle = chosen.apply(model)
    opt = mg.optim.AdamW(model.parameters(), lr=args.lr)
    done = 0
    if run is not None:  # NOTE [ Train run file ]: everything continues from its step
        opt.load_state_dict(run["optimizer"])
        for group in opt.param_groups:
            group["lr"] = args.lr  # an --lr given with --resume replaces the saved one
        mg.set_rng_state(run["rng"])
        done = run["step"]
    sampler = DistributedSampler(num_windows(len(tokens), args.seq), num_replicas=world,
                                 rank=dist.rank(), shuffle=True, seed=args.seed)
    batches = _shard_batches(sampler, args.batch, done)
    last = done + args.steps
    every = args.log_every or max(1, args.steps // 10)
    tokens_per_step = args.batch * args.seq * world  # global: every rank's batch
    whose = " (rank 0)" if world > 1 else ""
    peak, rate, losses, seconds = 0, 0.0, [], []
    columns = (
        TextColumn("[bold]train[/]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} tok/s"),
        TextColumn("peak {task.fields[peak]}"), TimeElapsedColumn(), TimeRemainingColumn(),
    )
    with Progress(*columns, console=out) as progress:
        task = progress.add_task("train", total=args.steps, loss="-", rate="-", peak="-")
        for i in range(1, args.steps + 1):
            step = done + i
            x, y = window_batch(tokens, next(batches), args.seq)
            start = time.perf_counter()
            opt.zero_grad()
            with mg.memory.track() as trace:
                logits = net(x)
                loss_t = lm_loss(y)(logits)
                del logits  # the graph keeps what backward needs
                loss_t.backward()  # through the wrapper: the gradients are averaged
            loss = loss_t.item()
            del loss_t
            opt.step()
            seconds.append(time.perf_counter() - start)
            now = tokens_per_step / seconds[-1]
            # the running average starts after the warm-up steps, which it would drag down
            rate = now if i <= WARMUP_STEPS + 1 else 0.9 * rate + 0.1 * now
            losses.append(loss)
            peak = max(peak, trace.peak_above_start)
            progress.update(task, advance=1, loss=f"{loss:.3f}", rate=f"{rate:,.0f}",
                            peak=format_bytes(peak))
            if i % every == 0 or i in (1, args.steps):
                progress.console.print(
                    f"step {step:5d}/{last}  loss {loss:.4f}{whose}  {rate:8,.0f} tok/s  "
                    f"peak {format_bytes(trace.peak_above_start)}"
                )
    opt.zero_grad()
    handle.remove()
    return losses, seconds, opt


def _compare(
    model: nn.Sequential, chosen: Plan, x: mg.Tensor, y: mg.Tensor, steps: StepTimes | None,
    out: Console,
) -> None:
    """Print the planned and the plain step side by side, on the same batch and weights,
    timed in pairs (NOTE [ Paired timing ] in ``memgrad.cli.timing``), and the training
    steps' times without the warm-up steps."""
    loss_fn = lm_loss(y)
    with accounting():
        plain = measure_step(model, x, loss_fn, None)
        planned = measure_step(model, x, loss_fn, chosen)
    diff = compare_grads(plain.grads, planned.grads)
    segments = (None, chosen)
    rounds = timed_rounds(lambda i: time_step(model, x, loss_fn, segments[i]), 2,
                          COMPARE_ROUNDS)
    plain_t, planned_t = summarize(rounds)
    spread = spread_name(COMPARE_ROUNDS)
    table = Table(
        title="one step (forward + loss + backward), same batch and weights",
        caption=f"time: the median of {COMPARE_ROUNDS} rounds of the plain and the planned "
        "step after an untimed warm-up round; vs plain: the median of the per-round ratios, "
        f"in brackets their {spread}; 'tie ±x%' when that spread includes 0%",
        caption_justify="left",
    )
    versus = f"vs plain ({'IQR' if spread == 'interquartile range' else spread})"
    for name in ("step", "plan", "peak", "predicted", "time", versus, "gradients"):
        table.add_column(name, justify="left" if name in ("step", "plan", "gradients")
                         else "right", no_wrap=name != "plan")
    table.add_row("plain", "all kept", format_bytes(plain.peak), "-",
                  f"{plain_t.seconds * 1e3:.0f} ms", "reference", "reference")
    table.add_row(
        "planned", _describe(chosen),
        f"{format_bytes(planned.peak)} ({100 * planned.peak / plain.peak:.0f}%)",
        format_bytes(chosen.predicted_peak),
        f"{planned_t.seconds * 1e3:.0f} ms", format_overhead(planned_t),
        "exact" if diff == 0 else f"differ by up to {diff:.2g}",
    )
    out.print(table)
    out.print(_steps_line(steps))


def _steps_line(steps: StepTimes | None) -> str:
    """The training steps' time (forward, backward and the optimizer, planned), as the
    command prints it after the comparison."""
    if steps is None:
        return (f"training steps: every step was a warm-up step (the first {WARMUP_STEPS} "
                "compile kernels and make the optimizer's state), so no step time is given")
    return (f"training step (planned, with the optimizer): median {steps.median * 1e3:.0f} ms, "
            f"{spread_name(steps.count)} {steps.low * 1e3:.0f}..{steps.high * 1e3:.0f} ms, "
            f"over {steps.count} step{'s' if steps.count != 1 else ''} after the first "
            f"{steps.warmup} (warm-up, not counted)")


def printable(data: bytes) -> str:
    """Bytes as text that is safe to print: UTF-8 with U+FFFD for what is not, tabs as four
    spaces, and every other unprintable character but the newline as a space.

    Example:
        >>> printable(bytes([97, 9, 27, 98])), printable(bytes([0xff]))
        ('a     b', '\ufffd')
    """
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
        head = printable(bytes(prompt.tolist()))
        lines = (head + printable(bytes(cont.tolist()))).splitlines()[:3]
        sample = Text("\n".join(lines))
        sample.stylize("bold cyan", 0, len(head))
        out.print(Panel(sample, title=f"sample {i + 1}", title_align="left"))


def train_argv(args: argparse.Namespace) -> list[str]:
    """The options of a parsed ``memgrad train`` command line as arguments again, without
    ``--nproc``: what each rank started by ``--nproc`` is given. Options left at ``None``
    are left out.

    Example:
        >>> train_argv(argparse.Namespace(command="train", steps=5, budget=None, nproc=2))
        ['--steps=5']
    """
    argv = []
    for name, value in vars(args).items():
        if name in ("command", "func", "nproc") or value is None or value is False:
            continue
        option = "--" + name.replace("_", "-")
        argv.append(option if value is True else f"{option}={value}")
    return argv


def _launch(args: argparse.Namespace, nproc: int) -> int:
    """Run this command on ``nproc`` ranks under ``mpiexec``; returns their exit status."""
    try:
        launch.find_mpiexec()
    except DistributedError:
        raise CliError(
            f"--nproc {nproc} needs mpiexec, which was not found beside this Python or on "
            f"PATH; install the dist extra: {DIST_FIX}"
        ) from None
    if importlib.util.find_spec("mpi4py") is None:
        raise CliError(
            f"--nproc {nproc} needs mpi4py, which is not installed; install the dist extra: "
            f"{DIST_FIX}"
        )
    cmd = launch.mpiexec_command(nproc, ["-m", "memgrad", "train", *train_argv(args)])
    env = launch.rank_environment(nproc)
    # Open MPI gives each rank a pseudo-terminal: rank 0 must format for what this process
    # writes to (a terminal of this width, or a pipe or a file), not for that; and numba, on
    # a terminal, colours its errors and ends the process with a colour reset
    here = console()
    env.setdefault("TTY_COMPATIBLE", "1" if here.is_terminal else "0")
    env.setdefault("COLUMNS", str(here.width))
    if not here.is_terminal:
        env.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    proc = subprocess.Popen(cmd, env=env)
    try:
        status = proc.wait()
    except KeyboardInterrupt:
        _end(proc)
        raise  # main says it, once
    return status if status >= 0 else 128 - status  # ended by a signal: as a shell says


def _end(proc: subprocess.Popen) -> None:
    """After Ctrl-C, let ``mpiexec`` end its ranks, passing the signal on when it came to
    this process alone (a kill straight away would leave the ranks running)."""
    for sig in (None, signal.SIGINT, signal.SIGTERM):
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=INTERRUPT_WAIT_SECONDS)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def run_train(args: argparse.Namespace) -> int:
    """The ``memgrad train`` command, on every rank. Returns the exit status."""
    try:
        return _run_train(args)
    except CliError as e:
        if dist.is_initialized() and dist.rank() != 0:
            return e.exit_status  # rank 0 prints it (NOTE [ Data-parallel train ])
        raise


def _check_model_fits(args: argparse.Namespace, processes: int) -> None:
    """A ``CliError`` when the weights, gradients and AdamW's two moments of the model the
    options ask for, in each of ``processes`` processes on this machine, exceed its memory:
    building it would end in the kernel killing the process, not in an error."""
    limit = physical_memory()
    n = lm_parameters(args.d_model, args.blocks, args.seq)
    state = 4 * n * np.dtype(args.dtype).itemsize * processes
    if limit is not None and state > limit:
        each = f" over its {processes} processes" if processes > 1 else ""
        raise CliError(
            f"--d-model {args.d_model} --blocks {args.blocks} make a model of {n:,} "
            f"parameters, whose weights, gradients and AdamW state take {format_bytes(state)}"
            f"{each}, more than this machine's {format_bytes(limit)} of memory; choose a "
            "smaller --d-model or fewer --blocks"
        )


def _check_sizes(args: argparse.Namespace, processes: int) -> None:
    """The model's and the budget's flags, checked before any work."""
    if args.d_model % args.heads:
        raise CliError(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}; "
                       "choose sizes such as --d-model 64 --heads 4")
    _check_model_fits(args, processes)
    if args.budget is not None:  # an unreadable size fails before any work
        try:
            parse_size(args.budget, PERCENT_OF)
        except SizeError as e:
            raise CliError(f"--budget: {e}") from None


def _resolve_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """Fill in the options of ``TRAIN_DEFAULTS`` left out (``None``): from the run file of
    ``--resume`` when given, else the defaults. Returns the run file, or None.

    Raises:
        CliError: when ``--resume`` is not a run file, or a model option given with it
            differs from the saved model's (the shape of the weights cannot change).
    """
    run = load_run(args.resume, "--resume") if args.resume else None
    saved = {} if run is None else {**run["training"], **run["model"]}
    for key, default in TRAIN_DEFAULTS.items():
        given = getattr(args, key)
        if run is not None and key in MODEL_KEYS and given not in (None, saved[key]):
            flag = "--" + key.replace("_", "-")
            raise CliError(f"{flag} {given}: the model saved in {args.resume} has {flag} "
                           f"{saved[key]}; drop {flag} (a resumed run keeps its model)")
        if given is None:
            setattr(args, key, saved.get(key, default))
    return run


def _save(path: Path, args: argparse.Namespace, model: nn.Sequential, opt: mg.optim.AdamW,
          losses: list[float], rng: dict[str, Any], out: Console) -> None:
    """Write the run file (NOTE [ Train run file ]) and say what it holds."""
    hyper = {key: getattr(args, key) for key in TRAIN_DEFAULTS} | {"world": dist.world_size()}
    count, size = save_run(path, hyper, model, opt, losses, rng)
    out.print(f"saved {count} tensors ({format_bytes(size)}) with the hyperparameters, the "
              f"AdamW state and step {len(losses)} to {path}")


def _run_train(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    if args.nproc is not None and args.nproc < 1:
        raise CliError(f"--nproc must be at least 1, got {args.nproc}; pass the number of "
                       "processes to train on, e.g. --nproc 2")
    try:
        dist.init()
    except DistributedError as e:
        raise CliError(first_line(e)) from None
    world, rank = dist.world_size(), dist.rank()
    if args.nproc is not None and (world > 1 or (args.nproc > 1 and dist.launched_by_mpi())):
        raise CliError(
            f"--nproc {args.nproc}: this command already runs under mpiexec ({world} "
            f"rank{'s' if world > 1 else ''}); "
            "drop --nproc to train on those ranks, or run without mpiexec to keep --nproc"
        )
    launching = args.nproc is not None and args.nproc > 1
    ranks = args.nproc if launching else world
    run = _resolve_options(args)
    _check_sizes(args, args.nproc if launching else 1)
    save = check_writable(args.save, "--save", ".npz") if args.save else None

    text, files = stdlib_corpus()
    tokens = np.frombuffer(text, dtype=np.uint8)
    split = int(0.9 * len(tokens))
    train_tokens, held_out = tokens[:split], tokens[split:]
    if len(held_out) < args.seq + 200:
        raise CliError(f"--seq {args.seq} is too long for the corpus; use at most "
                       f"{len(held_out) - 200}")
    windows = num_windows(len(train_tokens), args.seq)
    if windows // ranks < args.batch:
        need = (f"--batch {args.batch} on each of {ranks} ranks needs {args.batch * ranks}"
                if ranks > 1 else f"--batch {args.batch} needs {args.batch}")
        raise CliError(f"{need} windows of --seq {args.seq} bytes, but the training text holds "
                       f"{windows}; use --batch {max(1, windows // ranks)} or less, or a "
                       "smaller --seq")
    if launching:  # every check that needs no rank has passed: errors print once
        return _launch(args, ranks)

    out = console() if rank == 0 else Console(quiet=True)
    mg.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if run is None:
        model = build_lm(args.d_model, args.heads, args.blocks, args.seq)
        model.to(np.dtype(args.dtype))
    else:  # its generator's state is restored where the steps continue
        model = saved_model(run, "--resume", args.resume)
        out.print(f"resuming {args.resume}: step {run['step']}, loss "
                  f"{run['losses'][-1]:.4f}; {args.steps} more steps")
    stages = list(model)
    n_params = sum(p.numel() for p in model.parameters())
    names = ", ".join(f.name for f in files)
    batch = (f"batch {args.batch}" if world == 1 else
             f"batch {args.batch} per rank on {world} ranks, global batch {args.batch * world}")
    out.print(
        f"corpus: {format_bytes(len(text))} of Python's own source ({names} from "
        f"{files[0].parent}); {format_bytes(split)} for training, the rest held out"
    )
    out.print(
        f"model: byte-level transformer, {args.blocks} blocks, d_model {args.d_model}, "
        f"{args.heads} heads, context {args.seq}; {n_params:,} parameters in {len(stages)} "
        f"stages, {args.dtype}; {batch}, AdamW lr {args.lr}"
    )
    out.print(
        f"data: {windows:,} windows of {args.seq} bytes of the training text, shuffled each "
        f"epoch{' and shared out among the ranks' if world > 1 else ''}; "
        f"{windows // world // args.batch:,} steps per epoch"
    )

    x0, y0 = sample_batch(train_tokens, args.batch, args.seq, rng)
    xh, yh = sample_batch(held_out, args.batch, args.seq, np.random.default_rng(args.seed + 1))
    with accounting():
        chosen = _plan_on_ranks(model, x0, y0, args.budget, out)
        if rank == 0:
            with mg.no_grad():
                held_before = lm_loss(yh)(model(xh)).item()
        losses, seconds, opt = _train(model, chosen, train_tokens, args, out, run)
    rng_after = mg.get_rng_state()
    if rank != 0:
        return 0  # NOTE [ Data-parallel train ] step 3: the rest is rank 0's alone
    with mg.no_grad():
        held_after = lm_loss(yh)(model(xh)).item()
    whose = "rank 0's training batches" if world > 1 else "training batches"
    out.print(
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f} ({whose}); held-out "
        f"{held_before:.3f} -> {held_after:.3f}"
    )
    _compare(model, chosen, x0, y0, step_times(seconds, WARMUP_STEPS), out)
    if args.samples:
        _samples(model, held_out, args, out)
    if save is not None:
        before = [] if run is None else run["losses"].tolist()
        _save(save, args, model, opt, before + losses, rng_after, out)
    out.print(f"done in {time.perf_counter() - began:.1f} s")
    return 0
