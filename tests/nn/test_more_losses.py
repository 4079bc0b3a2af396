"""binary_cross_entropy, smooth_l1_loss, huber_loss, kl_div, normalize, cosine_similarity,
their modules, Softmax/LogSoftmax/Unflatten and ReduceLROnPlateau, against NumPy
formulations of PyTorch's definitions (and gradcheck for the gradients)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.autograd import gradcheck, gradgradcheck
from memgrad.optim.lr_scheduler import ReduceLROnPlateau


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def T(a, requires_grad=False):
    return mg.tensor(a, requires_grad=requires_grad)


def _probs(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.05, 0.95, shape)


# ---------------------------------------------------------------------------- values


def test_binary_cross_entropy_matches_numpy_and_clamps_its_logs():
    x, y, w = _probs(3, 4), _probs(3, 4, seed=1), _probs(3, 4, seed=2)
    want = -(y * np.log(x) + (1 - y) * np.log(1 - x))
    np.testing.assert_allclose(F.binary_cross_entropy(T(x), T(y), reduction="none").numpy(),
                               want, rtol=1e-12)
    np.testing.assert_allclose(F.binary_cross_entropy(T(x), T(y), T(w)).item(),
                               (want * w).mean(), rtol=1e-12)
    edge = F.binary_cross_entropy(T([0.0, 1.0]), T([1.0, 0.0]), reduction="none")
    assert edge.tolist() == [100.0, 100.0]  # PyTorch's clamp of log at -100
    assert F.binary_cross_entropy(T([0.0, 1.0]), T([0.0, 1.0]), reduction="sum").item() == 0.0


def test_smooth_l1_and_huber_match_their_piecewise_definitions():
    d = np.array([-3.0, -1.0, -0.4, 0.0, 0.3, 0.99, 2.5])
    for beta in (0.5, 1.0, 2.0):
        want = np.where(np.abs(d) < beta, 0.5 * d * d / beta, np.abs(d) - 0.5 * beta)
        got = F.smooth_l1_loss(T(d), mg.zeros(7, dtype=mg.float64), reduction="none", beta=beta)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
        hub = F.huber_loss(T(d), mg.zeros(7, dtype=mg.float64), reduction="none", delta=beta)
        np.testing.assert_allclose(hub.numpy(), want * beta, rtol=1e-15)
    l1 = F.smooth_l1_loss(T(d), mg.zeros(7, dtype=mg.float64), beta=0.0)
    assert l1.item() == pytest.approx(np.abs(d).mean())


def test_kl_div_matches_its_definition_with_zero_targets():
    logq = np.log(_probs(2, 5))
    p = _probs(2, 5, seed=1)
    p[0, 1] = 0.0
    terms = np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - logq), 0.0)
    assert F.kl_div(T(logq), T(p), reduction="batchmean").item() == pytest.approx(
        terms.sum() / 2, rel=1e-12)
    assert F.kl_div(T(logq), T(p), reduction="sum").item() == pytest.approx(terms.sum())
    logp = np.log(_probs(2, 5, seed=1))
    np.testing.assert_allclose(
        F.kl_div(T(logq), T(logp), reduction="none", log_target=True).numpy(),
        np.exp(logp) * (logp - logq), rtol=1e-12)
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(T(logq), T(p))


def test_normalize_and_cosine_similarity_match_numpy():
    a, b = rand(3, 4), rand(3, 4, seed=1)
    np.testing.assert_allclose(F.normalize(T(a)).numpy(),
                               a / np.linalg.norm(a, axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(F.normalize(T(a), p=1, dim=0).numpy(),
                               a / np.abs(a).sum(0, keepdims=True), rtol=1e-12)
    assert F.normalize(mg.zeros(1, 3)).tolist() == [[0.0, 0.0, 0.0]]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(F.cosine_similarity(T(a), T(b)).numpy(), cos, rtol=1e-12)
    bc = F.cosine_similarity(T(a), T(b[:1]), dim=-1)  # broadcast
    assert bc.shape == (3,)


@pytest.mark.parametrize("name", ["bce", "smooth_l1", "huber", "kl", "kl_log", "normalize",
                                  "cosine"])
def test_gradients_and_second_derivatives(name):
    x, y = _probs(2, 3), _probs(2, 3, seed=1)
    fn, args = {
        "bce": (lambda a, b: F.binary_cross_entropy(a, b), (x, y)),
        "smooth_l1": (lambda a, b: F.smooth_l1_loss(a, b, beta=0.3),
                      (rand(2, 3), rand(2, 3, seed=1))),
        "huber": (lambda a, b: F.huber_loss(a, b, delta=0.7), (rand(2, 3), rand(2, 3, seed=1))),
        "kl": (lambda a, b: F.kl_div(a, b, reduction="batchmean"), (np.log(x), y)),
        "kl_log": (lambda a, b: F.kl_div(a, b, reduction="sum", log_target=True),
                   (np.log(x), np.log(y))),
        "normalize": (lambda a, b: F.normalize(a * b, dim=0), (rand(2, 3), rand(2, 3, seed=1))),
        "cosine": (lambda a, b: F.cosine_similarity(a, b), (rand(2, 3), rand(2, 3, seed=1))),
    }[name]
    leaves = [T(a, requires_grad=True) for a in args]
    assert gradcheck(fn, leaves)
    assert gradgradcheck(fn, leaves)


def test_kl_div_target_gradient_is_finite_at_zero_targets():
    q = T(np.log(_probs(1, 3)), requires_grad=True)
    p = T([[0.0, 0.5, 0.5]], requires_grad=True)
    F.kl_div(q, p, reduction="sum").backward()
    # PyTorch's: log(p) + 1 - q where p > 0, and 0 where p is 0
    want = np.where(p.numpy() > 0, np.log(np.where(p.numpy() > 0, p.numpy(), 1)) + 1
                    - q.detach().numpy(), 0.0)
    np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-6)
    assert p.grad.tolist()[0][0] == 0.0 and q.grad.tolist()[0][0] == 0.0


# ---------------------------------------------------------------------------- errors


def test_loss_errors_name_the_function_and_the_fix():
    with pytest.raises(ValueError, match="binary_cross_entropy: all elements of input should "
                                         "be between 0 and 1"):
        F.binary_cross_entropy(T([1.5]), T([1.0]))
    with pytest.raises(ValueError, match="binary_cross_entropy: Using a target size"):
        F.binary_cross_entropy(T([0.5, 0.5]), T([1.0]))
    with pytest.raises(TypeError, match="kl_div: target must be a floating tensor"):
        F.kl_div(T([0.5]), T([1]))
    with pytest.raises(ValueError, match="smooth_l1_loss: beta must be >= 0"):
        F.smooth_l1_loss(T([0.5]), T([1.0]), beta=-1.0)
    with pytest.raises(ValueError, match="huber_loss: delta must be positive"):
        F.huber_loss(T([0.5]), T([1.0]), delta=0.0)
    with pytest.raises(ValueError, match="huber_loss: 'avg' is not a valid value"):
        F.huber_loss(T([0.5]), T([1.0]), reduction="avg")
    with pytest.raises(TypeError, match="normalize: expected a float32 or float64"):
        F.normalize(T([1, 2]))
    with pytest.raises(ValueError, match="cosine_similarity: x1 of shape"):
        F.cosine_similarity(mg.zeros(2, 3), mg.zeros(2, 4))


# ---------------------------------------------------------------------------- modules


def test_loss_modules_equal_their_functions():
    x, y, w = _probs(2, 3), _probs(2, 3, seed=1), _probs(2, 3, seed=2)
    assert nn.BCELoss()(T(x), T(y)).item() == F.binary_cross_entropy(T(x), T(y)).item()
    assert nn.BCELoss(T(w), reduction="sum")(T(x), T(y)).item() == F.binary_cross_entropy(
        T(x), T(y), T(w), reduction="sum").item()
    assert "weight" in dict(nn.BCELoss(T(w)).named_buffers())
    assert nn.SmoothL1Loss(beta=0.5)(T(x), T(y)).item() == F.smooth_l1_loss(
        T(x), T(y), beta=0.5).item()
    assert nn.HuberLoss(delta=0.5)(T(x), T(y)).item() == F.huber_loss(
        T(x), T(y), delta=0.5).item()
    assert nn.KLDivLoss(reduction="batchmean", log_target=True)(T(x), T(y)).item() == F.kl_div(
        T(x), T(y), reduction="batchmean", log_target=True).item()
    with pytest.raises(ValueError, match="KLDivLoss: 'max' is not a valid value"):
        nn.KLDivLoss(reduction="max")


def test_softmax_modules_and_pytorchs_implicit_dim():
    x = rand(2, 3, 4)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(nn.Softmax(dim=-1)(T(x)).numpy(), e / e.sum(-1, keepdims=True),
                               rtol=1e-12)
    np.testing.assert_allclose(nn.LogSoftmax(dim=-1)(T(x)).numpy(),
                               np.log(e / e.sum(-1, keepdims=True)), rtol=1e-12)
    with pytest.warns(UserWarning, match="implicit dimension choice"):
        implicit = nn.Softmax()(T(x))  # 3-D input: PyTorch's legacy choice is dim 0
    np.testing.assert_allclose(implicit.sum(0).numpy(), 1.0, rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.Softmax(dim=1)(T(x))
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"


def test_unflatten_module():
    m = nn.Unflatten(1, (2, -1))
    assert m(mg.zeros(3, 8)).shape == (3, 2, 4)
    assert repr(m) == "Unflatten(dim=1, unflattened_size=(2, -1))"
    with pytest.raises(TypeError, match="Unflatten: unflattened_size must be a tuple"):
        nn.Unflatten(1, 4)


# ---------------------------------------------------------------------------- plateau


def _plateau_reference(metrics, lr, mode, factor, patience, threshold, threshold_mode,
                       cooldown, min_lr):
    """PyTorch's documented rule, written out: the rate after each step."""
    best = math.inf if mode == "min" else -math.inf
    bad = cool = 0
    out = []
    for m in metrics:
        if threshold_mode == "rel":
            bound = best * (1 - threshold) if mode == "min" else best * (1 + threshold)
        else:
            bound = best - threshold if mode == "min" else best + threshold
        if (m < bound) if mode == "min" else (m > bound):
            best, bad = m, 0
        else:
            bad += 1
        if cool > 0:
            cool -= 1
            bad = 0
        if bad > patience:
            new = max(lr * factor, min_lr)
            if lr - new > 1e-8:
                lr = new
            cool, bad = cooldown, 0
        out.append(lr)
    return out


@pytest.mark.parametrize("mode,threshold_mode,cooldown", [
    ("min", "rel", 0), ("min", "abs", 2), ("max", "rel", 1), ("max", "abs", 0)])
def test_reduce_lr_on_plateau_follows_the_rule(mode, threshold_mode, cooldown):
    rng = np.random.default_rng(3)
    metrics = list(np.round(rng.uniform(0, 1, 40), 1))
    opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
    sched = ReduceLROnPlateau(opt, mode=mode, factor=0.5, patience=2, threshold=0.05,
                              threshold_mode=threshold_mode, cooldown=cooldown, min_lr=0.01)
    got = []
    for m in metrics:
        sched.step(m)
        got.append(sched.get_last_lr()[0])
    assert got == _plateau_reference(metrics, 1.0, mode, 0.5, 2, 0.05, threshold_mode,
                                     cooldown, 0.01)
    assert min(got) >= 0.01 and got[-1] < 1.0


def test_reduce_lr_on_plateau_state_round_trips_through_save(tmp_path):
    opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
    sched = ReduceLROnPlateau(opt, patience=0)
    for m in (3.0, 4.0, 5.0):
        sched.step(m)
    mg.save(sched.state_dict(), tmp_path / "s.npz")
    again = ReduceLROnPlateau(mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0))
    again.load_state_dict(mg.load(tmp_path / "s.npz"))
    assert (again.best, again.patience) == (3.0, 0)
    assert again.get_last_lr() == pytest.approx([0.01])


def test_reduce_lr_on_plateau_errors():
    opt = mg.optim.SGD([mg.zeros(1, requires_grad=True)], lr=1.0)
    with pytest.raises(ValueError, match="ReduceLROnPlateau: factor must be in"):
        ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="ReduceLROnPlateau: mode must be"):
        ReduceLROnPlateau(opt, mode="up")
    with pytest.raises(ValueError, match="expected 1 min_lr values"):
        ReduceLROnPlateau(opt, min_lr=[0.1, 0.2])
    with pytest.raises(TypeError, match="is not an Optimizer"):
        ReduceLROnPlateau([1.0])


def test_bilinear_matches_its_definition_and_pytorchs_init():
    mg.manual_seed(0)
    m = nn.Bilinear(3, 4, 5).double()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 6, 4))
    w, bias = m.weight.numpy(), m.bias.numpy()
    want = np.einsum("nti,oij,ntj->nto", a, w, b) + bias
    np.testing.assert_allclose(m(T(a), T(b)).numpy(), want, rtol=1e-12)
    assert np.abs(w).max() <= 1 / np.sqrt(3) and w.shape == (5, 3, 4)
    x1, x2 = T(a[0, :2], requires_grad=True), T(b[0, :2], requires_grad=True)
    assert gradcheck(lambda p, q: m(p, q), [x1, x2])
    assert nn.Bilinear(3, 4, 5, bias=False).bias is None
    with pytest.raises(mg.ShapeError, match="Bilinear: input2 must have last size 4"):
        m(T(a), T(a))
