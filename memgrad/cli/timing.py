"""Honest step times for ``memgrad tune`` and ``memgrad train``: warm-up runs that are not
counted, timed rounds that run the plain step and every configuration in turn (interleaved,
in an order that changes from round to round), and per configuration the median time and
the median and spread of its per-round ratio to the plain step. Two configurations whose
ratio spreads overlap are a tie: the measurements cannot tell them apart.

NOTE [ Paired timing ]
A loaded machine changes speed over seconds, by more than the differences a checkpointing
configuration makes. Timing each configuration once, or keeping each one's best time, lets
that drift decide: a configuration timed while the machine was quiet looks faster than the
plain step, which does strictly less work. So every round times the plain step and each
configuration back to back, and each configuration's overhead is the median over rounds of
``its time / the plain step's time`` in the same round: the drift between rounds cancels in
the ratio. The spread of the ratios (the quartiles from five rounds on, the least and the
most with fewer) is the noise left; a ratio interval that contains 1 is a tie with the plain
step, and two configurations whose intervals overlap are tied with each other. The order
within a round turns by one place every two rounds and runs backwards every other round, so
that no configuration always follows the same one (a step can leave the caches and the
allocator warm or cold for the next). Warm-up rounds run every configuration once, untimed,
before the first timed round: compiled kernels, ``.grad`` buffers and the allocator's free
lists are then what training sees.

Example:
    >>> t = summarize([[1.0, 1.2], [2.0, 2.4], [1.0, 1.1]])
    >>> [round(x.ratio, 2) for x in t], t[1].low, t[1].high
    ([1.0, 1.2], 1.1, 1.2)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "QUARTILES_FROM",
    "Timing",
    "StepTimes",
    "step_times",
    "round_order",
    "timed_rounds",
    "summarize",
    "spread",
    "spread_name",
    "tied",
    "format_overhead",
]

QUARTILES_FROM = 5  # rounds from which the spread is the interquartile range, not min-max


@dataclass(frozen=True)
class Timing:
    """What the timed rounds say about one configuration: ``seconds``, the median of its
    times; ``ratio``, the median of its per-round ratios to the plain step (1.0 for the
    plain step itself); ``low`` and ``high``, the spread of those ratios (``spread``);
    ``rounds``, its times round by round."""

    seconds: float
    ratio: float
    low: float
    high: float
    rounds: tuple[float, ...]

    @property
    def overhead(self) -> float:
        """The median ratio as a fraction more (negative: less) than the plain step."""
        return self.ratio - 1.0

    @property
    def ties_plain(self) -> bool:
        """Whether the ratio interval contains 1: inside the noise of the plain step."""
        return self.low <= 1.0 <= self.high


def spread(values: Sequence[float]) -> tuple[float, float]:
    """The spread of ``values``: the first and third quartiles from ``QUARTILES_FROM``
    values on, the least and the most below that.

    Example:
        >>> spread([3.0, 1.0, 2.0]), spread([1.0, 2.0, 3.0, 4.0, 5.0])
        ((1.0, 3.0), (2.0, 4.0))
    """
    if not values:
        raise ValueError("spread: no values")
    if len(values) < QUARTILES_FROM:
        return min(values), max(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def spread_name(rounds: int) -> str:
    """How ``spread`` measures the spread of ``rounds`` values, for a table's legend.

    Example:
        >>> spread_name(3), spread_name(5)
        ('min-max', 'interquartile range')
    """
    return "interquartile range" if rounds >= QUARTILES_FROM else "min-max"


def round_order(count: int, r: int) -> list[int]:
    """The order in which round ``r`` runs configurations ``0 .. count - 1``: turned by one
    place every two rounds, and backwards in odd rounds (NOTE [ Paired timing ]).

    Example:
        >>> [round_order(3, r) for r in range(4)]
        [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1]]
    """
    shift = (r // 2) % count if count else 0
    order = list(range(shift, count)) + list(range(shift))
    return order[::-1] if r % 2 else order


def timed_rounds(
    run: Callable[[int], float], count: int, repeats: int, warmup: int = 1
) -> list[list[float]]:
    """Call ``run(i)`` (which runs configuration ``i`` and returns its seconds) for every
    configuration in ``warmup`` untimed rounds, then in ``repeats`` timed rounds in
    ``round_order``. Returns ``rounds[r][i]``, the seconds of configuration ``i`` in timed
    round ``r``; the warm-up rounds' times are dropped.

    Example:
        >>> times = iter([9.0, 9.0, 1.0, 2.0, 4.0, 3.0])
        >>> timed_rounds(lambda i: next(times), 2, 2)
        [[1.0, 2.0], [3.0, 4.0]]
    """
    if repeats < 1:
        raise ValueError(f"timed_rounds: repeats must be at least 1, got {repeats}")
    for r in range(warmup):
        for i in round_order(count, r):
            run(i)
    rounds = []
    for r in range(repeats):
        row = [0.0] * count
        for i in round_order(count, r):
            row[i] = run(i)
        rounds.append(row)
    return rounds


def summarize(rounds: Sequence[Sequence[float]], reference: int = 0) -> list[Timing]:
    """Per configuration, the ``Timing`` of ``rounds[r][i]`` (seconds of configuration ``i``
    in round ``r``) against configuration ``reference`` (the plain step) of the same round.

    Example:
        >>> plain, other = summarize([[1.0, 0.5], [1.0, 1.4], [2.0, 2.0]])
        >>> other.seconds, other.ratio, (other.low, other.high), other.ties_plain
        (1.4, 1.0, (0.5, 1.4), True)
    """
    if not rounds:
        raise ValueError("summarize: no timed rounds")
    out = []
    for i in range(len(rounds[0])):
        times = tuple(row[i] for row in rounds)
        ratios = [row[i] / row[reference] for row in rounds]
        low, high = spread(ratios)
        out.append(Timing(statistics.median(times), statistics.median(ratios), low, high,
                          times))
    return out


def tied(a: Timing, b: Timing) -> bool:
    """Whether the ratio intervals of ``a`` and ``b`` overlap: the rounds cannot tell which
    is faster.

    Example:
        >>> t = summarize([[1.0, 1.1, 1.5], [1.0, 1.3, 1.6]])
        >>> tied(t[1], t[2]), tied(t[0], t[1])
        (False, False)
    """
    return a.low <= b.high and b.low <= a.high


def format_overhead(t: Timing) -> str:
    """The overhead against the plain step as the table prints it: ``tie ±x%`` when the
    spread holds no difference (``x`` its widest reach from 0), else the median with the
    spread, ``+23% (+18..+30)``.

    Example:
        >>> format_overhead(Timing(0.4, 0.39, 0.35, 1.05, ()))
        'tie ±65%'
        >>> format_overhead(Timing(1.2, 1.23, 1.18, 1.30, ()))
        '+23% (+18..+30)'
    """
    lo, mid, hi = (100 * (v - 1.0) for v in (t.low, t.ratio, t.high))
    if t.ties_plain:
        return f"tie ±{max(abs(lo), abs(hi)):.0f}%"
    return f"{mid:+.0f}% ({lo:+.0f}..{hi:+.0f})"


@dataclass(frozen=True)
class StepTimes:
    """The step times of a training run without its first ``warmup`` steps: their
    ``median``, their spread ``low`` .. ``high`` (``spread``) and how many ``count``."""

    median: float
    low: float
    high: float
    count: int
    warmup: int


def step_times(seconds: Sequence[float], warmup: int) -> StepTimes | None:
    """The statistics of ``seconds`` (one per training step, in order) after the first
    ``warmup`` steps, which compile kernels and make the optimizer's state; None when no
    step is left.

    Example:
        >>> step_times([9.0, 5.0, 1.0, 3.0, 2.0], warmup=2)
        StepTimes(median=2.0, low=1.0, high=3.0, count=3, warmup=2)
    """
    counted = list(seconds[warmup:])
    if not counted:
        return None
    low, high = spread(counted)
    return StepTimes(statistics.median(counted), low, high, len(counted), warmup)
