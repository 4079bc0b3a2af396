"""nn.utils: gradient clipping by total norm (orders 1, 2, 3 and inf, the 1e-6 of PyTorch's
coefficient, non-finite norms) and by value, and the parameter <-> vector round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
from memgrad.nn import utils


def params_with_grads(seed=0):
    rng = np.random.default_rng(seed)
    ps = []
    for shape in [(3, 4), (4,), (2, 2, 2)]:
        p = mg.nn.Parameter(mg.zeros(*shape, dtype=mg.float64))
        p.grad = mg.tensor(rng.standard_normal(shape))
        ps.append(p)
    return ps


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, math.inf])
def test_clip_grad_norm_returns_the_total_norm_and_scales_like_pytorch(norm_type):
    ps = params_with_grads()
    ps.append(mg.nn.Parameter(mg.zeros(2)))  # no grad: skipped
    flat = np.concatenate([p.grad.numpy().ravel() for p in ps[:3]])
    total = (np.abs(flat).max() if norm_type == math.inf
             else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type))
    before = [p.grad.numpy().copy() for p in ps[:3]]
    got = utils.clip_grad_norm_(ps, max_norm=0.5, norm_type=norm_type)
    assert got.shape == () and got.item() == pytest.approx(total, rel=1e-12)
    coef = 0.5 / (total + 1e-6)
    for p, g in zip(ps, before):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-12)
    assert ps[3].grad is None


def test_clip_grad_norm_leaves_small_gradients_and_accepts_one_tensor():
    p = mg.nn.Parameter(mg.zeros(2, dtype=mg.float64))
    p.grad = mg.tensor([0.3, 0.4], dtype=mg.float64)
    assert utils.clip_grad_norm_(p, 10.0).item() == pytest.approx(0.5)
    assert p.grad.tolist() == [0.3, 0.4]
    assert utils.clip_grad_norm_([], 1.0).item() == 0.0


def test_clip_grad_norm_nonfinite():
    p = mg.nn.Parameter(mg.zeros(2, dtype=mg.float64))
    p.grad = mg.tensor([math.nan, 1.0])
    with pytest.raises(RuntimeError, match="non-finite, so it cannot be clipped"):
        utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    assert math.isnan(utils.clip_grad_norm_([p], 1.0).item())
    p.grad = mg.tensor([math.inf, 1.0])
    assert utils.clip_grad_norm_([p], 1.0).item() == math.inf
    assert p.grad.numpy()[1] == 0.0


def test_clip_grad_value_():
    ps = params_with_grads()
    before = [p.grad.numpy().copy() for p in ps]
    version = ps[0].grad._version
    assert utils.clip_grad_value_(ps, 0.5) is None
    for p, g in zip(ps, before):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -0.5, 0.5))
    assert ps[0].grad._version == version + 1


def test_parameters_to_vector_round_trip_and_gradient():
    lin = mg.nn.Linear(3, 2).double()
    vec = utils.parameters_to_vector(lin.parameters())
    np.testing.assert_array_equal(vec.numpy(), np.concatenate(
        [lin.weight.numpy().ravel(), lin.bias.numpy()]))
    (vec * mg.arange(8.0)).sum().backward()
    np.testing.assert_array_equal(lin.weight.grad.numpy().ravel(), np.arange(6.0))
    w = lin.weight
    utils.vector_to_parameters(mg.arange(8.0) * 2, lin.parameters())
    assert lin.weight is w
    np.testing.assert_array_equal(lin.weight.numpy(), np.arange(6.0).reshape(2, 3) * 2)
    np.testing.assert_array_equal(lin.bias.numpy(), [12.0, 14.0])
    with pytest.raises(ValueError, match=r"one element per parameter element \(8\)"):
        utils.vector_to_parameters(mg.zeros(7), lin.parameters())
    with pytest.raises(TypeError, match="expected a Tensor"):
        utils.vector_to_parameters(np.zeros(8), lin.parameters())
