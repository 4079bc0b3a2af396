"""The ``memgrad`` command: argument parsing and printing around small, testable functions.

- ``memgrad train`` trains a small causal transformer language model on the Python standard
  library's own source, checkpointed under a memory budget (``memgrad.cli.train``);
  ``--save PATH`` keeps the run and ``--resume PATH`` continues it.
- ``memgrad sample PATH`` writes text with the model a ``--save`` run kept
  (``memgrad.cli.sample``).
- ``memgrad tune MODEL`` measures peak memory, step time and gradient agreement for equal
  segment counts and the planner's choice under budgets (``memgrad.cli.tune``).
- ``memgrad plan MODEL --budget 64MB`` prints the planner's segmentation and predictions.
- ``memgrad demo`` trains a small multilayer perceptron built from raw tensors on a fixed
  synthetic regression task, then checks its gradients against finite differences.

Errors in what was asked for (an unknown model, an unreadable or impossible budget) are one
line on stderr and exit status 2.

Example:
    $ memgrad train --steps 100 --save run.npz
    $ memgrad sample run.npz --prompt "def " --tokens 100
    $ memgrad tune mlp --budgets 25%,50% --plot tradeoff.png
    $ memgrad plan transformer --budget 50%
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from numpy.typing import DTypeLike

import memgrad as mg
import memgrad.distributed as dist
from memgrad.cli.output import CliError, first_line
from memgrad.cli.sample import run_sample
from memgrad.cli.train import run_train
from memgrad.cli.tune import run_plan, run_tune
from memgrad.models import BUILTIN
from memgrad.tensor import Tensor

__all__ = [
    "main",
    "build_parser",
    "make_data",
    "init_mlp",
    "mlp",
    "mse_loss",
    "sgd_step",
    "train",
    "check_gradients",
]


def make_data(n: int, in_features: int, dtype: DTypeLike = mg.float32) -> tuple[Tensor, Tensor]:
    """A synthetic regression task drawn from the global generator.

    The target is ``tanh(x @ w) + 0.5 * x[:, 0] * x[:, 1]`` for a random ``w``: smooth, and
    not linear, so a hidden layer is needed to fit it.

    Args:
        n: number of samples.
        in_features: number of input features (at least 2).
        dtype: floating dtype of both tensors.

    Returns:
        ``(x, y)`` with shapes ``(n, in_features)`` and ``(n, 1)``.

    Example:
        >>> x, y = make_data(8, 3)
        >>> x.shape, y.shape
        ((8, 3), (8, 1))
    """
    if in_features < 2:
        raise ValueError(f"make_data: in_features must be at least 2, got {in_features}")
    x = mg.randn(n, in_features, dtype=dtype)
    w = mg.randn(in_features, 1, dtype=dtype)
    y = (x @ w).tanh() + 0.5 * (x[:, 0:1] * x[:, 1:2])
    return x, y


def init_mlp(sizes: Sequence[int], dtype: DTypeLike = mg.float32) -> list[Tensor]:
    """Weights and biases of a multilayer perceptron, as leaf tensors that require grad.

    Weights are drawn from ``N(0, 1 / fan_in)``, biases start at zero.

    Args:
        sizes: layer widths, input first, e.g. ``[4, 32, 1]``.
        dtype: floating dtype of the parameters.

    Returns:
        ``[w0, b0, w1, b1, ...]`` with ``w_i`` of shape ``(sizes[i], sizes[i + 1])``.

    Example:
        >>> [tuple(p.shape) for p in init_mlp([4, 8, 1])]
        [(4, 8), (8,), (8, 1), (1,)]
    """
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = mg.randn(fan_in, fan_out, dtype=dtype) * (1.0 / math.sqrt(fan_in))
        params.append(w.requires_grad_())
        params.append(mg.zeros(fan_out, dtype=dtype, requires_grad=True))
    return params


def mlp(params: Sequence[Tensor], x: Tensor) -> Tensor:
    """Apply the perceptron: affine layers with ``tanh`` between them, none after the last.

    Args:
        params: ``[w0, b0, w1, b1, ...]`` as made by ``init_mlp``.
        x: input of shape ``(n, sizes[0])``.

    Returns:
        The output, of shape ``(n, sizes[-1])``.

    Example:
        >>> mlp(init_mlp([3, 5, 2]), mg.ones(4, 3)).shape
        (4, 2)
    """
    last = len(params) - 2
    for i in range(0, len(params), 2):
        x = mg.matmul(x, params[i]) + params[i + 1]
        if i < last:
            x = mg.tanh(x)
    return x


def mse_loss(pred: Tensor, target: Tensor) -> Tensor:
    """Mean squared error, a scalar tensor.

    Example:
        >>> mse_loss(mg.tensor([1.0, 3.0]), mg.tensor([1.0, 1.0])).item()
        2.0
    """
    return ((pred - target) ** 2).mean()


def sgd_step(params: Sequence[Tensor], lr: float) -> None:
    """One step of plain gradient descent, in place, then zero the gradients.

    Runs under ``mg.no_grad()``: the update itself must not be recorded in the graph.

    Example:
        >>> p = mg.tensor([1.0], requires_grad=True)
        >>> (p * 2).sum().backward()
        >>> sgd_step([p], lr=0.25)
        >>> p.tolist(), p.grad.tolist()
        ([0.5], [0.0])
    """
    with mg.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(p.grad * lr)
                p.grad.zero_()


def train(steps: int, lr: float, seed: int, log_every: int = 0) -> list[tuple[int, float]]:
    """Fit a 4-32-32-1 perceptron to ``make_data(256, 4)`` with full-batch gradient descent.

    Args:
        steps: number of gradient steps.
        lr: learning rate.
        seed: seed for ``mg.manual_seed``; the same seed gives the same losses.
        log_every: print the loss every this many steps (and at the last step); 0 is silent.

    Returns:
        ``(step, loss)`` pairs at every logged step, always including the first and the last.

    Example:
        >>> history = train(steps=20, lr=0.05, seed=0)
        >>> history[-1][1] < history[0][1]
        True
    """
    if steps < 1:
        raise ValueError(f"train: steps must be at least 1, got {steps}")
    mg.manual_seed(seed)
    x, y = make_data(256, 4)
    params = init_mlp([4, 32, 32, 1])
    every = log_every if log_every > 0 else steps
    history = []
    for step in range(steps):
        loss = mse_loss(mlp(params, x), y)
        loss.backward()
        sgd_step(params, lr)
        if step % every == 0 or step == steps - 1:
            history.append((step, loss.item()))
            if log_every > 0:
                print(f"step {step:5d}  loss {loss.item():.6f}")
    return history


def check_gradients(seed: int) -> int:
    """Gradcheck the perceptron's loss with respect to all its weights, in float64.

    Uses a 3-5-1 perceptron on 6 samples, so that the finite differences are cheap.

    Args:
        seed: seed for ``mg.manual_seed``.

    Returns:
        The number of scalar weights checked. Raises ``mg.GradcheckError`` on a mismatch.

    Example:
        >>> check_gradients(seed=0)
        26
    """
    mg.manual_seed(seed)
    x, y = make_data(6, 3, dtype=mg.float64)
    params = init_mlp([3, 5, 1], dtype=mg.float64)

    def loss_fn(*weights: Tensor) -> Tensor:
        return mse_loss(mlp(weights, x), y)

    mg.autograd.gradcheck(loss_fn, tuple(params))
    return sum(p.numel() for p in params)


def _demo(args: argparse.Namespace) -> int:
    print(f"memgrad {mg.__version__}: training a 4-32-32-1 MLP on 256 samples "
          f"({args.steps} steps of SGD, lr {args.lr}, seed {args.seed})")
    history = train(args.steps, args.lr, args.seed, log_every=args.log_every)
    first, last = history[0][1], history[-1][1]
    print(f"loss {first:.6f} -> {last:.6f} ({first / last:.1f}x lower)")
    try:
        n = check_gradients(args.seed)
    except mg.GradcheckError as e:
        print(f"gradcheck: FAILED\n{e}")
        return 1
    print(f"gradcheck: passed (float64, 3-5-1 MLP, loss w.r.t. all {n} weights)")
    return 0


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an int of at least ``minimum``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "int"  # argparse names the type in its error message
    return parse


def _rate(example: str) -> Callable[[str], float]:
    """An argparse type: a finite float above 0, such as a learning rate."""

    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(
                f"must be a finite number above 0, got {text}; e.g. {example}"
            )
        return value

    parse.__name__ = "float"
    return parse


def _temperature(text: str) -> float:
    """An argparse type: a sampling temperature, a finite float of 0 or more."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of 0 or more, got {text}; e.g. 0.8, or 0 for the most "
            "likely bytes"
        )
    return value


_temperature.__name__ = "float"


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the house rule for every error of the command):
    the message and where the usage is, without the usage itself."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


SIZE_HELP = ("sizes are bytes (1048576) or take a unit, case-insensitive: KB, MB, GB (powers "
             "of 1000) or KiB, MiB, GiB (powers of 1024), e.g. 64MB or 1.5GiB")
MODEL_HELP = (f"a built-in model ({', '.join(BUILTIN)}) or package.module:factory, a function "
              "of no arguments returning (model, example_input, loss_fn) with model any "
              "nn.Module (equal segment counts apply to an nn.Sequential)")


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a small transformer language model on Python's own source, checkpointed "
        "under a memory budget",
        description="Train a small causal transformer language model on bytes of the Python "
        "standard library's own source files (nothing is downloaded), with AdamW, checkpointed "
        "with the planner's segmentation under --budget. Shows a progress bar (loss, tokens/s, "
        "peak memory), then a table comparing the planned and the plain step, and text sampled "
        "from the model. Trains data-parallel on the ranks of mpiexec: with --nproc N it "
        "starts N processes itself, and run as 'mpiexec -n N memgrad train' it uses those; "
        "each rank trains on its own share of the data and the gradients are averaged, so "
        "--batch is per rank and the global batch is N times --batch.",
        epilog=SIZE_HELP + "; a percentage is of the plain (uncheckpointed) step's peak.",
    )
    p.add_argument("--steps", type=_count(1), default=150, help="training steps (default: 150)")
    saved = ", or the saved run's with --resume"
    p.add_argument("--batch", type=_count(1),
                   help=f"sequences per step on each rank (default: 16{saved})")
    p.add_argument("--seq", type=_count(2),
                   help=f"bytes per sequence, the context length (default: 64{saved})")
    p.add_argument("--d-model", type=_count(1),
                   help=f"embedding size, a multiple of --heads (default: 64{saved})")
    p.add_argument("--heads", type=_count(1), help=f"attention heads (default: 4{saved})")
    p.add_argument("--blocks", type=_count(1),
                   help=f"transformer blocks (default: 4{saved})")
    p.add_argument("--lr", type=_rate("3e-3"),
                   help=f"AdamW learning rate, above 0 (default: 3e-3{saved})")
    p.add_argument("--seed", type=_count(0),
                   help=f"random seed, 0 or more (default: 0{saved})")
    p.add_argument("--budget",
                   help="memory budget of a step: a size or a percentage of the plain step's "
                   "peak (default: 50%%, or the least feasible budget when that is too little)")
    p.add_argument("--log-every", type=_count(0), default=0,
                   help="print the loss every N steps (default: 0, about ten lines per run)")
    p.add_argument("--samples", type=_count(0), default=3,
                   help="text samples to print at the end (default: 3)")
    p.add_argument("--save", metavar="PATH",
                   help="write the model's hyperparameters, its weights, the AdamW state and "
                   "the step count to PATH (.npz is added when missing), for --resume and "
                   "'memgrad sample'; the file holds only data (mg.save)")
    p.add_argument("--resume", metavar="PATH",
                   help="continue the run that --save wrote to PATH: the same model, "
                   "weights, optimizer state, data order and step count; --steps more steps")
    p.add_argument("--dtype", choices=("float32", "float64"),
                   help=f"floating dtype of the weights and activations (default: "
                   f"float32{saved})")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="train data-parallel on N processes that it starts with mpiexec "
                   "(needs the dist extra: pip install 'memgrad[dist]'); --batch is per "
                   "process, so the global batch is N times --batch. Without --nproc: this "
                   "process alone, or the ranks of 'mpiexec -n N memgrad train' when run "
                   "under mpiexec (default: 1)")
    p.set_defaults(func=run_train)


def _add_sample(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sample",
        help="write text with a model saved by 'memgrad train --save'",
        description="Load the model that 'memgrad train --save PATH' wrote and print the "
        "prompt followed by the bytes the model writes after it, drawn one at a time at "
        "--temperature from --seed (the same seed gives the same text).",
    )
    p.add_argument("path", metavar="PATH", help="a file written by 'memgrad train --save'")
    p.add_argument("--prompt", default="def ", help="the text to continue (default: 'def ')")
    p.add_argument("--tokens", type=_count(1), default=200,
                   help="bytes to write after the prompt (default: 200)")
    p.add_argument("--temperature", type=_temperature, default=0.8,
                   help="sampling temperature, 0 or more; 0 takes the most likely byte "
                   "(default: 0.8)")
    p.add_argument("--seed", type=_count(0), default=0,
                   help="random seed, 0 or more (default: 0)")
    p.set_defaults(func=run_sample)


def _add_grads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grads", choices=("cleared", "in-place"), default="cleared",
                   help="before each step, set the gradients to None so that backward "
                   "allocates them (cleared, as zero_grad()), or zero them in place so "
                   "that only activations and transients count (in-place, as "
                   "zero_grad(set_to_none=False)); default: cleared")


def _add_tune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="measure peak memory, step time and gradients per segmentation; recommend one",
        description="For each MODEL, measure one training step (forward + loss + backward) "
        "plainly, with equal segment counts (1, 2, 4, sqrt(n), n stages; for an "
        "nn.Sequential) and with the graph planner's plan under each budget: peak bytes, step "
        "time, recompute overhead and "
        "whether every parameter's gradient equals the plain run's. Prints a table per model "
        "and recommends the fastest configuration whose measured peak fits the smallest "
        "budget (or, when none does, the least peak); configurations whose timing spreads "
        "overlap are ties, and among those tied with the fastest the one with the least "
        "predicted recomputation is recommended.",
        epilog=SIZE_HELP + "; a percentage is of the plain step's peak.",
    )
    p.add_argument("model", nargs="+", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--budgets", default="25%,50%,75%",
                   help="comma-separated budgets for the planner, sizes or percentages of the "
                   "plain peak (default: 25%%,50%%,75%%)")
    p.add_argument("--size", choices=("small", "bench"), default="small",
                   help="built-in model sizes: small (quick) or bench (the benchmark workloads "
                   "W1-W3); default: small")
    p.add_argument("--repeats", type=_count(1), default=5,
                   help="timed rounds after one untimed warm-up round; each round runs the "
                   "plain step and every configuration once, interleaved. A step time is the "
                   "median of its rounds, an overhead the median of the per-round ratios to "
                   "the plain step with their spread (the interquartile range from 5 rounds, "
                   "min-max below); default: 5")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw peak memory against step time, one point per configuration, "
                   "and the planner's frontier: plans at ten budgets, measured and predicted "
                   '(needs matplotlib: pip install "memgrad[plot]")')
    p.add_argument("--timeline", metavar="FILE.png",
                   help="draw bytes alive over one step for the plain and the recommended run "
                   '(needs matplotlib: pip install "memgrad[plot]")')
    _add_grads(p)
    p.add_argument("--json", action="store_true",
                   help="print machine-readable JSON instead of tables")
    p.set_defaults(func=run_tune)


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="print which values of a model's step are kept and which recomputed under a "
        "budget",
        description="Profile one forward of MODEL op by op and print the plan with the least "
        "recomputation whose predicted peak fits --budget (the least peak without one): per "
        "module path, the values backward reads that are kept and that are recomputed, with "
        "their bytes and the recompute time; the levels of recomputation, the predicted peak "
        "and extra time, and the plain step's measured peak for reference. MODEL may be any "
        "nn.Module, not only an nn.Sequential.",
        epilog=SIZE_HELP + "; a percentage is of the plain step's peak.",
    )
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--budget", help="the memory budget of a step (default: none, least peak)")
    p.add_argument("--size", choices=("small", "bench"), default="small",
                   help="built-in model sizes (default: small)")
    _add_grads(p)
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=run_plan)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``memgrad`` command, with one subparser per subcommand.

    Example:
        >>> build_parser().parse_args(["demo", "--steps", "10"]).steps
        10
    """
    parser = _Parser(
        prog="memgrad",
        description="memgrad: a NumPy + numba autograd engine with PyTorch's eager API.",
    )
    parser.add_argument("--version", action="version", version=f"memgrad {mg.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="train a small MLP built from raw tensors, then gradcheck it",
        description="Train a 4-32-32-1 MLP made of raw memgrad tensors on a synthetic "
        "regression task with plain SGD, printing the loss, then check the gradients of its "
        "loss w.r.t. its weights against finite differences in float64.",
    )
    demo.add_argument(
        "--steps", type=_count(1), default=1000, help="gradient steps (default: 1000)"
    )
    demo.add_argument("--lr", type=_rate("0.05"), default=0.05,
                      help="learning rate, above 0 (default: 0.05)")
    demo.add_argument("--seed", type=_count(0), default=0,
                      help="random seed, 0 or more (default: 0)")
    demo.add_argument(
        "--log-every",
        type=_count(0),
        default=100,
        help="print the loss every N steps, 0 for only the summary (default: 100)",
    )
    demo.set_defaults(func=_demo)
    _add_train(sub)
    _add_sample(sub)
    _add_tune(sub)
    _add_plan(sub)
    return parser


@contextlib.contextmanager
def _interrupts_kept() -> Iterator[None]:
    """Ctrl-C that lands in a weakref callback or a finalizer (the memory tracker's, say)
    is printed and dropped by Python ("Exception ignored in ..."), and the command would run
    on: within this context such an interrupt is raised again, as a new SIGINT sent from
    another thread, in the code the main thread runs next."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            # from another thread, once this hook has returned: raised in it, it would be
            # dropped again
            timer = threading.Timer(0.01, _thread.interrupt_main, args=(signal.SIGINT,))
            timer.daemon = True
            timer.start()
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _interrupt_behind(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C that ``e`` is or comes from: Ctrl-C inside Python code that a compiled
    (numba) function calls reaches its caller as a SystemError caused by it."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``memgrad`` command with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success. Without a subcommand, prints the help and returns 0;
        a bad subcommand or option exits with status 2 (argparse), and so does a
        ``CliError`` or a ``MemoryError`` (printed as one line on stderr). Ctrl-C is one line
        and status 130, as a shell reports a process ended by SIGINT; on the ranks of
        ``mpiexec`` it is left to ``memgrad.distributed``, which says it once for all ranks.

    Example:
        >>> main(["demo", "--steps", "50", "--log-every", "0"])  # doctest: +SKIP
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        with _interrupts_kept():
            return args.func(args)
    except CliError as e:
        print(f"memgrad {args.command}: error: {e}", file=sys.stderr)
        return e.exit_status
    except (MemoryError, KeyboardInterrupt, SystemError) as e:
        interrupt = _interrupt_behind(e)
        if isinstance(e, SystemError) and interrupt is None:
            raise
        if dist.is_initialized() and dist.world_size() > 1:
            # NOTE [ Faults ] in memgrad.distributed: said once, every rank ends
            if interrupt is None or interrupt is e:
                raise
            raise interrupt from e
        if interrupt is not None:
            print(f"memgrad {args.command}: interrupted", file=sys.stderr)
            return 130
        print(f"memgrad {args.command}: error: out of memory: {first_line(e)}; ask for a "
              "smaller model, batch or input", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
