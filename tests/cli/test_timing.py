"""Paired timing (memgrad.cli.timing) and what ``memgrad tune`` makes of it, on handmade
timings whose answer is known: medians, spreads, ties, the recommendation and the table."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console

from memgrad.cli.timing import (
    Timing,
    format_overhead,
    round_order,
    spread,
    spread_name,
    step_times,
    summarize,
    tied,
    timed_rounds,
)
from memgrad.cli.train import WARMUP_STEPS, _steps_line
from memgrad.cli.tune import Config, TuneResult, _mark_ties, _recommend, _table


def test_round_order_is_a_permutation_and_no_configuration_always_follows_the_same_one():
    for count in (2, 3, 5):
        orders = [round_order(count, r) for r in range(2 * count)]
        assert all(sorted(o) == list(range(count)) for o in orders)
        for i in range(count):
            before = {o[o.index(i) - 1] if o.index(i) else None for o in orders}
            assert len(before) > 1, (count, i)
    assert round_order(3, 1) == [2, 1, 0]  # odd rounds run backwards


def test_warm_up_rounds_are_run_but_not_in_the_statistics():
    calls: list[int] = []

    def run(i: int) -> float:
        calls.append(i)
        # the first call of each configuration is its warm-up: slow, as a cold step is
        return 100.0 if calls.count(i) == 1 else 1.0 + i + 0.01 * len(calls)

    rounds = timed_rounds(run, 3, repeats=4, warmup=1)
    assert len(calls) == 3 * 5 and sorted(calls[:3]) == [0, 1, 2]
    assert len(rounds) == 4 and all(len(row) == 3 for row in rounds)
    assert max(max(row) for row in rounds) < 100.0
    timings = summarize(rounds)
    assert all(t.seconds < 100.0 and t.high < 100.0 for t in timings)
    # each timed round ran every configuration once, in round_order
    for r in range(4):
        assert calls[3 * (r + 1):3 * (r + 2)] == round_order(3, r)


def test_summary_medians_and_spreads_against_numpy():
    rng = np.random.default_rng(0)
    for repeats in (1, 3, 4, 5, 9):
        rounds = rng.uniform(0.5, 2.0, size=(repeats, 4))
        timings = summarize(rounds.tolist())
        ratios = rounds / rounds[:, :1]
        for i, t in enumerate(timings):
            assert t.seconds == pytest.approx(np.median(rounds[:, i]))
            assert t.ratio == pytest.approx(np.median(ratios[:, i]))
            if repeats >= 5:  # quartiles
                lo, hi = np.percentile(ratios[:, i], [25, 75])
            else:
                lo, hi = ratios[:, i].min(), ratios[:, i].max()
            assert (t.low, t.high) == (pytest.approx(lo), pytest.approx(hi))
            assert t.rounds == tuple(rounds[:, i])
        assert timings[0].ratio == timings[0].low == timings[0].high == 1.0
    assert spread_name(4) == "min-max" and spread_name(5) == "interquartile range"
    with pytest.raises(ValueError):
        spread([])


def test_the_ratio_is_paired_round_by_round():
    # the machine is twice as slow in the second round: the best or the median time alone
    # would call b faster than the plain step; paired, b is 10% slower in every round
    rounds = [[1.0, 1.1, 0.9], [2.0, 2.2, 1.0]]
    plain, b, c = summarize(rounds)
    assert b.seconds > plain.seconds and b.ratio == pytest.approx(1.1)
    assert (b.low, b.high) == (pytest.approx(1.1), pytest.approx(1.1)) and not b.ties_plain
    assert format_overhead(b) == "+10% (+10..+10)"
    assert c.ties_plain is False and c.high == pytest.approx(0.9)  # faster in both rounds


def test_a_difference_inside_the_spread_is_a_tie_and_never_printed_as_a_speedup():
    # median -61%, but one round of five was slower than plain: the spread reaches past 0
    noisy = Timing(0.39, 0.39, 0.30, 1.20, ())
    assert noisy.ties_plain
    text = format_overhead(noisy)
    assert text == "tie ±70%" and "-61" not in text
    fast = Timing(0.39, 0.39, 0.35, 0.45, ())  # a real speedup, outside the spread
    assert not fast.ties_plain and format_overhead(fast) == "-61% (-65..-55)"


def test_ties_are_overlapping_ratio_intervals():
    a = Timing(1.0, 1.2, 1.1, 1.3, ())
    b = Timing(1.0, 1.35, 1.3, 1.5, ())  # touches a's interval at 1.3
    c = Timing(1.0, 1.6, 1.55, 1.7, ())
    assert tied(a, b) and tied(b, a) and tied(b, c) is False and tied(a, c) is False


def _config(name: str, segments: int, peak: int, extra: float, diff: float = 0.0) -> Config:
    bounds = [(k, k + 1) for k in range(segments - 1)] + [(segments - 1, 16)]
    kind = "plain" if name == "plain" else "equal"
    return Config(name, kind, bounds, peak=peak, predicted_peak=peak,
                  predicted_extra_seconds=extra, grad_diff=diff)


def _timed(configs: list[Config], rounds: list[list[float]]) -> list[Config]:
    for c, t in zip(configs, summarize(rounds)):
        c.timing = t
    _mark_ties(configs)
    return configs


# per round: plain, 2 segments, 4 segments, 16 segments
ROUNDS = [
    [1.00, 1.05, 1.02, 1.60],
    [1.00, 1.15, 1.00, 1.70],
    [1.00, 0.98, 1.10, 1.65],
]


def _sweep() -> list[Config]:
    return _timed([_config("plain", 1, 100, 0.0), _config("2 segments", 2, 70, 0.2),
                   _config("4 segments", 4, 50, 0.3), _config("16 segments", 16, 40, 0.9)],
                  ROUNDS)


def test_ties_between_configurations_are_marked_both_ways():
    plain, two, four, sixteen = _sweep()
    assert two.tied_with == ["plain", "4 segments"] and four.tied_with == ["plain", "2 segments"]
    assert plain.tied_with == ["2 segments", "4 segments"] and sixteen.tied_with == []


def test_recommend_prefers_the_fewest_recomputations_among_ties_with_the_fastest():
    plain, two, four, sixteen = _sweep()
    # under 75: 2 and 4 segments fit; 4 segments is the fastest (median ratio 1.02) but ties
    # with 2 segments (1.05), which recomputes less
    best, rule = _recommend([plain, two, four, sixteen], [("75%", 75)])
    assert best is two
    assert "least predicted recompute time" in rule and "4 segments, the fastest" in rule
    # only 16 segments fits 45: nothing ties with it, so it is the one
    best, rule = _recommend([plain, two, four, sixteen], [("45%", 45)])
    assert best is sixteen and not rule.endswith("ties with it)")
    # every configuration fits: plain ties with the fastest and recomputes nothing
    best, _ = _recommend([plain, two, four, sixteen], [("200%", 200)])
    assert best is plain


def test_recommend_takes_the_fastest_when_it_ties_with_nothing():
    configs = _timed([_config("plain", 1, 100, 0.0), _config("2 segments", 2, 70, 0.2),
                      _config("4 segments", 4, 50, 0.3)],
                     [[1.0, 1.50, 1.20], [1.0, 1.55, 1.22], [1.0, 1.60, 1.25]])
    best, rule = _recommend(configs, [("75%", 75)])
    assert best.name == "4 segments" and "ties with it" not in rule


def test_recommend_keeps_the_budget_rules():
    plain, two, four, sixteen = _sweep()
    best, rule = _recommend([plain, two, four], [("40%", 40), ("60%", 60)])
    assert best is four and "none fits 40%" in rule
    best, rule = _recommend([plain, two, four], [("10%", 10)])
    assert best is four and "least measured peak" in rule
    inexact = _timed([_config("plain", 1, 100, 0.0), _config("inexact", 2, 10, 0.0, 1e-3)],
                     [[1.0, 0.5], [1.0, 0.5]])[1]
    best, _ = _recommend([plain, two, inexact], [("75%", 75)])
    assert best is two  # gradients that differ from the plain run are never recommended


def _render(configs: list[Config], rounds: int) -> str:
    recommended, rule = _recommend(configs, [("75%", 75)])
    result = TuneResult("toy", "toy", 16, configs, [("75%", 75)], recommended, rule,
                        rounds=rounds, warmup=1)
    out = Console(record=True, width=120)
    out.print(_table(result))
    return out.export_text()


def test_the_table_shows_the_median_the_spread_and_ties():
    text = _render(_sweep(), rounds=3)
    flat = " ".join(text.split())
    assert "vs plain (min-max)" in text and "median of 3 timed rounds" in flat
    assert "after 1 untimed warm-up round" in flat
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    # 2 segments: ratios 1.05, 1.15, 0.98 -> median 1.05 inside min-max 0.98..1.15: a tie
    assert "1050 ms" in rows["2 segments"] and "tie ±15%" in rows["2 segments"]
    assert "-2%" not in rows["2 segments"]
    # 16 segments: ratios 1.60, 1.70, 1.65 -> +65% (+60..+70)
    assert "+65% (+60..+70)" in rows["16 segments"] and "1650 ms" in rows["16 segments"]
    assert "reference" in rows["plain"]
    assert "ties (spreads overlap): plain ~ 2 segments, 4 segments; 2 segments ~ 4 segments" \
        in flat
    assert "recommended: 2 segments" in text


def test_the_table_names_the_interquartile_range_from_five_rounds():
    configs = _timed([_config("plain", 1, 100, 0.0), _config("2 segments", 2, 70, 0.2)],
                     [[1.0, r] for r in (1.1, 1.2, 1.3, 1.4, 1.5)])
    text = _render(configs, rounds=5)
    assert "vs plain (IQR)" in text and "interquartile range" in " ".join(text.split())
    assert "+30% (+20..+40)" in text


def test_training_step_times_leave_out_the_warm_up_steps():
    seconds = [5.0, 2.0, 0.30, 0.10, 0.20, 0.50, 0.40]  # two slow warm-up steps first
    t = step_times(seconds, warmup=2)
    assert t is not None and t.count == 5 and t.warmup == 2
    assert t.median == pytest.approx(0.30)  # of 0.10 .. 0.50, not of all seven
    assert (t.low, t.high) == (pytest.approx(0.20), pytest.approx(0.40))  # quartiles
    few = step_times([5.0, 2.0, 0.3, 0.1], warmup=2)
    assert few is not None and (few.median, few.low, few.high) == (
        pytest.approx(0.2), 0.1, 0.3)  # min-max of two
    assert step_times([5.0, 2.0], warmup=2) is None
    line = _steps_line(t)
    assert "median 300 ms" in line and "interquartile range 200..400 ms" in line
    assert "over 5 steps after the first 2 (warm-up, not counted)" in line
    assert "5000" not in line and "no step time" in _steps_line(None)
    assert WARMUP_STEPS >= 1
