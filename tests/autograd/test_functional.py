"""autograd.functional against central finite differences in float64: vjp, jvp, jacobian,
hessian, vhp and hvp, their tuple structures, create_graph and strict."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg

F = mg.autograd.functional
RNG = np.random.default_rng(7)
A = RNG.normal(size=(3, 4))
X0 = RNG.normal(size=4)
Y0 = RNG.normal(size=(2, 3))


def f_np(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.sin(A @ x) * y[0], (y ** 3) * x[0]


def f_mg(x: mg.Tensor, y: mg.Tensor) -> tuple[mg.Tensor, mg.Tensor]:
    return (mg.tensor(A) @ x).sin() * y[0], (y ** 3) * x[0]


def numeric_jacobian(fn, args: list[np.ndarray], eps: float = 1e-6) -> list[list[np.ndarray]]:
    """[output][input] blocks of shape out.shape + in.shape by central differences."""
    outs = fn(*args)
    blocks = [[np.zeros(o.shape + a.shape) for a in args] for o in outs]
    for k, a in enumerate(args):
        for idx in np.ndindex(a.shape):
            hi = [b.copy() for b in args]
            lo = [b.copy() for b in args]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            for i, (p, q) in enumerate(zip(fn(*hi), fn(*lo))):
                blocks[i][k][(Ellipsis,) + idx] = (p - q) / (2 * eps)
    return blocks


def t(a: np.ndarray) -> mg.Tensor:
    return mg.tensor(a, dtype=mg.float64)


J = numeric_jacobian(f_np, [X0, Y0])


def test_jacobian_of_tuples_is_output_by_input_blocks():
    got = F.jacobian(f_mg, (t(X0), t(Y0)))
    assert isinstance(got, tuple) and all(isinstance(row, tuple) and len(row) == 2 for row in got)
    for i in range(2):
        for k in range(2):
            np.testing.assert_allclose(got[i][k].numpy(), J[i][k], atol=1e-7)
            assert not got[i][k].requires_grad


def test_jacobian_of_one_input_and_one_output_is_one_tensor():
    got = F.jacobian(lambda x: f_mg(x, t(Y0))[0], t(X0))
    assert isinstance(got, mg.Tensor) and got.shape == (3, 4)
    np.testing.assert_allclose(got.numpy(), J[0][0], atol=1e-7)


def test_vjp_and_jvp_are_products_with_the_jacobian():
    u = (RNG.normal(size=3), RNG.normal(size=(2, 3)))
    v = (RNG.normal(size=4), RNG.normal(size=(2, 3)))
    out, back = F.vjp(f_mg, (t(X0), t(Y0)), (t(u[0]), t(u[1])))
    np.testing.assert_allclose(out[0].numpy(), f_np(X0, Y0)[0])
    for k in range(2):
        want = sum(np.tensordot(u[i], J[i][k], axes=u[i].ndim) for i in range(2))
        np.testing.assert_allclose(back[k].numpy(), want, atol=1e-7)
    _, fwd = F.jvp(f_mg, (t(X0), t(Y0)), (t(v[0]), t(v[1])))
    for i in range(2):
        want = sum(np.tensordot(J[i][k], v[k], axes=v[k].ndim) for k in range(2))
        np.testing.assert_allclose(fwd[i].numpy(), want, atol=1e-7)


def scalar_np(x: np.ndarray) -> tuple[np.ndarray]:
    return (np.array(np.sum(np.sin(A @ x) * np.exp(x[:3] * 0.5)) + x[3] ** 4),)


def scalar_mg(x: mg.Tensor) -> mg.Tensor:
    return ((mg.tensor(A) @ x).sin() * (x[:3] * 0.5).exp()).sum() + x[3] ** 4


def gradient_np(x: np.ndarray) -> tuple[np.ndarray]:
    return (numeric_jacobian(scalar_np, [x], eps=1e-5)[0][0],)


def test_hessian_vhp_and_hvp_agree_with_finite_differences():
    (h_ref,), = numeric_jacobian(gradient_np, [X0], eps=1e-4)
    h = F.hessian(scalar_mg, t(X0))
    np.testing.assert_allclose(h.numpy(), h_ref, atol=1e-5)
    np.testing.assert_allclose(h.numpy(), h.numpy().T, atol=1e-12)
    v = RNG.normal(size=4)
    for fn in (F.vhp, F.hvp):
        out, p = fn(scalar_mg, t(X0), t(v))
        np.testing.assert_allclose(out.item(), scalar_np(X0)[0])
        np.testing.assert_allclose(p.numpy(), h_ref @ v, atol=1e-5)


def test_hessian_of_a_tuple_of_inputs_is_input_by_input():
    def fn(x, y):
        return (x * x).sum() * (y ** 3).sum()
    x, y = np.array([1.0, 2.0]), np.array([0.5, -1.0, 2.0])
    h = F.hessian(fn, (t(x), t(y)))
    s = np.sum(y ** 3)
    np.testing.assert_allclose(h[0][0].numpy(), 2 * s * np.eye(2))
    np.testing.assert_allclose(h[0][1].numpy(), np.outer(2 * x, 3 * y ** 2))
    np.testing.assert_allclose(h[1][0].numpy(), np.outer(3 * y ** 2, 2 * x))
    np.testing.assert_allclose(h[1][1].numpy(), np.diag(6 * y) * np.sum(x * x))


def test_create_graph_lets_the_result_be_differentiated_back_to_the_inputs():
    x = t(X0).requires_grad_(True)
    h = F.hessian(scalar_mg, x, create_graph=True)
    assert h.requires_grad
    (g,) = mg.autograd.grad(h.sum(), x)

    def hess_sum(a: np.ndarray) -> tuple[np.ndarray]:
        return (np.array(F.hessian(scalar_mg, t(a)).numpy().sum()),)

    np.testing.assert_allclose(g.numpy(), numeric_jacobian(hess_sum, [X0], 1e-5)[0][0],
                               atol=1e-5)
    _, p = F.jvp(lambda a: a.sin(), x, mg.ones(4, dtype=mg.float64), create_graph=True)
    (g,) = mg.autograd.grad(p.sum(), x)
    np.testing.assert_allclose(g.numpy(), -np.sin(X0))


def test_v_may_be_left_out_only_for_one_element():
    out, g = F.vjp(lambda x: (x * x).sum(), t(X0))
    np.testing.assert_allclose(g.numpy(), 2 * X0)
    _, d = F.jvp(lambda s: s * t(X0), t(np.array(2.0)))
    np.testing.assert_allclose(d.numpy(), X0)
    with pytest.raises(RuntimeError, match="vjp: v can be left out only"):
        F.vjp(lambda x: x * 2, t(X0))
    with pytest.raises(RuntimeError, match="hvp: v can be left out only"):
        F.hvp(lambda x: x.sum(), t(X0))
    with pytest.raises(RuntimeError, match=r"vjp: v must have the shape of the output, \(4,\)"):
        F.vjp(lambda x: x * 2, t(X0), mg.ones(3))
    with pytest.raises(RuntimeError, match=r"jvp: v must hold one tensor per input \(2\)"):
        F.jvp(lambda x, y: x * y, (t(X0), t(X0)), (t(X0),))


def test_an_unused_input_gets_zeros_or_with_strict_an_error():
    def fn(x, y):
        return (x * x).exp()
    _, (gx, gy) = F.vjp(fn, (t(X0), t(Y0)), mg.ones(4, dtype=mg.float64))
    assert gy.shape == (2, 3) and not gy.numpy().any()
    jac = F.jacobian(fn, (t(X0), t(Y0)))
    assert jac[1].shape == (4, 2, 3) and not jac[1].numpy().any()
    with pytest.raises(RuntimeError, match="does not depend on input 1.*strict=False"):
        F.vjp(fn, (t(X0), t(Y0)), mg.ones(4, dtype=mg.float64), strict=True)
    with pytest.raises(RuntimeError, match="jacobian: output 0 does not depend on input 1"):
        F.jacobian(fn, (t(X0), t(Y0)), strict=True)
    with pytest.raises(RuntimeError, match="jvp: the outputs do not depend on input 1"):
        F.jvp(fn, (t(X0), t(Y0)), (t(X0), t(Y0)), strict=True)
    with pytest.raises(RuntimeError, match="hessian: the Jacobian with respect to input 0"):
        F.hessian(lambda x: x.sum(), t(X0), strict=True)
    with pytest.raises(RuntimeError, match="hvp: the gradient with respect to input 0"):
        F.hvp(lambda x: x.sum(), t(X0), t(X0), strict=True)
    with pytest.raises(RuntimeError, match="output 0 of func does not require grad"):
        F.vjp(lambda x: mg.ones(2), mg.ones(2), mg.ones(2), strict=True)
    assert not F.hessian(lambda x: x.sum(), t(X0)).numpy().any()


def test_bad_arguments_name_the_function():
    with pytest.raises(TypeError, match="vjp: inputs must be a Tensor or a tuple of Tensors"):
        F.vjp(lambda x: x, [1.0])
    with pytest.raises(TypeError, match="jacobian: the outputs of func must be a Tensor"):
        F.jacobian(lambda x: 3.0, mg.ones(2))
    with pytest.raises(RuntimeError, match="hessian: func must return a single Tensor"):
        F.hessian(lambda x: (x.sum(), x.sum()), mg.ones(2))
    with pytest.raises(RuntimeError, match=r"vhp: func must return a tensor of one element"):
        F.vhp(lambda x: x * 2, mg.ones(2), mg.ones(2))
    with pytest.raises(NotImplementedError, match="jacobian: vectorize=True needs vmap"):
        F.jacobian(lambda x: x, mg.ones(2), vectorize=True)
    with pytest.raises(ValueError, match="strategy must be 'reverse-mode'"):
        F.jacobian(lambda x: x, mg.ones(2), strategy="forward-mode")


def test_inputs_are_left_alone_without_create_graph():
    x = t(X0).requires_grad_(True)
    out, g = F.vjp(lambda a: (a * a).sum(), x)
    assert not out.requires_grad and not g.requires_grad and x.grad is None
