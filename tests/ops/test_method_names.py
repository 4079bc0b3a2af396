"""Tensor methods and functions that PyTorch code calls by name: the comparisons as methods,
square, clip, t, narrow and unbind, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("name,ref", [
    ("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
    ("gt", np.greater), ("ge", np.greater_equal), ("logical_and", np.logical_and),
    ("logical_or", np.logical_or), ("logical_xor", np.logical_xor),
])
def test_comparisons_as_methods_and_functions(name, ref):
    a = np.round(rand(3, 4), 0)
    b = np.round(rand(4, seed=1), 0)
    for out in (getattr(mg.tensor(a), name)(mg.tensor(b)), getattr(mg, name)(mg.tensor(a), b)):
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out.numpy(), ref(a, b))
    np.testing.assert_array_equal(getattr(mg.tensor(a), name)(0.0).numpy(), ref(a, 0.0))


def test_square_and_clip():
    x = rand(5)
    t = mg.tensor(x, requires_grad=True)
    np.testing.assert_array_equal(t.square().detach().numpy(), x * x)
    t.square().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 2 * x)
    np.testing.assert_array_equal(mg.clip(mg.tensor(x), -0.5, 0.5).numpy(), np.clip(x, -0.5, 0.5))
    np.testing.assert_array_equal(mg.tensor(x).clip(min=0.0).numpy(), np.maximum(x, 0.0))


def test_t_narrow_unbind():
    x = rand(3, 4)
    t = mg.tensor(x, requires_grad=True)
    np.testing.assert_array_equal(t.t().detach().numpy(), x.T)
    np.testing.assert_array_equal(mg.tensor(x[0]).t().numpy(), x[0])
    with pytest.raises(RuntimeError, match="t: expects a tensor with at most 2 dimensions"):
        mg.ones(2, 2, 2).t()
    np.testing.assert_array_equal(t.narrow(1, 1, 2).detach().numpy(), x[:, 1:3])
    np.testing.assert_array_equal(t.narrow(0, -2, 2).detach().numpy(), x[-2:])
    with pytest.raises(IndexError, match="narrow: start 3 and length 2 do not fit"):
        t.narrow(0, 3, 2)
    rows = t.unbind()
    assert len(rows) == 3 and all(r.shape == (4,) for r in rows)
    cols = mg.unbind(t, dim=-1)
    np.testing.assert_array_equal(np.stack([c.detach().numpy() for c in cols], 1), x)
    (rows[0].sum() * 2 + cols[3].sum()).backward()
    want = np.zeros((3, 4))
    want[0] += 2
    want[:, 3] += 1
    np.testing.assert_array_equal(t.grad.numpy(), want)
