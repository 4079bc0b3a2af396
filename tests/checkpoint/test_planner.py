"""The planner: exact dynamic programming checked against brute force, predictions checked
against the memory tracker."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memgrad as mg
from memgrad.checkpoint import (
    StageProfile,
    checkpoint_sequential,
    plan,
    plan_from_profile,
    predict,
    profile,
    segment_bounds,
)


def all_segmentations(n):
    for mask in itertools.product([False, True], repeat=n - 1):
        cuts = [i + 1 for i, cut in enumerate(mask) if cut]
        edges = [0] + cuts + [n]
        yield list(zip(edges, edges[1:]))


profiles_strategy = st.lists(
    st.builds(
        StageProfile,
        kept=st.integers(0, 1000),
        out=st.integers(1, 300),
        grads=st.integers(0, 200),
        seconds=st.floats(0.001, 1.0),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=150, deadline=None)
@given(profiles=profiles_strategy, fraction=st.floats(0.0, 1.2))
def test_dynamic_programming_matches_brute_force(profiles, fraction):
    options = [(bounds, *predict(profiles, bounds)) for bounds in all_segmentations(len(profiles))]
    least_peak = min(peak for _, peak, _ in options)
    best = plan_from_profile(profiles)
    assert best.predicted_peak == least_peak
    fastest_at_least = min(extra for _, peak, extra in options if peak == least_peak)
    assert best.predicted_extra_seconds == pytest.approx(fastest_at_least)

    most = max(peak for _, peak, _ in options)
    budget = int(least_peak + fraction * (most - least_peak)) if fraction <= 1 else least_peak - 1
    feasible = [extra for _, peak, extra in options if peak <= budget]
    if not feasible:
        with pytest.raises(mg.PlanError, match=f"smallest feasible budget .* {least_peak:,} bytes"):
            plan_from_profile(profiles, budget)
        return
    chosen = plan_from_profile(profiles, budget)
    assert chosen.predicted_peak <= budget
    assert chosen.predicted_extra_seconds == pytest.approx(min(feasible))
    assert predict(profiles, chosen.bounds) == (
        chosen.predicted_peak,
        pytest.approx(chosen.predicted_extra_seconds),
    )


def test_predict_rejects_non_segmentations():
    p = [StageProfile(1, 1, 0, 0.1)] * 3
    for bad in ([(0, 2)], [(0, 1), (2, 3)], [(0, 0), (0, 3)], []):
        with pytest.raises(ValueError, match="not a segmentation"):
            predict(p, bad)


@pytest.fixture(scope="module")
def mlp():
    rng = np.random.default_rng(0)
    n, width, batch = 16, 96, 384
    ws = [
        mg.tensor((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                  requires_grad=True)
        for _ in range(n)
    ]
    layers = [lambda h, w=w: (h @ w).relu() for w in ws]
    x = mg.tensor(rng.standard_normal((batch, width)).astype(np.float32))
    return ws, layers, x


def measured_peak(mlp, segments):
    ws, layers, x = mlp
    for w in ws:
        w.grad = None
    with mg.memory.track() as t:
        h = checkpoint_sequential(layers, segments, x)
        loss = (h * h).mean()
        loss.backward()
        del h, loss
    return t.peak_above_start


def test_profile_and_predictions_match_the_tracker(mlp):
    ws, layers, x = mlp
    for w in ws:
        w.grad = None
    p = plan(layers, x)
    act = 384 * 96 * 4
    assert [s.out for s in p.profiles] == [act] * 16
    assert all(s.kept == act and s.grads == 96 * 96 * 4 for s in p.profiles)
    for segments in (1, 2, 4, 8):
        predicted, _ = predict(p.profiles, segment_bounds(16, segments))
        assert abs(predicted - measured_peak(mlp, segments)) <= 0.10 * predicted
    assert abs(p.predicted_peak - measured_peak(mlp, p)) <= 0.10 * p.predicted_peak


def test_plan_under_a_budget_fits_and_recomputes_least(mlp):
    ws, layers, x = mlp
    plain = measured_peak(mlp, 1)
    budget = int(0.6 * plain)
    for w in ws:
        w.grad = None  # as in measured_peak: backward allocates the gradients
    p = plan(layers, x, budget_bytes=budget)
    assert p.predicted_peak <= budget
    assert measured_peak(mlp, p) <= 1.10 * budget
    # no equal-count segmentation that fits recomputes less
    for segments in range(1, 17):
        peak, extra = predict(p.profiles, segment_bounds(16, segments))
        if peak <= budget:
            assert p.predicted_extra_seconds <= extra + 1e-12
    with pytest.raises(mg.PlanError, match="smallest feasible budget"):
        plan(layers, x, budget_bytes=1000)


def test_checkpoint_sequential_checks_the_plan_fits_the_model(mlp):
    ws, layers, x = mlp
    p = plan(layers[:8], x)
    with pytest.raises(ValueError, match="plan covers 8 layers"):
        checkpoint_sequential(layers, p, x)


def test_gradients_that_exist_are_transients_not_new_bytes(mlp):
    ws, layers, x = mlp
    for w in ws:
        w.grad = None
    allocated = profile(layers, x)
    for w in ws:
        w.grad = mg.zeros_like(w)  # zero_grad(set_to_none=False): accumulated in place
    in_place = profile(layers, x)
    size = 96 * 96 * 4
    assert [p.grads for p in allocated] == [size] * 16
    assert [(p.grads, p.grad_transient) for p in in_place] == [(0, size)] * 16
    for w in ws:
        w.grad = None
