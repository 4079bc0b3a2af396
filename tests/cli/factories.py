"""Model factories for the command-line tests: ``memgrad tune tests.cli.factories:NAME``."""

from __future__ import annotations

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn

__all__ = ["tiny", "fails", "pair", "not_sequential", "bad_loss"]


def _blocks(n: int = 6, width: int = 32) -> nn.Sequential:
    mg.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n)])


def tiny() -> tuple:
    """Six small Linear + Tanh blocks whose activations outweigh their parameters."""
    model = _blocks()
    x, target = mg.randn(256, 32), mg.randn(256, 32)
    return model, x, lambda out: F.mse_loss(out, target)


def fails() -> tuple:
    """A factory that raises."""
    raise RuntimeError("the data set is missing")


def pair() -> tuple:
    """Returns two things instead of three."""
    return _blocks(), mg.randn(4, 32)


def not_sequential() -> tuple:
    """The model is a single layer, not an nn.Sequential of stages."""
    return nn.Linear(32, 32), mg.randn(4, 32), lambda out: out.sum()


def bad_loss() -> tuple:
    """The loss is not a scalar, so backward fails."""
    return _blocks(), mg.randn(4, 32), lambda out: out * 2
