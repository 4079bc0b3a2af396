"""Derivatives at the points where an op is not differentiable follow PyTorch's conventions:
``std`` at zero variance contributes 0, ``x ** 0`` has gradient 0 at x == 0, ``max(dim)`` and
``min(dim)`` send the gradient to the index they return while ``amax``/``amin`` (and
``max()`` over everything) split it evenly among ties."""

import numpy as np
import pytest

import memgrad as mg


def _t(values):
    return mg.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": 1, "keepdim": True}])
def test_std_at_zero_variance_has_zero_gradient(kwargs):
    x = _t([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    x.std(**kwargs).sum().backward()
    g = x.grad.numpy()
    assert np.isfinite(g).all()
    if kwargs:
        np.testing.assert_array_equal(g[0], 0.0)
        # the other row: d std / dx = (x - mean) / ((n - 1) * std)
        r = np.array([1.0, 2.0, 4.0])
        np.testing.assert_allclose(g[1], (r - r.mean()) / (2 * r.std(ddof=1)))


def test_std_of_a_constant_tensor_has_zero_gradient_and_gradgrad():
    x = _t([3.0, 3.0, 3.0])
    (g,) = mg.autograd.grad(x.std(), x, create_graph=True)
    np.testing.assert_array_equal(g.numpy(), 0.0)
    assert np.isfinite(mg.autograd.grad(g.sum(), x, allow_unused=True)[0].numpy()).all()


@pytest.mark.parametrize("exponent", [0, 0.0, "tensor"])
def test_x_to_the_zero_has_zero_gradient_at_zero(exponent):
    x = _t([0.0, 2.0, 1.5])
    y = _t([0.0, 0.0, 0.0]) if exponent == "tensor" else exponent
    (x ** y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


def test_tensor_exponent_zero_only_where_it_is_zero():
    x = _t([0.0, 2.0, 3.0])
    y = _t([0.0, 2.0, 0.0])
    (x ** y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 4.0, 0.0])
    # d/dy x ** y = x ** y log x, taken as 0 at x == 0
    np.testing.assert_allclose(y.grad.numpy(), [0.0, 4 * np.log(2.0), np.log(3.0)])


def test_float32_gradient_of_a_power_stays_float32():
    x = mg.tensor([0.0, 2.0], requires_grad=True)
    (x ** 0).sum().backward()
    assert x.grad.dtype == np.float32


@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_and_min_over_a_dim_send_the_gradient_to_the_returned_index(fn):
    x = _t([[1.0, 1.0, 0.0], [5.0, 2.0, 5.0]])
    if fn == "min":
        x = _t([[0.0, 0.0, 1.0], [-5.0, 2.0, -5.0]])
    values, indices = getattr(x, fn)(dim=1)
    values.sum().backward()
    want = np.zeros((2, 3))
    want[np.arange(2), indices.numpy()] = 1.0
    np.testing.assert_array_equal(x.grad.numpy(), want)
    np.testing.assert_array_equal(indices.numpy(), [0, 0])  # the first of the ties, as NumPy


@pytest.mark.parametrize("fn", ["amax", "amin"])
def test_amax_and_amin_split_the_gradient_evenly_among_ties(fn):
    x = _t([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]] if fn == "amax" else [[0.0, 0.0, 1.0],
                                                                   [2.0, 2.0, 2.0]])
    getattr(x, fn)(dim=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])


def test_max_over_everything_splits_evenly_as_in_pytorch():
    x = _t([3.0, 1.0, 3.0])
    x.max().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 0.0, 0.5])


def test_max_over_dim_zero_of_a_0d_tensor_is_the_element():
    x = _t(4.0)
    values, indices = x.max(dim=0)
    assert values.item() == 4.0 and indices.item() == 0 and indices.dtype == np.int64
    values.backward()
    assert x.grad.item() == 1.0
