"""The activations (silu, leaky_relu, elu, softplus, mish) and the losses added beside
cross_entropy (class weights, class-probability targets, l1_loss,
binary_cross_entropy_with_logits), against NumPy formulations of PyTorch's definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
import memgrad.ops.nn as F
from memgrad.autograd import gradcheck, gradgradcheck
from memgrad.errors import ShapeError


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def T(a, requires_grad=False):
    return mg.tensor(a, requires_grad=requires_grad)


def grad_of(fn, x):
    t = T(x, requires_grad=True)
    fn(t).backward()
    return t.grad.numpy()


def np_log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


# ---------------------------------------------------------------------------- activations


def test_derivatives_at_the_kinks_are_pytorchs():
    zero = np.zeros(1)
    assert grad_of(lambda x: F.leaky_relu(x, 0.3).sum(), zero)[0] == pytest.approx(0.3)
    assert grad_of(lambda x: F.elu(x, 2.0).sum(), zero)[0] == pytest.approx(2.0)
    # softplus is the identity above the threshold, and so is its derivative
    x = np.array([25.0, 5.0])
    np.testing.assert_allclose(F.softplus(T(x)).numpy(), [25.0, math.log1p(math.exp(5.0))])
    np.testing.assert_allclose(grad_of(lambda t: F.softplus(t).sum(), x),
                               [1.0, 1 / (1 + math.exp(-5.0))])


def test_activations_do_not_overflow_on_large_inputs():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    np.testing.assert_allclose(F.silu(T(x)).numpy(), [0.0, -50 / (1 + math.exp(50)), 0, 50, 1000])
    np.testing.assert_allclose(F.mish(T(x)).numpy(), [0.0, -50 * math.tanh(math.log1p(
        math.exp(-50))), 0, 50, 1000])
    np.testing.assert_allclose(F.softplus(T(x), threshold=math.inf).numpy(),
                               np.logaddexp(0, x))
    assert np.isfinite(grad_of(lambda t: F.elu(t).sum(), x)).all()


@pytest.mark.parametrize("name", ["silu", "leaky_relu", "elu", "mish"])
def test_inplace_activation_writes_into_its_input_and_differentiates(name):
    fn = getattr(F, name)
    x = rand(3, 4)
    want = fn(T(x)).numpy()
    a = T(x, requires_grad=True)
    b = a * 1.0
    out = fn(b, inplace=True)
    assert out is b
    np.testing.assert_allclose(b.numpy(), want)
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), grad_of(lambda t: fn(t).sum(), x))


def test_activation_errors():
    with pytest.raises(TypeError, match="silu: expected a float32 or float64"):
        F.silu(T(np.array([1, 2])))
    with pytest.raises(TypeError, match="leaky_relu: negative_slope must be a number"):
        F.leaky_relu(T(rand(2)), "0.1")
    with pytest.raises(ValueError, match="softplus: beta must be non-zero"):
        F.softplus(T(rand(2)), beta=0)


# ---------------------------------------------------------------------------- cross-entropy


def weighted_ce_ref(x, t, w, eps=0.0, ignore_index=-100):
    """PyTorch's class-weighted, label-smoothed cross-entropy and its gradient, mean
    reduction: both sums divided by the sum of the target weights of the rows kept."""
    logp = np_log_softmax(x)
    p = np.exp(logp)
    n, c = x.shape
    loss, grad, wsum = 0.0, np.zeros_like(x), 0.0
    for i in range(n):
        if t[i] == ignore_index:
            continue
        wt = w[t[i]]
        wsum += wt
        loss += (1 - eps) * wt * -logp[i, t[i]] + eps / c * (w * -logp[i]).sum()
        grad[i] = (1 - eps) * wt * (p[i] - np.eye(c)[t[i]]) + eps / c * (p[i] * w.sum() - w)
    return loss / wsum, grad / wsum


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_class_weighted_cross_entropy_gives_pytorchs_value_and_gradient(eps):
    x = 2 * rand(6, 4)
    t = np.array([0, 3, -100, 2, 3, 1])
    w = np.array([0.5, 2.0, 1.0, 3.0])
    want, want_grad = weighted_ce_ref(x, t, w, eps)
    xt = T(x, requires_grad=True)
    loss = F.cross_entropy(xt, T(t), weight=T(w), label_smoothing=eps)
    np.testing.assert_allclose(loss.item(), want, rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(xt.grad.numpy(), want_grad, rtol=1e-10, atol=1e-14)
    s = F.cross_entropy(T(x), T(t), weight=T(w), label_smoothing=eps, reduction="sum")
    np.testing.assert_allclose(s.item(), want * w[t[t >= 0]].sum(), rtol=1e-12)
    fn = lambda a: F.cross_entropy(a, T(t), weight=T(w), label_smoothing=eps)  # noqa: E731
    assert gradcheck(fn, (T(x, requires_grad=True),))
    assert gradgradcheck(fn, (T(x, requires_grad=True),))


def test_weighted_nll_loss_and_spatial_cross_entropy():
    logp = np_log_softmax(rand(5, 3))
    t = np.array([2, 0, 1, 1, -100])
    w = np.array([1.0, 4.0, 0.5])
    want = sum(-w[k] * logp[i, k] for i, k in enumerate(t) if k >= 0) / w[t[:4]].sum()
    np.testing.assert_allclose(F.nll_loss(T(logp), T(t), T(w)).item(), want, rtol=1e-12)
    x = rand(2, 3, 2, 2)
    ts = np.random.default_rng(3).integers(0, 3, (2, 2, 2))
    rows = np.moveaxis(x, 1, -1).reshape(-1, 3)
    want, _ = weighted_ce_ref(rows, ts.reshape(-1), w)
    np.testing.assert_allclose(F.cross_entropy(T(x), T(ts), weight=T(w)).item(), want,
                               rtol=1e-12)


def test_cross_entropy_with_class_probabilities():
    x = rand(4, 5)
    q = np.exp(np_log_softmax(rand(4, 5, seed=1)))
    w = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    eps = 0.2
    qs = q * (1 - eps) + eps / 5
    per = -(np_log_softmax(x) * qs * w).sum(axis=1)
    np.testing.assert_allclose(
        F.cross_entropy(T(x), T(q), weight=T(w), label_smoothing=eps, reduction="none").numpy(),
        per, rtol=1e-12)
    # the mean is over the rows, not over the weights
    np.testing.assert_allclose(F.cross_entropy(T(x), T(q), weight=T(w),
                                               label_smoothing=eps).item(), per.mean())
    fn = lambda a, b: F.cross_entropy(a, b)  # noqa: E731
    assert gradcheck(fn, (T(x, requires_grad=True), T(q, requires_grad=True)))


def test_weight_and_legacy_reduction_errors():
    x, t = T(rand(3, 4)), T(np.array([0, 1, 2]))
    with pytest.raises(ShapeError, match=r"one value per class, shape \(4,\), got shape \(3,\)"):
        F.cross_entropy(x, t, weight=T(np.ones(3)))
    with pytest.raises(TypeError, match="weight must be a floating tensor"):
        F.nll_loss(x, t, T(np.ones(4, dtype=np.int64)))
    with pytest.warns(UserWarning, match="reduction='sum'"):
        s = F.cross_entropy(x, t, size_average=False)
    np.testing.assert_allclose(s.item(), F.cross_entropy(x, t, reduction="sum").item())
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert F.mse_loss(x, x, reduce=False).shape == (3, 4)


# ---------------------------------------------------------------------------- l1 and bce


def test_l1_loss_values_and_zero_gradient_at_ties():
    a, b = rand(3, 4), rand(3, 4, seed=1)
    b[0, 0] = a[0, 0]
    np.testing.assert_allclose(F.l1_loss(T(a), T(b)).item(), np.abs(a - b).mean())
    np.testing.assert_allclose(F.l1_loss(T(a), T(b), reduction="sum").item(), np.abs(a - b).sum())
    g = grad_of(lambda t: F.l1_loss(t, T(b), reduction="sum"), a)
    np.testing.assert_array_equal(g, np.sign(a - b))


def bce_ref(x, y, w=1.0, pw=1.0):
    s = 1 / (1 + np.exp(-x))
    return -w * (pw * y * np.log(s) + (1 - y) * np.log(1 - s))


def test_bce_with_logits_matches_the_formula_with_weight_and_pos_weight():
    x = rand(4, 3)
    y = np.random.default_rng(2).uniform(0, 1, (4, 3))
    w, pw = np.abs(rand(4, 1, seed=3)), np.array([0.5, 2.0, 3.0])
    got = F.binary_cross_entropy_with_logits(T(x), T(y), T(w), reduction="none",
                                             pos_weight=T(pw))
    np.testing.assert_allclose(got.numpy(), bce_ref(x, y, w, pw), rtol=1e-12)
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(T(x), T(y), pos_weight=T(pw)).item(),
        bce_ref(x, y, 1.0, pw).mean(), rtol=1e-12)
    # d/dx: w * ((1 + (pw - 1) y) sigmoid(x) - pw y)
    s = 1 / (1 + np.exp(-x))
    g = grad_of(lambda t: F.binary_cross_entropy_with_logits(t, T(y), T(w), reduction="sum",
                                                             pos_weight=T(pw)), x)
    np.testing.assert_allclose(g, w * ((1 + (pw - 1) * y) * s - pw * y), rtol=1e-10)
    fn = lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=T(pw))  # noqa: E731
    assert gradgradcheck(fn, (T(x, requires_grad=True), T(y, requires_grad=True)))


def test_bce_with_logits_is_stable_and_checks_its_target():
    x = np.array([100.0, -100.0])
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(T(x), T(np.zeros(2)), reduction="none").numpy(),
        [100.0, 0.0], atol=1e-30)
    with pytest.raises(ValueError, match=r"Target size \(\(3,\)\) must be the same"):
        F.binary_cross_entropy_with_logits(T(x), T(np.zeros(3)))
    with pytest.raises(TypeError, match="floating tensor.*float"):
        F.binary_cross_entropy_with_logits(T(x), T(np.zeros(2, dtype=np.int64)))
