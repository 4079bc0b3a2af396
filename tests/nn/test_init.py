"""nn.init: each initialiser's bounds and moments against PyTorch's formulas (large
samples, tolerances of several standard errors), gains, reproducibility and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
from memgrad.nn import init


def big(*shape):
    return mg.empty(*shape, dtype=mg.float64)


@pytest.mark.parametrize("name,param,want", [
    ("linear", None, 1.0), ("conv2d", None, 1.0), ("sigmoid", None, 1.0), ("tanh", None, 5 / 3),
    ("relu", None, math.sqrt(2)), ("leaky_relu", None, math.sqrt(2 / (1 + 0.01**2))),
    ("leaky_relu", 0.2, math.sqrt(2 / 1.04)), ("selu", None, 0.75),
])
def test_calculate_gain(name, param, want):
    assert init.calculate_gain(name, param) == pytest.approx(want, rel=1e-15)


def test_uniform_normal_and_constants():
    w = init.uniform_(big(200_000), -0.5, 1.5).numpy()
    assert w.min() >= -0.5 and w.max() <= 1.5
    assert abs(w.mean() - 0.5) < 5 * (2 / math.sqrt(12)) / math.sqrt(w.size)
    w = init.normal_(big(200_000), 2.0, 3.0).numpy()
    assert abs(w.mean() - 2.0) < 5 * 3 / math.sqrt(w.size)
    assert abs(w.std() - 3.0) < 0.03
    assert init.constant_(big(3), 0.25).tolist() == [0.25] * 3
    assert init.zeros_(big(2)).tolist() == [0.0, 0.0]
    assert init.ones_(big(2)).tolist() == [1.0, 1.0]


def test_xavier_and_kaiming_use_the_fans_of_the_weight():
    shape = (64, 32, 3, 3)  # fan_in 288, fan_out 576
    w = init.xavier_uniform_(big(*shape), gain=2.0).numpy()
    bound = 2.0 * math.sqrt(6 / (288 + 576))
    assert w.max() <= bound and w.max() > 0.99 * bound
    w = init.xavier_normal_(big(*shape)).numpy()
    assert w.std() == pytest.approx(math.sqrt(2 / (288 + 576)), rel=0.02)
    w = init.kaiming_normal_(big(*shape), mode="fan_out", nonlinearity="relu").numpy()
    assert w.std() == pytest.approx(math.sqrt(2) / math.sqrt(576), rel=0.02)
    w = init.kaiming_uniform_(big(*shape), a=math.sqrt(5)).numpy()
    assert w.max() <= 1 / math.sqrt(288) and w.max() > 0.99 / math.sqrt(288)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(big(5))
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_normal_(big(2, 2), mode="fan")


def _phi(x):
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _cdf(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def test_trunc_normal_has_the_truncated_distributions_moments():
    mean, std, a, b = 0.5, 2.0, -1.0, 4.0
    w = init.trunc_normal_(big(400_000), mean, std, a, b).numpy()
    assert w.min() >= a and w.max() <= b
    lo, hi = (a - mean) / std, (b - mean) / std
    z = _cdf(hi) - _cdf(lo)
    m = (_phi(lo) - _phi(hi)) / z
    var = 1 + (lo * _phi(lo) - hi * _phi(hi)) / z - m * m
    assert w.mean() == pytest.approx(mean + std * m, abs=5 * std * math.sqrt(var / w.size))
    assert w.var() == pytest.approx(std * std * var, rel=0.01)
    with pytest.raises(ValueError, match="a < b"):
        init.trunc_normal_(big(2), a=1.0, b=0.0)


@pytest.mark.parametrize("shape", [(3, 7), (7, 3), (4, 2, 3, 3), (5, 5)])
def test_orthogonal_gives_orthonormal_rows_or_columns(shape):
    w = init.orthogonal_(big(*shape), gain=1.5).numpy().reshape(shape[0], -1) / 1.5
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, np.eye(min(rows, cols)), atol=1e-12)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        init.orthogonal_(big(3))


def test_initialisers_follow_the_global_seed():
    for fn in (init.uniform_, init.normal_, init.xavier_uniform_, init.kaiming_normal_,
               init.trunc_normal_, init.orthogonal_):
        mg.manual_seed(3)
        a = fn(big(4, 5)).numpy().copy()
        mg.manual_seed(3)
        np.testing.assert_array_equal(fn(big(4, 5)).numpy(), a)


def test_initialisers_fill_in_place_without_a_graph():
    p = mg.nn.Parameter(mg.zeros(3, 3))
    assert init.orthogonal_(p) is p and p.grad_fn is None and p.requires_grad
