"""The global random generator: ``manual_seed``, ``get_rng_state``, ``set_rng_state`` and
``fork_rng``. Every random factory and dropout mask draws from it, so one seed makes a run
reproducible and a saved state replays the same draws (the checkpoint recompute relies on
this). ``Generator`` is a private stream of draws with its own seed, PyTorch's
``torch.Generator``, for the APIs that take ``generator=`` (``DataLoader``,
``random_split``)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "manual_seed", "seed", "get_rng_state", "set_rng_state", "fork_rng", "generator", "Generator",
]

_DEFAULT_SEED = 0x5EED


class _Global:
    gen = np.random.Generator(np.random.PCG64(_DEFAULT_SEED))


def generator(gen: Generator | None = None) -> np.random.Generator:
    """The ``numpy.random.Generator`` that a draw with ``generator=gen`` uses: ``gen``'s, or
    the global one when ``gen`` is None (draw from it, do not keep it: ``manual_seed``
    replaces it).

    Example:
        >>> import memgrad as mg
        >>> a = generator(mg.Generator().manual_seed(3)).integers(1000)
        >>> b = generator(mg.Generator().manual_seed(3)).integers(1000)
        >>> bool(a == b)
        True
    """
    if gen is None:
        return _Global.gen
    if not isinstance(gen, Generator):
        raise TypeError(
            f"generator: expected an mg.Generator or None, got {type(gen).__name__}; make one "
            "with mg.Generator().manual_seed(seed)"
        )
    return gen._gen


def _seed_value(api: str, seed: object) -> int:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_)):
        raise TypeError(f"{api}: seed must be an int, got {type(seed).__name__}")
    return int(seed) & (2**128 - 1)


def _from_state(api: str, state: object) -> np.random.Generator:
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise TypeError(
            f"{api}: expected a state returned by mg.get_rng_state() or Generator.get_state(), "
            f"got {type(state).__name__}"
        )
    bitgen = np.random.PCG64()
    try:
        bitgen.state = copy.deepcopy(state)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"{api}: the state is not a generator state ({e})") from None
    return np.random.Generator(bitgen)


class Generator:
    """A stream of random draws with its own state, apart from the global generator:
    PyTorch's ``torch.Generator``, backed by NumPy's PCG64. Pass it as ``generator=`` to
    ``DataLoader`` (the shuffling order) or ``random_split``; the same seed gives the same
    draws, and drawing from it leaves the global generator as it was.

    Args:
        device: ``"cpu"``, the only device memgrad runs on.

    Example:
        >>> import memgrad as mg
        >>> g = mg.Generator().manual_seed(42)
        >>> g.initial_seed()
        42
        >>> state = g.get_state()
        >>> a = mg.random.generator(g).random()
        >>> _ = g.set_state(state)
        >>> a == mg.random.generator(g).random()
        True
    """

    __slots__ = ("_gen", "_seed")

    _DEFAULT_SEED = 67280421310721  # PyTorch's default seed of a new generator

    def __init__(self, device: str = "cpu") -> None:
        if str(device) != "cpu":
            raise ValueError(
                f"Generator: memgrad runs on the CPU, got device={device!r}; pass "
                "device='cpu' or leave it out"
            )
        self.manual_seed(self._DEFAULT_SEED)

    @property
    def device(self) -> str:
        """Where the generator draws: always ``"cpu"``."""
        return "cpu"

    def manual_seed(self, seed: int) -> Generator:
        """Seed the generator; returns it, so ``mg.Generator().manual_seed(0)`` is one line.

        Example:
            >>> import memgrad as mg
            >>> mg.Generator().manual_seed(7).initial_seed()
            7
        """
        self._seed = _seed_value("Generator.manual_seed", seed)
        self._gen = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def seed(self) -> int:
        """Seed the generator from the operating system; returns the seed used."""
        return self.manual_seed(int(np.random.SeedSequence().entropy) & (2**63 - 1))._seed

    def initial_seed(self) -> int:
        """The seed the generator was last seeded with."""
        return self._seed

    def get_state(self) -> dict[str, Any]:
        """A copy of the generator's state, for ``set_state`` (and ``mg.save``: the state
        is plain ints and strings)."""
        return copy.deepcopy(self._gen.bit_generator.state)

    def set_state(self, new_state: dict[str, Any]) -> Generator:
        """Restore a state returned by ``get_state`` (or ``mg.get_rng_state``); returns the
        generator."""
        self._gen = _from_state("Generator.set_state", new_state)
        return self

    def __repr__(self) -> str:
        return f"Generator(device='cpu', initial_seed={self._seed})"


def manual_seed(seed: int) -> None:
    """Seed the global generator.

    Example:
        >>> import memgrad as mg
        >>> mg.manual_seed(0); a = mg.randn(3)
        >>> mg.manual_seed(0); b = mg.randn(3)
        >>> bool((a == b).all())
        True
    """
    _Global.gen = np.random.Generator(np.random.PCG64(_seed_value("manual_seed", seed)))


def seed() -> int:
    """Seed the global generator from the operating system; returns the seed used."""
    s = int(np.random.SeedSequence().entropy) & (2**63 - 1)
    manual_seed(s)
    return s


def get_rng_state() -> dict[str, Any]:
    """A copy of the global generator's state, for ``set_rng_state``."""
    return _Global.gen.bit_generator.state  # NumPy builds a new dict on every read


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state returned by ``get_rng_state``."""
    if not isinstance(state, dict) or "state" not in state:
        raise TypeError(
            "set_rng_state: expected a state returned by mg.get_rng_state(), got "
            f"{type(state).__name__}"
        )
    # set in place: the state's values are read, the dict is not kept, and a new generator
    # would cost ten times as much (a checkpoint sets the state twice per recomputation)
    _Global.gen.bit_generator.state = state


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
