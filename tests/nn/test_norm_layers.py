"""BatchNorm1d/2d, GroupNorm and RMSNorm against NumPy formulations of PyTorch's
definitions; batch norm's running statistics (momentum, cumulative average, eval mode) and
their single update per step under activation checkpointing."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.autograd import gradcheck, gradgradcheck
from memgrad.checkpoint import CheckpointedSequential, checkpoint
from memgrad.errors import ShapeError


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def T(a, requires_grad=False):
    return mg.tensor(a, requires_grad=requires_grad)


def bn_ref(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mu, var = x.mean(axis=axes), x.var(axis=axes)
    y = (x - mu.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return y * w.reshape(shape) + b.reshape(shape), mu, x.var(axis=axes, ddof=1)


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm1d, (4, 3, 5)),
                                       (nn.BatchNorm2d, (2, 3, 4, 5))])
def test_batch_norm_train_step_and_eval_match_pytorchs_formulas(cls, shape):
    bn = cls(3, momentum=0.2).double()
    w, b = rand(3, seed=1), rand(3, seed=2)
    bn.weight.numpy()[...] = w
    bn.bias.numpy()[...] = b
    x = 3 * rand(*shape) + 1
    y = bn(T(x))
    want, mu, unbiased = bn_ref(x, w, b)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * mu, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * unbiased, rtol=1e-12)
    assert int(bn.num_batches_tracked) == 1
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    bn.eval()
    x2 = rand(*shape, seed=5)
    s = (1, -1) + (1,) * (len(shape) - 2)
    rm, rv = bn.running_mean.numpy().reshape(s), bn.running_var.numpy().reshape(s)
    want = (x2 - rm) / np.sqrt(rv + 1e-5) * w.reshape(s) + b.reshape(s)
    np.testing.assert_allclose(bn(T(x2)).numpy(), want, rtol=1e-10)
    assert int(bn.num_batches_tracked) == 1


def test_batch_norm_cumulative_average_and_no_running_stats():
    bn = nn.BatchNorm1d(2, momentum=None).double()
    xs = [rand(5, 2, seed=s) for s in range(3)]
    for x in xs:
        bn(T(x))
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([x.mean(0) for x in xs], 0),
                               rtol=1e-12)
    # the first step's factor is 1: the initial running_var of 1 is forgotten
    np.testing.assert_allclose(bn.running_var.numpy(),
                               np.mean([x.var(0, ddof=1) for x in xs], 0), rtol=1e-12)
    free = nn.BatchNorm1d(2, affine=False, track_running_stats=False).eval()
    assert free.running_mean is None and list(free.state_dict()) == []
    x = rand(5, 2)
    np.testing.assert_allclose(free(T(x)).numpy(), (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5),
                               rtol=1e-10)


def test_batch_norm_gradients_first_and_second_order():
    rm, rv = mg.zeros(3, dtype=mg.float64), mg.ones(3, dtype=mg.float64)
    fn = lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True)  # noqa: E731
    args = (T(rand(4, 3, 2), True), T(rand(3, seed=1), True), T(rand(3, seed=2), True))
    assert gradcheck(fn, args)
    assert gradgradcheck(fn, args)
    ev = lambda x, w: F.batch_norm(x, rm, rv + 1.0, w, training=False)  # noqa: E731
    assert gradcheck(ev, args[:2])


def bn_model():
    mg.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 5),
                         nn.BatchNorm1d(5, momentum=None), nn.Tanh(), nn.Linear(5, 2)).double()


@pytest.mark.parametrize("how", ["plain-checkpoint", "reentrant", "sequential"])
def test_checkpointed_batch_norm_gives_plain_gradients_and_running_stats(how):
    x = rand(8, 4)
    plain, ckpt = bn_model(), bn_model()
    calls = []
    ckpt[1].register_forward_hook(lambda m, a, out: calls.append(1))
    for step in range(2):
        xi = T(x + step)
        plain(xi).pow(2).sum().backward()
        if how == "plain-checkpoint":
            out = checkpoint(ckpt, xi)
        elif how == "reentrant":
            out = checkpoint(ckpt, T(x + step, requires_grad=True), use_reentrant=True)
        else:
            out = CheckpointedSequential(ckpt, 2)(xi)
        out.pow(2).sum().backward()
    assert len(calls) == 4  # each step ran the layer twice: forward and recomputation
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=name)
    for (name, a), b in zip(plain.named_buffers(), ckpt.buffers()):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)
    assert int(ckpt[1].num_batches_tracked) == 2


def test_is_recomputing_is_true_only_inside_the_recomputation():
    seen = []

    def f(x):
        seen.append(mg.checkpoint.is_recomputing())
        return (x * 2).tanh()

    checkpoint(f, T(rand(3), True)).sum().backward()
    assert seen == [False, True]


def test_group_norm_matches_the_formula_and_gradchecks():
    x = rand(2, 6, 3, 2)
    gn = nn.GroupNorm(3, 6).double()
    w, b = rand(6, seed=1), rand(6, seed=2)
    gn.weight.numpy()[...] = w
    gn.bias.numpy()[...] = b
    g = x.reshape(2, 3, -1)
    want = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5))
    want = want.reshape(x.shape) * w[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(gn(T(x)).numpy(), want, rtol=1e-10, atol=1e-12)
    fn = lambda x, w, b: F.group_norm(x, 2, w, b)  # noqa: E731
    args = (T(rand(2, 4, 3), True), T(rand(4, seed=1), True), T(rand(4, seed=2), True))
    assert gradcheck(fn, args) and gradgradcheck(fn, args)
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="divides the 6 channels"):
        F.group_norm(T(x), 4)


def test_rms_norm_matches_the_formula_default_eps_and_gradchecks():
    x = rand(3, 2, 4)
    norm = nn.RMSNorm((2, 4)).double()
    w = rand(2, 4, seed=1)
    norm.weight.numpy()[...] = w
    eps = np.finfo(np.float64).eps
    want = x / np.sqrt((x * x).mean(axis=(1, 2), keepdims=True) + eps) * w
    np.testing.assert_allclose(norm(T(x)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(F.rms_norm(T(x), 4, eps=0.5).numpy(),
                               x / np.sqrt((x * x).mean(-1, keepdims=True) + 0.5), rtol=1e-12)
    fn = lambda x, w: F.rms_norm(x, 4, w, eps=1e-3)  # noqa: E731
    args = (T(rand(3, 4), True), T(rand(4, seed=1), True))
    assert gradcheck(fn, args) and gradgradcheck(fn, args)
    with pytest.raises(ShapeError, match=r"trailing dimensions.*\(3, 2, 4\)"):
        F.rms_norm(T(x), 3)


def test_batch_norm_errors():
    bn = nn.BatchNorm2d(3)
    with pytest.raises(ValueError, match="BatchNorm2d: expected 4D input, got 3D input"):
        bn(mg.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="expected 3 channels"):
        bn(mg.zeros(2, 4, 2, 2))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(mg.zeros(1, 3))
    with pytest.raises(ShapeError, match=r"weight must be a tensor of shape \(3,\)"):
        F.batch_norm(mg.zeros(2, 3), None, None, mg.ones(4), training=True)
