"""The global random generator: ``manual_seed``, ``get_rng_state``, ``set_rng_state`` and
``fork_rng``. Every random factory and dropout mask draws from it, so one seed makes a run
reproducible and a saved state replays the same draws (the checkpoint recompute relies on
this)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["manual_seed", "seed", "get_rng_state", "set_rng_state", "fork_rng", "generator"]

_DEFAULT_SEED = 0x5EED


class _Global:
    gen = np.random.Generator(np.random.PCG64(_DEFAULT_SEED))


def generator() -> np.random.Generator:
    """The global ``numpy.random.Generator`` (draw from it, do not keep it: ``manual_seed``
    replaces it)."""
    return _Global.gen


def manual_seed(seed: int) -> None:
    """Seed the global generator.

    Example:
        >>> import memgrad as mg
        >>> mg.manual_seed(0); a = mg.randn(3)
        >>> mg.manual_seed(0); b = mg.randn(3)
        >>> bool((a == b).all())
        True
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    _Global.gen = np.random.Generator(np.random.PCG64(int(seed) & (2**128 - 1)))


def seed() -> int:
    """Seed the global generator from the operating system; returns the seed used."""
    s = int(np.random.SeedSequence().entropy) & (2**63 - 1)
    manual_seed(s)
    return s


def get_rng_state() -> dict[str, Any]:
    """A copy of the global generator's state, for ``set_rng_state``."""
    return copy.deepcopy(_Global.gen.bit_generator.state)


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state returned by ``get_rng_state``."""
    if not isinstance(state, dict) or "state" not in state:
        raise TypeError(
            "set_rng_state: expected a state returned by mg.get_rng_state(), got "
            f"{type(state).__name__}"
        )
    bitgen = np.random.PCG64()
    bitgen.state = copy.deepcopy(state)
    _Global.gen = np.random.Generator(bitgen)


@contextlib.contextmanager
def fork_rng(enabled: bool = True) -> Iterator[None]:
    """Context manager: draws inside it do not change the global generator's state after it.

    Example:
        >>> import memgrad as mg
        >>> mg.manual_seed(1)
        >>> with mg.random.fork_rng():
        ...     _ = mg.randn(5)
        >>> a = mg.randn(2); mg.manual_seed(1); b = mg.randn(2)
        >>> bool((a == b).all())
        True
    """
    if not enabled:
        yield
        return
    saved = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)
