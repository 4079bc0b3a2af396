"""``memgrad sample PATH``: text from the language model a ``memgrad train --save`` run
wrote to ``PATH``, continuing a prompt byte by byte at a temperature, from a seed.

Example:
    >>> from memgrad.models import build_lm
    >>> continuation(build_lm(16, 2, 1, 8), b"def ", 3, 8, 0.0, 0).shape
    (3,)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from memgrad import nn
from memgrad.cli.output import CliError
from memgrad.cli.saved import load_run, saved_model
from memgrad.cli.train import generate, printable

__all__ = ["continuation", "run_sample"]


def continuation(model: nn.Sequential, prompt: bytes, tokens: int, seq: int,
                 temperature: float, seed: int) -> np.ndarray:
    """The ``tokens`` bytes ``model`` writes after ``prompt`` (with the last ``seq`` bytes as
    context), drawn at ``temperature`` (0 is greedy) from ``numpy.random.default_rng(seed)``.

    Example:
        >>> from memgrad.models import build_lm
        >>> model = build_lm(16, 2, 1, 8)
        >>> a = continuation(model, b"x = ", 5, 8, 1.0, seed=3)
        >>> bool((a == continuation(model, b"x = ", 5, 8, 1.0, seed=3)).all())
        True
    """
    prompts = np.frombuffer(prompt, dtype=np.uint8).astype(np.int64)[None, :]
    return generate(model, prompts, tokens, seq, temperature, np.random.default_rng(seed))[0]


def run_sample(args: argparse.Namespace) -> int:
    """The ``memgrad sample`` command: print the prompt and what the saved model writes
    after it, as text (``printable``: bytes that are not UTF-8 print as U+FFFD, control
    characters as spaces). Returns the exit status.

    Raises:
        CliError: for an empty prompt, or a file that is not a run file of
            ``memgrad train --save``.
    """
    prompt = args.prompt.encode("utf-8")
    if not prompt:
        raise CliError("--prompt is empty; give at least one character, e.g. --prompt 'def '")
    run = load_run(args.path, "")
    model = saved_model(run, "", args.path)
    out = continuation(model, prompt, args.tokens, run["model"]["seq"], args.temperature,
                       args.seed)
    text = printable(prompt + bytes(out.tolist()))
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
