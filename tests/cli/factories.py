"""Model factories for the command-line tests: ``memgrad tune tests.cli.factories:NAME``."""

from __future__ import annotations

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn

__all__ = ["tiny", "fails", "pair", "not_sequential", "not_module", "in_place", "residual",
           "bad_loss"]


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
    """The model is a single layer, not an nn.Sequential (planned all the same)."""
    return nn.Linear(32, 32), mg.randn(4, 32), lambda out: out.sum()


def not_module() -> tuple:
    """The model is a plain function, not an nn.Module."""
    return (lambda x: x * 2), mg.randn(4, 32), lambda out: out.sum()


class _InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x: mg.Tensor) -> mg.Tensor:
        h = self.lin(x)
        h.mul_(2)
        return h


def in_place() -> tuple:
    """The forward changes a tensor in place, which the planner refuses."""
    return _InPlace(), mg.randn(4, 32), lambda out: out.sum()


class _Residual(nn.Module):
    """Not a Sequential: blocks in a ModuleList with skip connections."""

    def __init__(self, width: int = 32, n: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width),
                                                   nn.GELU()) for _ in range(n)])
        self.head = nn.Linear(width, 4)

    def forward(self, x: mg.Tensor) -> mg.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def residual() -> tuple:
    """A residual network written as one Module."""
    mg.manual_seed(0)
    x, target = mg.randn(128, 32), mg.randn(128, 4)
    return _Residual(), x, lambda out: F.mse_loss(out, target)


def bad_loss() -> tuple:
    """The loss is not a scalar, so backward fails."""
    return _blocks(), mg.randn(4, 32), lambda out: out * 2
