"""What a checkpointed function may do inside: call ``autograd.grad``, be differentiated
twice, hold custom Functions (whose recomputed saves die with the backward that used them);
and the reentrant variant's errors in PyTorch's words."""

import gc
import warnings
import weakref

import numpy as np
import pytest

import memgrad as mg
from memgrad import autograd
from memgrad.autograd import Function
from memgrad.checkpoint import GraphExecGroup, checkpoint, is_recomputing


def leaf(*shape, seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape) * 0.5, requires_grad=True)


W = leaf(5, seed=11)


@pytest.mark.parametrize("create_graph", [False, True])
def test_autograd_grad_inside_the_function(create_graph):
    def fn(x):
        y = (x.tanh() * W).sum()
        (g,) = autograd.grad(y, x, create_graph=create_graph)
        return (g * x.exp()).sum() if create_graph else (g.detach() * x.exp() * W).sum()

    x = leaf(5, seed=1)
    ref = fn(x)
    ref_grads = autograd.grad(ref, [x, W])
    out = checkpoint(fn, x)
    assert out.item() == ref.item()
    got = autograd.grad(out, [x, W])
    for a, b in zip(got, ref_grads):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("early_stop", [True, False])
def test_double_backward_non_reentrant(early_stop):
    x = leaf(5, seed=2)

    def fn(t):
        return ((t * W).tanh().exp() * t).sum()

    (gx,) = autograd.grad(fn(x), x, create_graph=True)
    (ref,) = autograd.grad((gx * gx).sum(), W)
    (cx,) = autograd.grad(checkpoint(fn, x, early_stop=early_stop), x, create_graph=True)
    np.testing.assert_allclose(cx.numpy(), gx.numpy(), rtol=1e-12)
    (got,) = autograd.grad((cx * cx).sum(), W)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10)


def test_double_backward_reentrant_is_refused_with_the_fix():
    x = leaf(5, seed=3)
    out = checkpoint(lambda t: (t * W).tanh().sum(), x, use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match="^memgrad.checkpoint: .*double backward.*"
                                                 "use_reentrant=False"):
        out.backward(create_graph=True)


class SavesOutput(Function):
    made = []

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        SavesOutput.made.append(weakref.ref(y))
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class ReadsTwice(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        (b,) = ctx.saved_tensors
        return g * 2.0


def test_what_a_custom_function_saved_in_the_recomputation_dies_with_the_backward():
    SavesOutput.made.clear()
    x = leaf(4, seed=4)
    gc.disable()
    try:
        out = checkpoint(lambda t: (SavesOutput.apply(t * 1.0) * 3.0).tanh(), x)
        out.sum().backward()
        assert len(SavesOutput.made) == 2  # the forward's and the recomputation's
        assert all(r() is None for r in SavesOutput.made)
    finally:
        gc.enable()
    e = np.exp(x.numpy())
    np.testing.assert_allclose(x.grad.numpy(), (1 - np.tanh(3 * e) ** 2) * 3 * e, rtol=1e-12)


def test_reading_saved_tensors_twice_in_a_region_raises_pytorchs_error():
    x = leaf(4, seed=5)
    out = checkpoint(lambda t: ReadsTwice.apply(t.tanh()).exp(), x)
    with pytest.raises(mg.CheckpointError, match="^memgrad.checkpoint: Unpack is being "
                                                 "triggered for a tensor that was already "
                                                 "unpacked once"):
        out.sum().backward()


def test_each_backward_recomputes_once():
    runs = []

    def fn(t):
        runs.append(is_recomputing())
        y = t.tanh().exp()
        return y, (y * y).sum()

    x = leaf(4, seed=6)
    y, z = checkpoint(fn, x)
    autograd.grad(z, x, retain_graph=True)
    autograd.grad(z, x, retain_graph=True)
    assert runs == [False, True, True]
    with GraphExecGroup():
        autograd.grad(z, y, retain_graph=True)
        autograd.grad(y.sum(), x, retain_graph=True)
    assert runs == [False, True, True, True]
    with GraphExecGroup():
        autograd.grad(z, x, retain_graph=True)
        with pytest.raises(mg.CheckpointError, match="Performing two backward calls that "
                                                     "overlap"):
            autograd.grad(z, x, retain_graph=True)
    with pytest.raises(RuntimeError, match="GraphExecGroup contexts cannot be nested"):
        with GraphExecGroup(), GraphExecGroup():
            pass


def test_reentrant_errors_in_pytorchs_words():
    x = leaf(5, seed=7)
    out = checkpoint(lambda t: (t * W).tanh(), x, use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match="^memgrad.checkpoint: when use_reentrant=True, "
                                                 "memgrad.checkpoint is incompatible with "
                                                 r"\.grad\(\).*use_reentrant=False"):
        autograd.grad(out.sum(), x)
    with pytest.raises(mg.CheckpointError, match="incompatible with .grad()"):
        checkpoint(lambda t: (t * W).tanh(), x, use_reentrant=True).sum().backward(inputs=[x])
    frozen = mg.tensor(np.ones(5))
    out = checkpoint(lambda a, b: b * 1.0, x, frozen, use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match="^memgrad.checkpoint: none of output has "
                                                 r"requires_grad=True, this checkpoint\(\) is "
                                                 "not necessary"):
        out.sum().backward()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoint(lambda t: t * W, frozen, use_reentrant=True)
    assert any(str(w.message).startswith("memgrad.checkpoint: None of the inputs have "
                                         "requires_grad=True. Gradients will be None")
               for w in caught)
    with pytest.raises(ValueError, match="^memgrad.checkpoint: Unexpected keyword arguments: "
                                         "scale"):
        checkpoint(lambda t, scale: t * scale, x, scale=2.0, use_reentrant=True)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("write", ["index", "transpose", "flat slice", "copy_"])
def test_a_write_through_a_view_inside_the_region(use_reentrant, write):
    # the reentrant forward runs under no_grad, where the write is only a write; its
    # recomputation, in grad mode, records it and then writes it into the base (view_write),
    # which the determinism check must not count as an op of the region
    writers = {"index": lambda h: h[0].mul_(3), "transpose": lambda h: h.t()[0].add_(1.0),
               "flat slice": lambda h: h.reshape(-1)[:2].add_(1.0),
               "copy_": lambda h: h[0].copy_(mg.tensor(np.ones(2)))}
    data = np.random.default_rng(0).standard_normal((3, 2))

    def f(x: mg.Tensor) -> mg.Tensor:
        h = x * 2
        writers[write](h)
        return h.sin()

    grads = []
    for ck in (True, False):
        x = mg.tensor(data, requires_grad=True)
        y = checkpoint(f, x, use_reentrant=use_reentrant) if ck else f(x)
        (y * y).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(*grads)
