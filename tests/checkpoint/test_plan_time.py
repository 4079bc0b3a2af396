"""The time side of the graph planner's cost model (NOTE [ Step time ] in graph_profile.py):
the calibration's in-situ replay times, the profile's arithmetic on them, and a plan's
predicted step time against its parts computed independently. No timing assertions: the
clocks here are counters or the figures the profile measured."""

import itertools

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn
from memgrad.checkpoint import graph_runtime
from memgrad.checkpoint.graph_plan import plan_from_graph_profile
from memgrad.checkpoint.graph_profile import _replaying, _time_steps, profile_graph


def _model(depth=6, width=32, batch=16):
    mg.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh())
                            for _ in range(depth)])
    x = mg.randn(batch, width)
    model(x).sum().backward()  # gradients exist, zeroed in place by the profile's steps
    return model, x


def _zero(model):
    for p in model.parameters():
        p.grad.numpy()[...] = 0


def _closure(profile, j, kept):
    """The ops stage j rebuilds in its backward when it kept the roots ``kept``: the values
    its nodes save whose buffers are neither kept nor its input or output nor from outside
    the stage, and the producers of those, recursively."""
    ops, st = profile.ops, profile.stages[j]
    inside = range(st.lo, st.hi)

    def missing(v):
        r = ops[v].root
        return r in inside and r not in kept and r not in (st.input_root, st.output_root)

    todo = [v for k in inside for v in ops[k].saved if missing(v)]
    done = set()
    while todo:
        v = todo.pop()
        if v not in done:
            done.add(v)
            todo += [w for kind, w in ops[v].args if kind == "v" and w in inside and missing(w)]
    return done


def test_the_calibration_times_each_replayed_op_once_with_the_given_clock(monkeypatch):
    model, x = _model()
    profile = profile_graph(model, (x,), repeats=1)
    ticks = itertools.count()
    run, timings = _replaying(profile, model, lambda: float(next(ticks)))
    replayed = []
    apply_op = graph_runtime.apply_op

    def counting(prim, args, params):  # every replay of the runtime goes through apply_op
        replayed.append(prim.name)
        return apply_op(prim, args, params)

    monkeypatch.setattr(graph_runtime, "apply_op", counting)
    _zero(model)
    run(x).sum().backward()
    assert len(timings) == 1 and len(timings[0]) == len(replayed) > 0
    assert sorted(profile.ops[k].name for k in timings[0]) == sorted(replayed)
    assert all(seconds == 1.0 for seconds in timings[0].values())  # two ticks per op
    # each stage but the last is replayed keeping all: the linear layers among its ops
    assert {k for k in timings[0] if profile.ops[k].name == "linear"} == set(
        range(2, profile.stages[-1].lo, 2))


def test_the_profile_takes_replay_means_and_the_overhead_from_the_pairs():
    model, x = _model(depth=3)
    profile = profile_graph(model, (x,), repeats=1)
    now = [0.0]
    timings = []
    replays = [{0: 1.0, 1: 2.0}, {0: 1.5, 1: 4.0}, {0: 2.5, 1: 2.0}]  # warm-up, then 2 pairs
    overheads = [9.0, 0.25, 0.75]

    def plain():
        now[0] += 10.0

    def replaying():
        timings.append(replays[len(timings)])
        now[0] += 10.0 + sum(timings[-1].values()) + overheads[len(timings) - 1]

    _time_steps(profile, plain, replaying, timings, lambda: now[0], repeats=2)
    ops = profile.ops
    assert profile.step_seconds == 10.0
    assert profile.overhead_seconds == pytest.approx(0.5)  # median of 0.25 and 0.75
    assert ops[0].recompute_seconds == pytest.approx(2.0)  # mean of 1.5 and 2.5
    assert ops[1].recompute_seconds == pytest.approx(3.0)
    ratio = 5.0 / (ops[0].seconds + ops[1].seconds)  # replay over forward, where measured
    for op in ops[2:]:
        assert op.recompute_seconds == pytest.approx(op.seconds * ratio)
    for st in profile.stages:
        assert st.recompute_seconds == pytest.approx(
            sum(ops[k].recompute_seconds for k in range(st.lo, st.hi)))


@pytest.mark.parametrize("fraction", [None, 0.4, 0.6])
def test_a_plans_predicted_step_time_is_the_sum_of_its_parts(fraction):
    model, x = _model(depth=8)
    profile = profile_graph(model, (x,), repeats=1, clock="cpu")
    assert profile.clock == "cpu"
    budget = None if fraction is None else int(fraction * profile.plain_peak)
    p = plan_from_graph_profile(profile, budget)
    ops = profile.ops
    extra = 0.0
    for j, st in enumerate(profile.stages):
        runs = [a for a in p.actions if a[0] == "fwd" and a[1] == j]
        extra += (len(runs) - 1) * sum(o.recompute_seconds for o in ops[st.lo:st.hi])
        for a in runs:
            if a[2] is not None:
                extra += sum(ops[k].recompute_seconds
                             for k in _closure(profile, j, p.variants[j][a[2]]))
    assert extra > 0  # the least peak (None) and both budgets are under the plain peak
    assert p.predicted_extra_seconds == pytest.approx(extra)
    assert p.predicted_overhead_seconds == profile.overhead_seconds
    assert p.predicted_step_seconds == pytest.approx(
        profile.step_seconds + profile.overhead_seconds + extra)
    rows = p.rows()
    assert sum(r.recompute_seconds for r in rows) == pytest.approx(extra)


def test_profile_graph_refuses_an_unknown_clock():
    model, x = _model(depth=1)
    with pytest.raises(ValueError, match=r'profile_graph: clock must be "wall" or "cpu", got'):
        profile_graph(model, (x,), clock="gpu")


def test_cleared_gradients_are_counted_and_the_gradients_left_as_found():
    model, x = _model(depth=2)
    found = [(p.grad, p.grad.numpy().copy()) for p in model.parameters()]
    profile = profile_graph(model, (x,), repeats=1, cleared_grads=True)
    for p, (g, values) in zip(model.parameters(), found):
        assert p.grad is g and np.array_equal(g.numpy(), values)
    # each Linear's stage allocates its weight's and bias's gradients in backward
    linear = [st for st in profile.stages if profile.ops[st.lo].name == "linear"]
    assert [st.grads for st in linear] == [(32 * 32 + 32) * 4] * 2
