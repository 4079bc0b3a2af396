"""The learning-rate schedulers against closed-form values of PyTorch's schedules, per
parameter group; state_dict round trips; composition; the rates reaching the optimizer."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
from memgrad import optim
from memgrad.optim import lr_scheduler as S

BASES = (0.1, 0.5)


def make_opt(cls=optim.SGD, **kw):
    groups = [{"params": [mg.zeros(2, dtype=mg.float64, requires_grad=True)], "lr": lr}
              for lr in BASES]
    return cls(groups, **kw)


def trace(sched, opt, n):
    """The rates of each group before each of ``n`` steps (and get_last_lr agreeing)."""
    out = []
    for _ in range(n):
        assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
        out.append(sched.get_last_lr())
        opt.step()
        sched.step()
    return np.array(out)


def closed(fn, n):
    return np.array([[fn(base, t) for base in BASES] for t in range(n)])


CASES = {
    "lambda": (lambda o: S.LambdaLR(o, lambda t: 0.9**t + 0.01 * t),
               lambda b, t: b * (0.9**t + 0.01 * t)),
    "step": (lambda o: S.StepLR(o, step_size=3, gamma=0.3), lambda b, t: b * 0.3 ** (t // 3)),
    "multistep": (lambda o: S.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.5),
                  lambda b, t: b * 0.5 ** sum(m <= t for m in [2, 5, 5, 9])),
    "exponential": (lambda o: S.ExponentialLR(o, gamma=0.8), lambda b, t: b * 0.8**t),
    "cosine": (lambda o: S.CosineAnnealingLR(o, T_max=6, eta_min=0.01),
               lambda b, t: 0.01 + (b - 0.01) * (1 + math.cos(math.pi * t / 6)) / 2),
    "linear": (lambda o: S.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=4),
               lambda b, t: b * (0.2 + 0.7 * min(t, 4) / 4)),
}


@pytest.mark.parametrize("name", CASES)
def test_schedule_matches_the_closed_form_per_group(name):
    make, formula = CASES[name]
    opt = make_opt()
    got = trace(make(opt), opt, 14)
    np.testing.assert_allclose(got, closed(formula, 14), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", CASES)
def test_state_dict_round_trip_resumes_the_schedule(name):
    make, _ = CASES[name]
    opt = make_opt()
    sched = make(opt)
    trace(sched, opt, 5)
    sd = sched.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == 5
    opt2 = make_opt()
    opt2.load_state_dict(opt.state_dict())
    sched2 = make(opt2)
    sched2.load_state_dict(sd)
    assert sched2.get_last_lr() == sched.get_last_lr()
    for group, lr in zip(opt2.param_groups, sched.get_last_lr()):
        group["lr"] = lr  # the optimizer's state_dict holds the rates
    np.testing.assert_array_equal(trace(sched2, opt2, 6), trace(sched, opt, 6))


def test_closed_form_jump_and_deprecation_warning():
    opt = make_opt()
    sched = S.StepLR(opt, step_size=2, gamma=0.5)
    with pytest.warns(UserWarning, match="step\\(epoch\\) is deprecated"):
        sched.step(5)
    assert sched.get_last_lr() == [0.1 * 0.25, 0.5 * 0.25]


def test_cosine_continues_past_t_max_as_pytorchs_recursion():
    opt = make_opt()
    got = trace(S.CosineAnnealingLR(opt, T_max=3), opt, 10)
    np.testing.assert_allclose(got, closed(lambda b, t: b * (1 + math.cos(math.pi * t / 3)) / 2,
                                           10), rtol=1e-9, atol=1e-15)


def test_two_schedulers_compose_by_multiplying():
    opt = make_opt()
    a = S.ExponentialLR(opt, gamma=0.9)
    b = S.StepLR(opt, step_size=2, gamma=0.5)
    rates = []
    for _ in range(6):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        a.step()
        b.step()
    np.testing.assert_allclose(rates, [0.1 * 0.9**t * 0.5 ** (t // 2) for t in range(6)],
                               rtol=1e-12)


def test_lambda_lr_per_group_lambdas_and_callable_object_state():
    class Warm:
        def __init__(self, n):
            self.n = n

        def __call__(self, t):
            return min(1.0, (t + 1) / self.n)

    opt = make_opt()
    warm = Warm(4)
    sched = S.LambdaLR(opt, [warm, lambda t: 0.5**t])
    got = trace(sched, opt, 5)
    np.testing.assert_allclose(got[:, 0], [0.1 * min(1, (t + 1) / 4) for t in range(5)])
    np.testing.assert_allclose(got[:, 1], [0.5 * 0.5**t for t in range(5)])
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [{"n": 4}, None]
    other = Warm(10)
    again = S.LambdaLR(make_opt(), [other, lambda t: 1.0])
    again.load_state_dict(sd)
    assert other.n == 4 and again.last_epoch == 5
    with pytest.raises(ValueError, match="expected 2 lr_lambdas"):
        S.LambdaLR(make_opt(), [warm])


def test_sequential_lr_switches_and_restarts_at_the_milestones():
    opt = make_opt()
    warm = S.LinearLR(opt, start_factor=0.25, total_iters=3)
    cos = S.CosineAnnealingLR(opt, T_max=5)
    sched = S.SequentialLR(opt, [warm, cos], milestones=[3])

    def want(b, t):
        if t < 3:
            return b * (0.25 + 0.75 * t / 3)
        return b * (1 + math.cos(math.pi * (t - 3) / 5)) / 2

    got = trace(sched, opt, 8)
    np.testing.assert_allclose(got, closed(want, 8), rtol=1e-12, atol=1e-15)
    sd = sched.state_dict()
    assert len(sd["_schedulers"]) == 2 and sd["last_epoch"] == 8
    with pytest.raises(ValueError, match="one milestone fewer than schedulers"):
        S.SequentialLR(opt, [warm, cos], milestones=[1, 2])
    with pytest.raises(ValueError, match="another optimizer"):
        S.SequentialLR(opt, [warm, S.StepLR(make_opt(), 2)], milestones=[1])


def one_cycle_ref(t, total, max_lr, pct=0.3, div=25.0, final=1e4, linear=False, three=False):
    def anneal(a, b, x):
        return (b - a) * x + a if linear else b + (a - b) / 2 * (math.cos(math.pi * x) + 1)

    lo, hi = max_lr / div, max_lr
    end = lo / final
    p = pct * total
    if three:
        bounds = [(0, p - 1, lo, hi, 0.95, 0.85), (p - 1, 2 * p - 2, hi, lo, 0.85, 0.95),
                  (2 * p - 2, total - 1, lo, end, 0.95, 0.95)]
    else:
        bounds = [(0, p - 1, lo, hi, 0.95, 0.85), (p - 1, total - 1, hi, end, 0.85, 0.95)]
    for i, (s, e, a, b, ma, mb) in enumerate(bounds):
        if t <= e or i == len(bounds) - 1:
            x = (t - s) / (e - s)
            return anneal(a, b, x), anneal(ma, mb, x)
    raise AssertionError


@pytest.mark.parametrize("kw", [{}, {"anneal_strategy": "linear"}, {"three_phase": True}])
def test_one_cycle_matches_its_phases_and_cycles_momentum(kw):
    opt = make_opt(momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=[1.0, 2.0], total_steps=20, **kw)
    linear, three = kw.get("anneal_strategy") == "linear", kw.get("three_phase", False)
    for t in range(20):
        for group, mx in zip(opt.param_groups, (1.0, 2.0)):
            lr, m = one_cycle_ref(t, 20, mx, linear=linear, three=three)
            assert group["lr"] == pytest.approx(lr, rel=1e-12)
            assert group["momentum"] == pytest.approx(m, rel=1e-12)
        opt.step()
        if t < 19:
            sched.step()
    sched.step()  # step 20 = total_steps is allowed, 21 is not
    with pytest.raises(ValueError, match="tried to step 21 times"):
        sched.step()


def test_one_cycle_with_adam_cycles_beta1_and_needs_momentum():
    opt = make_opt(optim.Adam, betas=(0.9, 0.99))
    S.OneCycleLR(opt, max_lr=0.5, epochs=2, steps_per_epoch=5)
    assert opt.param_groups[0]["betas"] == (0.95, 0.99)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.02)
    with pytest.raises(ValueError, match="must support momentum or betas"):
        S.OneCycleLR(make_opt(optim.Adagrad), max_lr=0.5, total_steps=10)
    with pytest.raises(ValueError, match="total_steps OR"):
        S.OneCycleLR(make_opt(), max_lr=0.5, cycle_momentum=False)


def test_the_scheduled_rate_is_what_the_optimizer_uses():
    w = mg.ones(1, dtype=mg.float64, requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    sched = S.ExponentialLR(opt, gamma=0.5)
    for _ in range(3):
        w.grad = mg.ones(1, dtype=mg.float64)
        opt.step()
        sched.step()
    assert w.item() == pytest.approx(1 - (1 + 0.5 + 0.25))


def test_resuming_needs_initial_lr():
    opt = optim.SGD([mg.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(opt, step_size=2, last_epoch=3)
    S.StepLR(opt, step_size=2)
    assert opt.param_groups[0]["initial_lr"] == 0.1


def _resumed(make, lr: float = 0.1, at: float = 0.05, steps: int = 5) -> list[float]:
    """The rates of a schedule made with last_epoch=k on an optimizer whose rate is ``at``."""
    opt = optim.SGD([mg.zeros(1, requires_grad=True)], lr=lr)
    opt.param_groups[0]["initial_lr"], opt.param_groups[0]["lr"] = lr, at
    sched = make(opt)
    rates = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        rates.append(opt.param_groups[0]["lr"])
    return rates


# PyTorch 2.13's rates for the same schedules, resumed at step 3 (4 for SequentialLR) with
# the rate 0.05: the constructor's step keeps the rate it finds
RESUMED = [
    (lambda o: S.ExponentialLR(o, 0.5, last_epoch=3),
     [0.05, 0.025, 0.0125, 0.00625, 0.003125, 0.0015625]),
    (lambda o: S.CosineAnnealingLR(o, 10, last_epoch=3),
     [0.05, 0.03819660112501052, 0.026393202250021036, 0.01574520229603125,
      0.007294901687515776, 0.0018694747247424725]),
    (lambda o: S.LinearLR(o, 0.2, 1.0, 8, last_epoch=3),
     [0.05, 0.05833333333333334, 0.06666666666666667, 0.075, 0.08333333333333333,
      0.08333333333333333]),
    (lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.5, 1.0, 2), S.ExponentialLR(o, 0.5)],
                              milestones=[2], last_epoch=4),
     [0.05, 0.025, 0.0125, 0.00625, 0.003125, 0.0015625]),
]


@pytest.mark.parametrize("make,expected", RESUMED)
def test_a_schedule_resumed_by_last_epoch_keeps_the_rate_it_finds(make, expected):
    np.testing.assert_allclose(_resumed(make), expected, rtol=1e-12)


def test_sequential_lr_with_a_milestone_at_0_starts_with_the_second_schedule():
    # PyTorch 2.13: [0.1, 0.05, 0.025, ...]; the first schedule (a constant 0.5 factor)
    # never runs
    rates = _resumed(lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.5, 0.5, 5),
                                                  S.ExponentialLR(o, 0.5)], milestones=[0]),
                     at=0.1, steps=3)
    np.testing.assert_allclose(rates, [0.1, 0.05, 0.025, 0.0125], rtol=1e-12)


def test_sequential_lr_refuses_reduce_on_plateau():
    opt = optim.SGD([mg.zeros(1, requires_grad=True)], lr=0.1)
    plateau = S.ReduceLROnPlateau(opt)
    with pytest.raises(ValueError, match=r"SequentialLR: schedulers\[1\] is a ReduceLROnPlateau"):
        S.SequentialLR(opt, [S.ExponentialLR(opt, 0.5), plateau], milestones=[2])


def test_reduce_on_plateau_reduces_a_group_added_later():
    p, q = mg.zeros(1, requires_grad=True), mg.zeros(1, requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    sched = S.ReduceLROnPlateau(opt, patience=0)
    opt.add_param_group({"params": [q], "lr": 0.5})
    sched.step(1.0)
    sched.step(2.0)  # no better: both groups' rates times 0.1
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.01, 0.05])
    listed = S.ReduceLROnPlateau(opt, patience=0, min_lr=[0.0, 0.0])
    opt.add_param_group({"params": [mg.zeros(1, requires_grad=True)], "lr": 0.5})
    listed.step(1.0)
    with pytest.raises(RuntimeError, match="ReduceLROnPlateau: the optimizer has 3 parameter "
                                           "groups, 2 when the scheduler was made"):
        listed.step(2.0)
