"""Nested checkpoints: an inner checkpoint's inputs are saved through the enclosing one's
hooks, so nesting keeps nothing alive that the outer region dropped; every combination
gives the gradients of plain code, with and without early stop."""

import gc
import weakref

import numpy as np
import pytest

import memgrad as mg
from memgrad import autograd
from memgrad.checkpoint import checkpoint, set_checkpoint_early_stop

EARLY = pytest.mark.parametrize("early_stop", [True, False], ids=["early-stop", "no-early-stop"])


def leaf(*shape, seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape) * 0.5, requires_grad=True)


def grad_of(fn, x, create_graph=False):
    (g,) = autograd.grad(fn(x), x, create_graph=create_graph)
    return g


def ck(fn, **kw):
    return lambda *a, **k: checkpoint(fn, *a, **kw, **k)


def f(x):
    return x.tanh().exp().tanh()


def test_an_inner_checkpoint_keeps_nothing_the_outer_one_dropped():
    refs = []

    def outer(a):
        b = a.exp() * 1.0
        refs.append(weakref.ref(b))
        return checkpoint(lambda t: (t * 2.0).tanh(), b).sum()

    x = leaf(64, 64)
    gc.disable()
    try:
        out = checkpoint(outer, x)
        assert refs[0]() is None  # only the inner region's argument ever held it
        out.backward()
    finally:
        gc.enable()
    expected = (1 - np.tanh(2 * np.exp(x.numpy())) ** 2) * 2 * np.exp(x.numpy())
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_nesting_costs_no_bytes_over_the_outer_checkpoint():
    x = leaf(128, 128)

    def inner(t):
        return (t * 3.0).tanh().exp()

    def outer(nested):
        def region(a):
            b = a.tanh() * 1.0
            c = checkpoint(inner, b) if nested else inner(b)
            return (c * b).sum()
        return region

    live = []
    for nested in (False, True):
        gc.collect()
        mg.memory.enable()
        try:
            before = mg.memory.allocated_bytes()
            out = checkpoint(outer(nested), x)
            live.append(mg.memory.allocated_bytes() - before)
            out.backward()
        finally:
            mg.memory.disable()
    assert live[1] == live[0]
    assert live[0] < 128 * 128 * 8  # not even one activation of the region is held


@EARLY
def test_nested_values_and_gradients(early_stop):
    x = leaf(3, 3, seed=1)
    ref = grad_of(lambda t: f(t).sum(), x)
    with set_checkpoint_early_stop(early_stop):
        for wrapped in (ck(f), ck(ck(f)), ck(ck(ck(f)))):
            out = wrapped(x)
            np.testing.assert_allclose(out.numpy(), f(x).numpy(), rtol=1e-12)
            np.testing.assert_allclose(grad_of(lambda t, w=wrapped: w(t).sum(), x).numpy(),
                                       ref.numpy(), rtol=1e-12)


@EARLY
def test_grad_of_checkpoint_of_grad(early_stop):
    x = leaf(4, seed=2)

    def g(t):  # d/dt sum(f(t)), differentiable
        return grad_of(lambda u: f(u).sum(), t, create_graph=True)

    ref = grad_of(lambda t: g(t).sum(), x)
    with set_checkpoint_early_stop(early_stop):
        got = grad_of(lambda t: ck(g)(t).sum(), x)
        got2 = grad_of(lambda t: ck(lambda u: g(ck(f)(u) * 1.0 + u * 0.0))(t).sum(), x)
        ref2 = grad_of(lambda t: g(f(t) * 1.0 + t * 0.0).sum(), x)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10)
    np.testing.assert_allclose(got2.numpy(), ref2.numpy(), rtol=1e-10)


@EARLY
def test_two_children(early_stop):
    x = leaf(3, 3, seed=3)

    def g(t):
        return (t * t).exp()

    def hc(t):
        return ck(g)(ck(f)(t))

    ref = grad_of(lambda t: g(f(t)).sum(), x, create_graph=True)
    with set_checkpoint_early_stop(early_stop):
        got = grad_of(lambda t: ck(hc)(t).sum(), x, create_graph=True)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12)
        (gg,) = autograd.grad(got.sum(), x)
    (rr,) = autograd.grad(ref.sum(), x)
    np.testing.assert_allclose(gg.numpy(), rr.numpy(), rtol=1e-10)


@EARLY
def test_kwargs_and_non_tensor_inputs_and_outputs(early_stop):
    a, b = leaf(4, seed=4), leaf(4, seed=5)

    def inner(t, scale, *, other, tag):
        return {"y": (t * scale + other).tanh(), "tag": tag, "n": None}

    def outer(t, *, other):
        r = checkpoint(inner, t, 2.0, other=other, tag="x")
        assert r["tag"] == "x" and r["n"] is None
        return r["y"] * other, 7

    with set_checkpoint_early_stop(early_stop):
        y, seven = checkpoint(outer, a, other=b)
    assert seven == 7
    y.sum().backward()
    ga, gb = a.grad.numpy().copy(), b.grad.numpy().copy()
    a.grad = b.grad = None
    plain, _ = (lambda t, other: ((t * 2.0 + other).tanh() * other, 7))(a, b)
    plain.sum().backward()
    np.testing.assert_allclose(ga, a.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gb, b.grad.numpy(), rtol=1e-12)


@EARLY
def test_the_same_graph_used_twice(early_stop):
    x = leaf(5, seed=6)
    with set_checkpoint_early_stop(early_stop):
        out = ck(ck(f))(x).sum()
    fired = []
    out.grad_fn.next_functions[0][0].register_hook(lambda gi, go: fired.append(1))
    out.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    assert fired == [1]  # the original graph, once; the recomputed one is not differentiated
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-12)
    assert fired == [1, 1]


@EARLY
def test_a_reentrant_backward_inside(early_stop):
    a = leaf(4, seed=7)

    def fn(t):
        y = t.tanh()
        return y, (y * y).exp()

    with set_checkpoint_early_stop(early_stop):
        y, out = checkpoint(fn, a)
    s = y.sum()
    out.grad_fn.register_prehook(lambda go: s.backward(retain_graph=True))
    out.sum().backward()
    t = np.tanh(a.numpy())
    expected = (1 - t ** 2) + np.exp(t * t) * 2 * t * (1 - t ** 2)
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-12)


@EARLY
def test_a_reentrant_checkpoint_inside_a_non_reentrant_one(early_stop):
    x = leaf(5, seed=8)

    def outer(a):
        b = a.exp()
        c = checkpoint(lambda t: (t * 3.0).tanh(), b, use_reentrant=True)
        return (c * b).sum()

    with set_checkpoint_early_stop(early_stop):
        checkpoint(outer, x).backward()
    e = np.exp(x.numpy())
    c = np.tanh(3 * e)
    np.testing.assert_allclose(x.grad.numpy(), ((1 - c ** 2) * 3 * e * e + c * e), rtol=1e-12)


def test_an_inner_argument_changed_after_the_forward_is_a_checkpoint_error():
    x = leaf(3, seed=9)

    def outer(a):
        return checkpoint(lambda t: t.tanh().tanh(), a) * 2.0

    y = checkpoint(outer, x)
    with mg.no_grad():
        x.mul_(2.0)  # eager would not mind (tanh keeps its output), the recomputation would
    with pytest.raises(mg.CheckpointError, match="tensor argument 0 of the checkpointed "
                                                 "function was changed in place"):
        y.sum().backward()
