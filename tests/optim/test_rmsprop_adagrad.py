"""RMSprop, Adagrad and Adadelta against NumPy formulations of PyTorch's update rules, with their
state_dict round trips, parameter groups and in-place steps."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import memgrad as mg
from memgrad import optim

P0 = np.random.default_rng(10).standard_normal((3, 4))
GRADS = [np.random.default_rng(s).standard_normal((3, 4)) for s in range(6)]


def run(make_opt, p0, grads, dtype=np.float64):
    p = mg.tensor(p0.astype(dtype), requires_grad=True)
    opt = make_opt([p])
    out = []
    for g in grads:
        p.grad = mg.tensor(g.astype(dtype))
        opt.step()
        out.append(p.numpy().copy())
    return out


def rmsprop_reference(p, grads, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0,
                      momentum=0.0, centered=False):
    v = np.zeros_like(p)
    a = np.zeros_like(p)
    buf = np.zeros_like(p)
    out = []
    for g in grads:
        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        if centered:
            a = alpha * a + (1 - alpha) * g
            avg = np.sqrt(v - a * a) + eps
        else:
            avg = np.sqrt(v) + eps
        if momentum > 0:
            buf = momentum * buf + g / avg
            p = p - lr * buf
        else:
            p = p - lr * g / avg
        out.append(p)
    return out


def adagrad_reference(p, grads, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                      initial_accumulator_value=0.0, eps=1e-10):
    s = np.full_like(p, initial_accumulator_value)
    out = []
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g
        p = p - clr * g / (np.sqrt(s) + eps)
        out.append(p)
    return out


def adadelta_reference(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    v = np.zeros_like(p)
    u = np.zeros_like(p)
    out = []
    for g in grads:
        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g * g
        delta = np.sqrt(u + eps) / np.sqrt(v + eps) * g
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta
        out.append(p)
    return out


ADADELTA_CASES = [dict(), dict(lr=0.5, rho=0.8), dict(weight_decay=0.1, eps=1e-4)]


RMSPROP_CASES = [
    dict(), dict(lr=0.05, alpha=0.9), dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.01, momentum=0.9), dict(lr=0.01, centered=True),
    dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.05, eps=1e-4),
]
ADAGRAD_CASES = [
    dict(), dict(lr=0.1, lr_decay=0.05), dict(lr=0.1, weight_decay=0.1),
    dict(lr=0.1, initial_accumulator_value=0.5, eps=1e-6),
]


def ids(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items()) or "defaults"


@pytest.mark.parametrize("kw", RMSPROP_CASES, ids=ids)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rmsprop_matches_pytorchs_rule(kw, dtype):
    got = run(lambda ps: optim.RMSprop(ps, **kw), P0, GRADS, dtype)
    for step, (g, w) in enumerate(zip(got, rmsprop_reference(P0, GRADS, **kw))):
        assert g.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(g, w, rtol=0, atol=tol, err_msg=f"step {step}")


@pytest.mark.parametrize("kw", ADAGRAD_CASES, ids=ids)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adagrad_matches_pytorchs_rule(kw, dtype):
    got = run(lambda ps: optim.Adagrad(ps, **kw), P0, GRADS, dtype)
    for step, (g, w) in enumerate(zip(got, adagrad_reference(P0, GRADS, **kw))):
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(g, w, rtol=0, atol=tol, err_msg=f"step {step}")


@pytest.mark.parametrize("kw", ADADELTA_CASES, ids=ids)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adadelta_matches_pytorchs_rule(kw, dtype):
    got = run(lambda ps: optim.Adadelta(ps, **kw), P0, GRADS, dtype)
    for step, (g, w) in enumerate(zip(got, adadelta_reference(P0, GRADS, **kw))):
        assert g.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(g, w, rtol=0, atol=tol, err_msg=f"step {step}")


@pytest.mark.parametrize("make", [
    lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
    lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01),
    lambda ps: optim.Adadelta(ps, rho=0.5),
], ids=["rmsprop", "adagrad", "adadelta"])
def test_state_dict_round_trip_resumes_identically(make):
    w = mg.tensor(P0, requires_grad=True)
    opt = make([w])
    for g in GRADS[:3]:
        w.grad = mg.tensor(g)
        opt.step()
    w2 = mg.tensor(w.numpy().copy(), requires_grad=True)
    opt2 = make([w2])
    opt2.load_state_dict(opt.state_dict())
    assert opt2.state[w2]["step"] == 3
    for g in GRADS[3:]:
        w.grad, w2.grad = mg.tensor(g), mg.tensor(g)
        opt.step()
        opt2.step()
    np.testing.assert_array_equal(w.numpy(), w2.numpy())


def test_adagrad_state_exists_before_the_first_step_and_groups_have_own_options():
    a = mg.zeros(2, dtype=mg.float64, requires_grad=True)
    b = mg.zeros(3, dtype=mg.float64, requires_grad=True)
    opt = optim.Adagrad([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1,
                        initial_accumulator_value=0.25)
    sd = opt.state_dict()
    assert sorted(sd["state"]) == [0, 1] and sd["state"][0]["step"] == 0
    np.testing.assert_array_equal(sd["state"][1]["sum"], np.full(3, 0.25))
    a.grad, b.grad = mg.ones(2, dtype=mg.float64), mg.ones(3, dtype=mg.float64)
    opt.step()
    np.testing.assert_allclose(a.numpy(), -0.1 / (np.sqrt(1.25) + 1e-10), rtol=1e-14)
    np.testing.assert_allclose(b.numpy(), -1.0 / (np.sqrt(1.25) + 1e-10), rtol=1e-14)


@pytest.mark.parametrize("make", [
    lambda ps: optim.RMSprop(ps, momentum=0.9, centered=True, weight_decay=0.1),
    lambda ps: optim.Adagrad(ps, weight_decay=0.1),
    lambda ps: optim.Adadelta(ps, weight_decay=0.1),
], ids=["rmsprop", "adagrad", "adadelta"])
def test_steps_allocate_no_parameter_sized_arrays(make):
    n = 1 << 18
    w = mg.zeros(n, dtype=mg.float64, requires_grad=True)
    w.grad = mg.ones(n, dtype=mg.float64)
    opt = make([w])
    opt.step()
    tracemalloc.start()
    try:
        for _ in range(3):
            opt.step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * 8 // 4, f"a step allocated {peak} bytes"


def test_invalid_options_raise():
    w = [mg.ones(1, requires_grad=True)]
    with pytest.raises(ValueError, match="RMSprop: invalid alpha -0.5"):
        optim.RMSprop(w, alpha=-0.5)
    with pytest.raises(ValueError, match="Adagrad: invalid lr_decay -1"):
        optim.Adagrad(w, lr_decay=-1)
    with pytest.raises(ValueError, match="Adadelta: invalid rho 1.5"):
        optim.Adadelta(w, rho=1.5)
