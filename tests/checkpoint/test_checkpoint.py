"""checkpoint(): both engines give the uncheckpointed values and gradients, recompute exactly
as often as claimed, and refuse what they cannot do correctly."""

import warnings

import numpy as np
import pytest

import memgrad as mg
from memgrad.checkpoint import checkpoint, checkpoint_sequential, is_recomputing, policy
from memgrad.checkpoint.sequential import segment_bounds


def leaf(*shape, seed=0, scale=0.5):
    data = np.random.default_rng(seed).standard_normal(shape) * scale
    return mg.tensor(data, requires_grad=True)


def block(h, w, b):
    # matmul, broadcasting add, tanh, exp, mul: several kinds of saved tensors
    z = h @ w + b
    return z.tanh() * 1.5 + (z * 0.1).exp() * h


def run(fn, params, x):
    for p in params + [x]:
        p.grad = None
    out = fn(x)
    loss = (out * out).sum()
    loss.backward()
    return loss.item(), [p.grad.numpy().copy() for p in params + [x] if p.grad is not None]


PARAMS = [leaf(6, 6, seed=i) for i in range(3)] + [leaf(6, seed=10 + i) for i in range(3)]
X = leaf(4, 6, seed=99)


@pytest.fixture(autouse=True)
def fresh_grads():
    for p in PARAMS + [X]:
        p.grad = None


def plain(h):
    for i in range(3):
        h = block(h, PARAMS[i], PARAMS[3 + i])
    return h


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_same_loss_and_gradients_as_plain(use_reentrant):
    ref_loss, ref = run(plain, PARAMS, X)

    def ck(h):
        for i in range(3):
            h = checkpoint(block, h, PARAMS[i], PARAMS[3 + i], use_reentrant=use_reentrant)
        return h

    loss, got = run(ck, PARAMS, X)
    assert loss == ref_loss
    assert len(got) == len(ref) == 7
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


def test_kwargs_nested_inputs_and_input_without_grad():
    w, b = PARAMS[0], PARAMS[3]
    x = X.detach()  # the input needs no gradient; the parameters do

    def fn(pair, scale=1.0, extra=None):
        h = block(pair[0], pair[1]["w"], b) * scale
        return h + extra["shift"]

    shift = leaf(6, seed=5)
    out = checkpoint(fn, (x, {"w": w}), scale=2.0, extra={"shift": shift})
    (out * out).sum().backward()
    gw, gs = w.grad.numpy().copy(), shift.grad.numpy().copy()
    w.grad = shift.grad = b.grad = None
    ref = fn((x, {"w": w}), scale=2.0, extra={"shift": shift})
    (ref * ref).sum().backward()
    np.testing.assert_array_equal(gw, w.grad.numpy())
    np.testing.assert_array_equal(gs, shift.grad.numpy())


def test_autograd_grad_and_backward_inputs():
    w, b = PARAMS[0], PARAMS[3]
    out = checkpoint(block, X, w, b)
    gx, gw = mg.autograd.grad((out * out).sum(), [X, w])
    assert w.grad is None and X.grad is None
    ref = block(X, w, b)
    rx, rw = mg.autograd.grad((ref * ref).sum(), [X, w])
    np.testing.assert_array_equal(gx.numpy(), rx.numpy())
    np.testing.assert_array_equal(gw.numpy(), rw.numpy())
    out = checkpoint(block, X, w, b)
    (out * out).sum().backward(inputs=[w])
    assert X.grad is None and b.grad is None
    np.testing.assert_array_equal(w.grad.numpy(), rw.numpy())
    w.grad = None


def test_nested_checkpoints():
    def outer(h):
        h = checkpoint(block, h, PARAMS[0], PARAMS[3])
        h = block(h, PARAMS[1], PARAMS[4])
        return checkpoint(block, h, PARAMS[2], PARAMS[5])

    ref_loss, ref = run(plain, PARAMS, X)
    loss, got = run(lambda h: checkpoint(outer, h), PARAMS, X)
    assert loss == ref_loss
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


def test_double_backward_through_checkpoint():
    w, b = PARAMS[0], PARAMS[3]
    out = checkpoint(block, X, w, b)
    (g,) = mg.autograd.grad(out.sum(), X, create_graph=True)
    (gg,) = mg.autograd.grad((g * g).sum(), w)
    ref = block(X, w, b)
    (rg,) = mg.autograd.grad(ref.sum(), X, create_graph=True)
    (rgg,) = mg.autograd.grad((rg * rg).sum(), w)
    np.testing.assert_allclose(gg.numpy(), rgg.numpy(), rtol=1e-12)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_random_ops_replay_the_same_draws(use_reentrant):
    w = PARAMS[0]

    def noisy(h):
        mask = mg.rand(*h.shape, dtype=mg.float64) > 0.3
        return (h @ w).tanh() * mask

    mg.manual_seed(3)
    out = checkpoint(noisy, X, use_reentrant=use_reentrant)
    after = mg.get_rng_state()
    out.sum().backward()
    assert mg.get_rng_state() == after  # backward leaves the generator where forward left it
    got = w.grad.numpy().copy()
    w.grad = X.grad = None
    mg.manual_seed(3)
    noisy(X).sum().backward()
    np.testing.assert_array_equal(got, w.grad.numpy())
    w.grad = X.grad = None


def test_under_no_grad_it_just_calls_the_function():
    calls = []

    def fn(h):
        calls.append(mg.is_grad_enabled())
        return h * 2

    with mg.no_grad():
        out = checkpoint(fn, X)
    assert calls == [False] and out.grad_fn is None


# ---------------------------------------------------------------------------- counting


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_each_segment_runs_twice_and_the_last_once(use_reentrant):
    calls = [0] * 4
    layers = []
    for i in range(4):
        def layer(h, i=i):
            calls[i] += 1
            return block(h, PARAMS[i % 3], PARAMS[3 + i % 3])

        layers.append(layer)
    x = X.detach().requires_grad_()
    out = checkpoint_sequential(layers, 4, x, use_reentrant=use_reentrant)
    (out * out).sum().backward()
    assert calls == [2, 2, 2, 1]
    calls[:] = [0] * 4
    out = checkpoint_sequential(layers, 2, x, use_reentrant=use_reentrant)
    (out * out).sum().backward()
    assert calls == [2, 2, 1, 1]


def test_recomputation_stops_once_every_saved_tensor_is_rebuilt():
    reached = []
    w = PARAMS[0]

    def fn(h):
        t = (h @ w).tanh()  # the last op that saves anything
        reached.append(is_recomputing())
        return t * 2.0 + 1.0  # saves nothing: never recomputed

    out = checkpoint(fn, X)
    out.sum().backward()
    assert reached == [False]  # the recomputation stopped inside tanh


def test_is_recomputing_during_recomputation_only():
    seen = []

    def fn(h):
        seen.append(is_recomputing())
        return (h @ PARAMS[0]).tanh()

    out = checkpoint(fn, X)
    assert not is_recomputing()
    out.sum().backward()
    assert seen == [False, True] and not is_recomputing()
    PARAMS[0].grad = X.grad = None


def test_policy_changes_work_not_gradients():
    matmuls = []
    original = mg.ops.REGISTRY["matmul"].forward

    def counting(x, y):
        matmuls.append(1)
        return original(x, y)

    mg.ops.REGISTRY["matmul"].forward = counting
    try:
        results = {}
        for name, pol in [("none", None), ("matmuls", policy.save_matmuls),
                          ("all", policy.save_all), ("tanh", policy.save_only("tanh"))]:
            matmuls.clear()
            for p in PARAMS + [X]:
                p.grad = None
            out = checkpoint(block, X, PARAMS[0], PARAMS[3], policy=pol)
            (out * out).sum().backward()
            results[name] = (len(matmuls), PARAMS[0].grad.numpy().copy(), X.grad.numpy().copy())
    finally:
        mg.ops.REGISTRY["matmul"].forward = original
    # forward + recompute, or forward only when the matmul output is kept; backward's two
    # matmuls come on top
    assert results["none"][0] == 2 + 2
    assert results["matmuls"][0] == 1 + 2
    assert results["all"][0] == 1 + 2
    for name in ("matmuls", "all", "tanh"):
        np.testing.assert_array_equal(results[name][1], results["none"][1])
        np.testing.assert_array_equal(results[name][2], results["none"][2])


# ---------------------------------------------------------------------------- errors


def test_determinism_check_names_what_differs():
    state = {"n": 4}

    def shifty(h):
        n = state["n"]
        state["n"] = 3
        return (h[:, :n] @ PARAMS[0][:n]).tanh()

    out = checkpoint(shifty, X)
    with pytest.raises(mg.CheckpointError, match=r"shape \(4, 3\).*shape \(4, 4\)"):
        out.sum().backward()
    state["n"] = 4
    out = checkpoint(shifty, X, debug=True)
    with pytest.raises(mg.CheckpointError, match="executed during the original forward:"):
        out.sum().backward()
    state["n"] = 4
    out = checkpoint(shifty, X, determinism_check="none")
    with pytest.raises(RuntimeError, match="invalid gradient"):  # unchecked, still not wrong
        out.sum().backward()


def test_count_mismatch_is_reported():
    state = {"first": True}

    def shrinks(h):
        y = (h @ PARAMS[0]).tanh()
        if state["first"]:
            y = y.exp()  # only in the forward pass
        state["first"] = False
        return y.sum() * 1.0

    out = checkpoint(shrinks, X)
    with pytest.raises(mg.CheckpointError, match="saved 3 tensors, the forward pass saved 4"):
        out.backward()


def test_input_changed_in_place_after_forward():
    h = X * 1.0
    out = checkpoint(block, h, PARAMS[0], PARAMS[3])
    with mg.no_grad():
        h.add_(1.0)
    with pytest.raises(mg.CheckpointError, match="changed in place"):
        out.sum().backward()


def test_reentrant_restrictions():
    with pytest.raises(ValueError, match="keyword arguments"):
        checkpoint(block, X, PARAMS[0], b=PARAMS[3], use_reentrant=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoint(block, X.detach(), PARAMS[0].detach(), PARAMS[3].detach(), use_reentrant=True)
    assert any("None of the inputs have requires_grad=True" in str(w.message) for w in caught)
    out = checkpoint(block, X, PARAMS[0], PARAMS[3], use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match="use_reentrant=False"):
        mg.autograd.grad(out.sum(), X)


def test_bad_arguments():
    with pytest.raises(ValueError, match="determinism_check"):
        checkpoint(block, X, PARAMS[0], PARAMS[3], determinism_check="strict")
    with pytest.raises(TypeError, match="callable"):
        checkpoint(42, X)


# ---------------------------------------------------------------------------- sequential


def test_segment_bounds_spread_the_remainder():
    assert segment_bounds(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    sizes = [e - s for s, e in segment_bounds(32, 6)]
    assert sizes == [5, 5, 5, 6, 6, 5] and max(sizes) - min(sizes) == 1
    assert segment_bounds(5, 5) == [(i, i + 1) for i in range(5)]
    assert segment_bounds(5, 1) == [(0, 5)]
    for bad in (0, 6, -1):
        with pytest.raises(ValueError, match="between 1 and the number of layers"):
            segment_bounds(5, bad)


@pytest.mark.parametrize("segments", [1, 2, 3, 6])
@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_sequential_matches_plain(segments, use_reentrant):
    layers = [lambda h, i=i: block(h, PARAMS[i % 3], PARAMS[3 + i % 3]) for i in range(6)]

    def plain6(h):
        for f in layers:
            h = f(h)
        return h

    ref_loss, ref = run(plain6, PARAMS, X)
    loss, got = run(
        lambda h: checkpoint_sequential(layers, segments, h, use_reentrant=use_reentrant),
        PARAMS,
        X,
    )
    assert loss == ref_loss
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_sequential_module_matches_plain(reentrant):
    from memgrad.checkpoint import CheckpointedSequential, plan

    mg.manual_seed(0)
    layers = mg.nn.Sequential(*[m for _ in range(4) for m in (mg.nn.Linear(6, 6), mg.nn.Tanh())])
    x = mg.randn(5, 6, requires_grad=True)
    layers(x).pow(2).sum().backward()
    expected = [p.grad.numpy().copy() for p in layers.parameters()] + [x.grad.numpy().copy()]
    for segments in (3, plan(list(layers), x)):
        layers.zero_grad()
        x.grad = None
        model = CheckpointedSequential(layers, segments, use_reentrant=reentrant)
        assert [id(p) for p in model.parameters()] == [id(p) for p in layers.parameters()]
        model(x).pow(2).sum().backward()
        got = [p.grad.numpy() for p in layers.parameters()] + [x.grad.numpy()]
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
