"""SGD, Adam and AdamW against NumPy implementations of the published update formulas,
plus parameter groups, state_dict round trips, zero_grad and in-place behaviour."""

import threading
import tracemalloc

import numpy as np
import pytest

import memgrad as mg
from memgrad import optim
from tests.helpers.parts import stop_helpers

STEPS = 6


def _grads(shape, n=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


def _run(make_opt, p0, grads, dtype=np.float64):
    """Apply ``make_opt([p])`` for each gradient; return the parameter after each step."""
    p = mg.tensor(p0.astype(dtype), requires_grad=True)
    opt = make_opt([p])
    out = []
    for g in grads:
        p.grad = mg.tensor(g.astype(dtype))
        opt.step()
        out.append(p.numpy().copy())
    return out


def sgd_reference(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
                  nesterov=False):
    buf = None
    out = []
    for g in grads:
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
        out.append(p)
    return out


def adam_reference(p, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                   amsgrad=False, decoupled=False):
    b1, b2 = betas
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    vmax = np.zeros_like(p)
    out = []
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        if amsgrad:
            vmax = np.maximum(vmax, v)
            v_hat = vmax / (1 - b2**t)
        else:
            v_hat = v / (1 - b2**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(p)
    return out


def _ids(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items())


P0 = np.random.default_rng(1).standard_normal((3, 4))
GRADS = _grads((3, 4))

SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.05, momentum=0.8, dampening=0.1, weight_decay=0.1),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
]


@pytest.mark.parametrize("kw", SGD_CASES, ids=_ids)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sgd_matches_reference(kw, dtype):
    got = _run(lambda ps: optim.SGD(ps, **kw), P0, GRADS, dtype)
    want = sgd_reference(P0, GRADS, **kw)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6, err_msg=f"step {step}")


ADAM_CASES = [
    dict(lr=0.01),
    dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.01, amsgrad=True),
    dict(lr=0.01, amsgrad=True, weight_decay=0.05),
]


@pytest.mark.parametrize("kw", ADAM_CASES, ids=_ids)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adam_matches_reference(kw, dtype):
    got = _run(lambda ps: optim.Adam(ps, **kw), P0, GRADS, dtype)
    want = adam_reference(P0, GRADS, **kw)
    for step, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6, err_msg=f"step {step}")


def test_amsgrad_uses_the_running_max_of_the_second_moment():
    # a large gradient then small ones: the max must keep the early second moment
    grads = [np.full((2,), 10.0)] + [np.full((2,), 0.01)] * 4
    p0 = np.zeros(2)
    got = _run(lambda ps: optim.Adam(ps, lr=0.1, amsgrad=True), p0, grads)
    want = adam_reference(p0, grads, lr=0.1, amsgrad=True)
    plain = adam_reference(p0, grads, lr=0.1)
    np.testing.assert_allclose(got[-1], want[-1], rtol=0, atol=1e-12)
    assert not np.allclose(want[-1], plain[-1])


ADAMW_CASES = [
    dict(lr=0.01),  # default weight_decay=1e-2
    dict(lr=0.01, weight_decay=0.3),
    dict(lr=0.01, weight_decay=0.1, amsgrad=True, betas=(0.85, 0.98)),
]


@pytest.mark.parametrize("kw", ADAMW_CASES, ids=_ids)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adamw_matches_reference(kw, dtype):
    got = _run(lambda ps: optim.AdamW(ps, **kw), P0, GRADS, dtype)
    full = {"weight_decay": 1e-2, **kw}
    want = adam_reference(P0, GRADS, decoupled=True, **full)
    for step, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6, err_msg=f"step {step}")


def test_adamw_and_adam_differ_with_weight_decay():
    a = _run(lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.5), P0, GRADS)
    w = _run(lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.5), P0, GRADS)
    assert not np.allclose(a[-1], w[-1])


# ------------------------------------------------------------------ state_dict


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
    lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
], ids=["sgd", "adam", "adamw"])
def test_state_dict_round_trip_resumes_identically(make):
    grads = _grads((3, 4), n=8, seed=3)
    bias_grads = _grads((4,), n=8, seed=4)
    w = mg.tensor(P0, requires_grad=True)
    b = mg.zeros(4, dtype=mg.float64, requires_grad=True)
    opt = make([w, b])
    for g, gb in zip(grads[:4], bias_grads[:4]):
        w.grad, b.grad = mg.tensor(g), mg.tensor(gb)
        opt.step()
    sd = opt.state_dict()
    assert sorted(sd["state"]) == [0, 1]
    assert sd["param_groups"][0]["params"] == [0, 1]

    w2 = mg.tensor(w.numpy().copy(), requires_grad=True)
    b2 = mg.tensor(b.numpy().copy(), requires_grad=True)
    opt2 = make([w2, b2])
    opt2.load_state_dict(sd)
    for g, gb in zip(grads[4:], bias_grads[4:]):
        w.grad, b.grad = mg.tensor(g), mg.tensor(gb)
        w2.grad, b2.grad = mg.tensor(g), mg.tensor(gb)
        opt.step()
        opt2.step()
    np.testing.assert_array_equal(w.numpy(), w2.numpy())
    np.testing.assert_array_equal(b.numpy(), b2.numpy())


def test_state_dict_is_a_copy_and_loading_copies():
    w = mg.ones(3, requires_grad=True)
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = mg.ones(3)
    opt.step()
    sd = opt.state_dict()
    saved = sd["state"][0]["momentum_buffer"].copy()
    opt.step()
    np.testing.assert_array_equal(sd["state"][0]["momentum_buffer"], saved)
    opt2 = optim.SGD([w], lr=0.1, momentum=0.9)
    opt2.load_state_dict(sd)
    assert opt2.state[w]["momentum_buffer"] is not sd["state"][0]["momentum_buffer"]


def test_load_state_dict_takes_the_saved_options_and_casts_state_to_param_dtype():
    w = mg.ones(3, dtype=mg.float64, requires_grad=True)
    opt = optim.Adam([w], lr=0.5, betas=(0.5, 0.6))
    w.grad = mg.ones(3, dtype=mg.float64)
    opt.step()
    w32 = mg.ones(3, requires_grad=True)
    opt32 = optim.Adam([w32])
    opt32.load_state_dict(opt.state_dict())
    assert opt32.param_groups[0]["lr"] == 0.5
    assert opt32.param_groups[0]["betas"] == (0.5, 0.6)
    assert opt32.param_groups[0]["params"][0] is w32
    assert opt32.state[w32]["exp_avg"].dtype == np.float32
    assert opt32.state[w32]["step"] == 1


def test_load_state_dict_errors():
    a, b = mg.ones(2, requires_grad=True), mg.ones(3, requires_grad=True)
    opt = optim.SGD([a, b], lr=0.1, momentum=0.9)
    a.grad, b.grad = mg.ones(2), mg.ones(3)
    opt.step()
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="parameter group 0 has 2 parameter"):
        optim.SGD([a], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="has 1 parameter group"):
        optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        optim.SGD([b, a], lr=0.1).load_state_dict(sd)
    with pytest.raises(TypeError, match="state_dict"):
        opt.load_state_dict({"weight": np.ones(2)})


# ------------------------------------------------------------------ groups and validation


def test_param_groups_use_their_own_options():
    a = mg.ones(2, dtype=mg.float64, requires_grad=True)
    b = mg.ones(2, dtype=mg.float64, requires_grad=True)
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 1.0}], lr=0.1, momentum=0.5)
    assert opt.param_groups[1]["momentum"] == 0.5
    a.grad, b.grad = mg.ones(2, dtype=mg.float64), mg.ones(2, dtype=mg.float64)
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.9, 0.9])
    np.testing.assert_allclose(b.numpy(), [0.0, 0.0])


def test_add_param_group():
    a = mg.ones(2, requires_grad=True)
    opt = optim.Adam([a], lr=0.1)
    c = mg.ones(3, requires_grad=True)
    opt.add_param_group({"params": [c], "lr": 0.2})
    assert opt.param_groups[1]["lr"] == 0.2
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})


@pytest.mark.parametrize("make, match", [
    (lambda p: optim.SGD(p, lr=-0.1), "invalid lr"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=-1), "invalid momentum"),
    (lambda p: optim.SGD(p, lr=0.1, nesterov=True), "Nesterov momentum requires"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
     "Nesterov momentum requires"),
    (lambda p: optim.Adam(p, betas=(1.0, 0.9)), "invalid betas"),
    (lambda p: optim.Adam(p, eps=-1), "invalid eps"),
    (lambda p: optim.AdamW(p, weight_decay=-1), "invalid weight_decay"),
    (lambda p: optim.SGD([{"params": p, "lr": -1.0}], lr=0.1), "invalid lr"),
])
def test_invalid_options_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make([mg.ones(2, requires_grad=True)])


def test_invalid_params_raise():
    w = mg.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="single Tensor"):
        optim.SGD(w, lr=0.1)
    with pytest.raises(TypeError, match="not a set"):
        optim.SGD({w}, lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([w * 2], lr=0.1)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([("w", w)], lr=0.1)
    with pytest.raises(ValueError, match="same tensor twice"):
        optim.SGD([w, w], lr=0.1)


# ------------------------------------------------------------------ step behaviour


def test_zero_grad():
    w = mg.ones(3, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    opt.zero_grad(set_to_none=False)
    grad = w.grad
    np.testing.assert_array_equal(grad.numpy(), 0)
    (w * 2).sum().backward()
    assert w.grad is grad  # accumulated into the zeroed tensor
    np.testing.assert_array_equal(w.grad.numpy(), 2)
    opt.zero_grad()
    assert w.grad is None


def test_step_is_in_place_builds_no_graph_and_bumps_the_version():
    w = mg.ones(3, requires_grad=True)
    data = w.numpy()
    opt = optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    v = w._version
    opt.step()
    assert w.numpy() is data
    assert w.is_leaf and w.requires_grad
    assert w._version == v + 1
    exp_avg = opt.state[w]["exp_avg"]
    opt.step()
    assert opt.state[w]["exp_avg"] is exp_avg  # state buffers are reused


def test_step_invalidates_tensors_saved_before_it():
    w = mg.ones(3, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    y = (w * w).sum()
    w.grad = mg.ones(3)
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_step_skips_parameters_without_grad_and_returns_closure_loss():
    a, b = mg.ones(2, requires_grad=True), mg.ones(2, requires_grad=True)
    opt = optim.SGD([a, b], lr=0.5, momentum=0.9)

    def closure():
        opt.zero_grad()
        loss = (a * a).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 2.0
    np.testing.assert_array_equal(b.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(a.numpy(), [0.0, 0.0])
    assert b not in opt.state or not opt.state[b]
    assert list(opt.state_dict()["state"]) == [0]


def test_wrong_grad_shape_raises():
    w = mg.ones(3, requires_grad=True)
    w.grad = mg.ones(2)
    with pytest.raises(RuntimeError, match=r"gradient of shape \(2,\)"):
        optim.SGD([w], lr=0.1).step()


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.01, momentum=0.9, dampening=0.1, weight_decay=0.1),
    lambda ps: optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1),
    lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1, amsgrad=True),
    lambda ps: optim.AdamW(ps, lr=0.01),
], ids=["sgd", "sgd-nesterov", "adam-amsgrad", "adamw"])
def test_steps_allocate_no_parameter_sized_arrays(make):
    n = 1 << 18  # 2 MiB of float64
    w = mg.zeros(n, dtype=mg.float64, requires_grad=True)
    w.grad = mg.ones(n, dtype=mg.float64)
    opt = make([w])
    # the first steps allocate the state and scratch buffers (SGD's momentum buffer on the
    # first, the dampening's scratch on the second, its first momentum update)
    opt.step()
    opt.step()
    tracemalloc.start()
    try:
        for _ in range(3):
            opt.step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * 8 // 4, f"a step allocated {peak} bytes"


def test_optimizers_minimise_a_quadratic():
    target = np.array([1.0, -2.0, 3.0])
    for make in (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                 lambda ps: optim.Adam(ps, lr=0.1),
                 lambda ps: optim.AdamW(ps, lr=0.1, weight_decay=0.0)):
        w = mg.zeros(3, dtype=mg.float64, requires_grad=True)
        opt = make([w])
        for _ in range(300):
            opt.zero_grad()
            ((w - mg.tensor(target)) ** 2).sum().backward()
            opt.step()
        np.testing.assert_allclose(w.numpy(), target, atol=1e-2)


def test_repr_lists_the_groups():
    opt = optim.Adam([mg.ones(1, requires_grad=True)], lr=0.1)
    text = repr(opt)
    assert text.startswith("Adam (\nParameter Group 0\n")
    assert "    lr: 0.1" in text and "    amsgrad: False" in text


@pytest.mark.parametrize("make", [
    lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
    lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
    lambda ps: optim.AdamW(ps, lr=0.01),
    lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1, amsgrad=True, eps=0.0),
], ids=["adam-l2", "adam-amsgrad", "adamw", "adamw-amsgrad"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adam_one_pass_update_equals_the_per_operation_update_bit_for_bit(
        make, dtype, monkeypatch):
    from memgrad.optim import adam

    fused = _run(make, P0, GRADS, dtype)
    monkeypatch.setattr(adam, "_fused", lambda *arrays: False)  # the NumPy ufunc sequence
    plain = _run(make, P0, GRADS, dtype)
    for step, (f, p) in enumerate(zip(fused, plain)):
        np.testing.assert_array_equal(f, p, err_msg=f"step {step}")


@pytest.mark.parametrize("make", [
    lambda ps: optim.Adam(ps, lr=0.01),
    lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
    lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1, amsgrad=True),
], ids=["adam", "adam-l2", "adamw", "adamw-amsgrad"])
def test_adam_over_a_group_in_one_call_equals_one_call_a_parameter_bit_for_bit(make,
                                                                              monkeypatch):
    """A group's step in one compiled call (NOTE [ One call for a group's Adam steps ]): float32
    and float64 parameters, one of them skipped at some steps (so the step counts differ), a
    transposed one (which the one-pass kernel does not take) and a 0-d one, against the
    step taken one parameter at a time."""
    from memgrad.optim import adam

    rng = np.random.default_rng(21)
    shapes = [(5, 7), (3,), (), (4, 6), (130,)]
    dtypes = [np.float32, np.float64, np.float32, np.float32, np.float64]
    p0 = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    grads = [[rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
             for _ in range(STEPS)]

    def run():
        ps = [mg.tensor(a.copy(), requires_grad=True) for a in p0]
        ps[3] = mg.tensor(p0[3].T.copy().T, requires_grad=True)  # F-ordered: NumPy's path
        opt = make(ps)
        out = []
        for step, gs in enumerate(grads):
            for i, (p, g) in enumerate(zip(ps, gs)):
                p.grad = None if (i == 1 and step % 3 == 1) else mg.tensor(g)
            opt.step()
            out.append([p.numpy().copy() for p in ps])
        return out

    calls = []
    many = adam._multi_tensor()
    if many is None:  # pragma: no cover - NUMBA_DISABLE_JIT=1: one parameter at a time
        pytest.skip("the group's call needs numba's compiler")
    real = many.adam_update_params
    monkeypatch.setattr(many, "adam_update_params",
                        lambda table, *rest: calls.append(len(table)) or real(table, *rest))
    grouped = run()
    skipped = sum(1 for step in range(STEPS) if step % 3 == 1)
    assert calls and sum(calls) == 4 * STEPS - skipped  # all but the F-ordered one
    monkeypatch.setattr(adam.Adam, "_update_group", adam.Optimizer._update_group)
    one_by_one = run()
    for step, (a, b) in enumerate(zip(grouped, one_by_one)):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y, err_msg=f"step {step}")


def test_adam_over_a_group_checks_its_tables():
    from memgrad.optim import adam

    many = adam._multi_tensor()
    if many is None:  # pragma: no cover - NUMBA_DISABLE_JIT=1
        pytest.skip("the group's call needs numba's compiler")
    for table, coefs in ((np.zeros((1, 5), np.int64), np.zeros((1, 8), np.float32)),
                         (np.zeros((1, 6), np.int64), np.zeros((1, 7), np.float32)),
                         (np.zeros((2, 6), np.int64), np.zeros((1, 8), np.float32))):
        with pytest.raises(ValueError, match="expected a table"):
            many.adam_update_params(table, coefs, 0, False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_sgd_step_in_parts_equals_numpys_two_ufuncs(monkeypatch, dtype, threads):
    """The one-pass step (``sgd_step``), split over ``threads`` BLAS threads, gives the bits
    of ``p - lr * g`` by NumPy's multiply and subtract; a transposed gradient takes NumPy."""
    from memgrad.ops import parts as parts_mod

    local = threading.local()

    def set_local(value):
        prev = getattr(local, "value", threads)
        local.value = value
        return prev

    monkeypatch.setattr(parts_mod.Parts, "set_local", set_local)
    monkeypatch.setattr(parts_mod.Parts, "helpers", None)
    monkeypatch.setattr(parts_mod, "PARTS_MIN_MACS", 0)
    rng = np.random.default_rng(4)
    p0, g = (rng.standard_normal((37, 29)).astype(dtype) for _ in range(2))
    for grad in (g, g.T.copy().T):  # contiguous, then a transposed layout
        w = mg.tensor(p0.copy(), requires_grad=True)
        w.grad = mg.tensor(grad)
        optim.SGD([w], lr=0.37).step()
        want = np.subtract(p0, np.multiply(grad, 0.37, dtype=dtype))
        assert w.dtype == dtype
        np.testing.assert_array_equal(w.numpy(), want)
    stop_helpers()
