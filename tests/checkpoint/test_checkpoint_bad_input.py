"""Bad input to checkpoint_sequential, CheckpointedSequential and plan: an error that names
the API, what was expected, what came, and the fix; and the sizes plan's budget takes."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn
from memgrad.checkpoint import CheckpointedSequential, checkpoint_sequential, plan


def _layers(n: int = 3) -> list[nn.Module]:
    mg.manual_seed(0)
    return [nn.Linear(4, 4) for _ in range(n)]


X = mg.ones(2, 4)


# ---------------------------------------------------------------------------- functions


@pytest.mark.parametrize("functions, fragments", [
    ([nn.Linear(4, 4), 3], ["checkpoint_sequential: functions[1] is int 3",
                            "not callable", "a layer or a function of one input"]),
    ([nn.Linear(4, 4), nn.Tanh(), "relu"], ["functions[2] is str 'relu'", "not callable"]),
    (nn.Linear(4, 4), ["checkpoint_sequential: functions must be an nn.Sequential or a list "
                       "of callables, got a single Linear", "wrap it: nn.Sequential(module)"]),
    (lambda h: h, ["got a single function", "pass a list of callables"]),
    (5, ["got int 5", "pass a list of callables"]),
    ("abc", ["got str 'abc'", "pass a list of callables"]),
])
def test_functions_that_are_not_a_list_of_callables(functions, fragments):
    with pytest.raises(TypeError) as e:
        checkpoint_sequential(functions, 1, X)
    for fragment in fragments:
        assert fragment in str(e.value)


def test_empty_functions():
    with pytest.raises(ValueError, match="checkpoint_sequential: functions is empty; pass at"):
        checkpoint_sequential([], 1, X)


# ---------------------------------------------------------------------------- segments


@pytest.mark.parametrize("segments", [2.0, 1.5, True, False, "2", None])
def test_segments_of_the_wrong_type(segments):
    with pytest.raises(TypeError) as e:
        checkpoint_sequential(_layers(), segments, X)
    message = str(e.value)
    assert message.startswith("checkpoint_sequential: segments must be an int or a SegmentPlan, "
                              f"got {type(segments).__name__} {segments!r}")
    assert message.endswith("pass a whole number of segments such as 2, or a SegmentPlan from "
                            "memgrad.checkpoint.plan_segments")


def test_a_graph_plan_is_not_segments():
    # the graph planner's Plan decides per value, not by segments: the error names its use
    model = nn.Sequential(*_layers(3))
    with pytest.raises(TypeError) as e:
        checkpoint_sequential(model, plan(model, X, repeats=1), X)
    message = str(e.value)
    assert message.startswith("checkpoint_sequential: segments must be an int or a SegmentPlan, "
                              "got Plan")
    assert "a Plan from memgrad.checkpoint.plan applies to the model itself: with " \
           "plan.apply(model)" in message


@pytest.mark.parametrize("segments", [0, -1, 4, 100])
def test_segments_out_of_range(segments):
    with pytest.raises(ValueError) as e:
        checkpoint_sequential(_layers(3), segments, X)
    assert str(e.value) == (
        "checkpoint_sequential: segments must be between 1 and the number of layers (3), got "
        f"{segments}; pass a count in that range, e.g. 2"
    )


def test_numpy_integer_segments_run_as_the_int():
    layers = _layers(4)
    ref = checkpoint_sequential(layers, 2, X).numpy()
    np.testing.assert_array_equal(checkpoint_sequential(layers, np.int64(2), X).numpy(), ref)
    plain = X
    for layer in layers:
        plain = layer(plain)
    np.testing.assert_array_equal(ref, plain.numpy())


# ---------------------------------------------------------------------------- the module


@pytest.mark.parametrize("layers, fragments", [
    (nn.Linear(4, 4), ["CheckpointedSequential: layers must be an nn.Sequential, got a Linear",
                       "wrap it: nn.Sequential(module)"]),
    ([nn.Linear(4, 4)], ["got a list of layers", "nn.Sequential(*layers)",
                         "checkpoint_sequential for plain functions"]),
    (nn.Sequential(nn.Linear(4, 4)), None),  # the right type: checked for segments next
])
def test_checkpointed_sequential_layers(layers, fragments):
    if fragments is None:
        assert CheckpointedSequential(layers, 1)(X).shape == (2, 4)
        return
    with pytest.raises(TypeError) as e:
        CheckpointedSequential(layers, 1)
    for fragment in fragments:
        assert fragment in str(e.value)


def test_checkpointed_sequential_checks_segments_at_construction():
    with pytest.raises(ValueError, match=r"CheckpointedSequential: segments must be between 1 "
                                         r"and the number of layers \(2\), got 3"):
        CheckpointedSequential(nn.Sequential(*_layers(2)), 3)
    with pytest.raises(TypeError, match="CheckpointedSequential: segments must be an int or a "
                                        "SegmentPlan, got float 2.0"):
        CheckpointedSequential(nn.Sequential(*_layers(2)), 2.0)


# ---------------------------------------------------------------------------- plan budgets


def _stages():
    mg.manual_seed(0)
    ws = [mg.randn(32, 32, requires_grad=True) for _ in range(6)]
    return [lambda h, w=w: (h @ w).tanh() for w in ws], mg.randn(64, 32)


@pytest.mark.parametrize("text, nbytes", [
    ("64MB", 64 * 10**6), ("1.5GiB", 3 * 2**29), ("100 kB", 10**5), ("250000", 250_000),
])
def test_budget_as_a_size(text, nbytes):
    stages, x = _stages()
    by_text, by_int = plan(stages, x, budget_bytes=text), plan(stages, x, budget_bytes=nbytes)
    assert by_text.budget_bytes == nbytes
    assert by_text.bounds == by_int.bounds


def test_budget_as_a_float_or_numpy_integer_is_whole_bytes():
    stages, x = _stages()
    assert plan(stages, x, budget_bytes=1e6).budget_bytes == 1_000_000
    assert plan(stages, x, budget_bytes=2.5e5 + 0.75).budget_bytes == 250_000
    assert plan(stages, x, budget_bytes=np.int64(300_000)).budget_bytes == 300_000


@pytest.mark.parametrize("budget, exc, fragments", [
    (float("nan"), mg.PlanError, ["must be a finite number of at least 1 byte, got nan"]),
    (float("inf"), mg.PlanError, ["got inf"]),
    (-5, mg.PlanError, ["got -5"]),
    (0, mg.PlanError, ["got 0;"]),
    (0.5, mg.PlanError, ["got 0.5"]),
    (True, TypeError, ["must be a number of bytes or a size, got bool True"]),
    ([10**6], TypeError, ["got list [1000000]"]),
    ("lots", mg.PlanError, ["plan: budget_bytes: cannot read the size 'lots'"]),
    ("64XB", mg.PlanError, ["unknown unit 'XB'"]),
    ("25%", mg.PlanError, ["'25%' is a percentage, but plan has nothing to take it of"]),
])
def test_bad_budgets(budget, exc, fragments):
    stages, x = _stages()
    with pytest.raises(exc) as e:
        plan(stages, x, budget_bytes=budget)
    message = str(e.value)
    assert message.startswith("plan: budget_bytes")
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert "'64MB'" in message or "64MB" in message  # the fix is shown


def test_bad_budget_fails_before_profiling():
    calls = []

    def stage(h):
        calls.append(1)
        return h

    with pytest.raises(mg.PlanError):
        plan([stage, stage], X, budget_bytes=float("nan"))
    assert calls == []


def test_plan_from_profile_checks_the_budget_alike():
    from memgrad.checkpoint import StageProfile, plan_from_profile

    profiles = [StageProfile(100, 100, 0, 1.0)] * 4
    assert plan_from_profile(profiles, "1MB").budget_bytes == 10**6
    with pytest.raises(mg.PlanError, match="got nan"):
        plan_from_profile(profiles, float("nan"))


@pytest.mark.parametrize("bounds", [[(0, 2), (3, 5)], [(0, 4), (2, 5)], [(1, 5)], [(0, 0), (0, 5)]])
def test_a_segment_plan_with_gaps_or_overlaps_is_refused(bounds):
    # a layer skipped or run twice would give another output without a word
    from memgrad.checkpoint import SegmentPlan

    layers = [lambda h, k=k: h + 10**k for k in range(5)]
    with pytest.raises(ValueError, match="checkpoint_sequential: the plan's segments must cover "
                                         "the layers in order"):
        checkpoint_sequential(layers, SegmentPlan(bounds, 0, 0.0), mg.zeros(1))
    assert checkpoint_sequential(layers, SegmentPlan([(0, 2), (2, 5)], 0, 0.0),
                                 mg.zeros(1)).tolist() == [11111.0]


def test_pytorchs_names_for_checkpoint_errors_and_save_on_cpu():
    # torch.utils.checkpoint.CheckpointError, and save_on_cpu's device_type keyword
    from memgrad.checkpoint import CheckpointError

    assert CheckpointError is mg.CheckpointError
    x = mg.ones(3, requires_grad=True)
    with mg.autograd.graph.save_on_cpu(pin_memory=True, device_type="cuda"):
        y = (x * x).sum()
    y.backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
