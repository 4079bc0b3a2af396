"""gradcheck and gradgradcheck: pass on correct ops, fail (with a useful message) on wrong ones."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd import Function, gradcheck, gradgradcheck
from memgrad.errors import GradcheckError


def _t(shape, seed=0, requires_grad=True, dtype=np.float64):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return mg.tensor(a, requires_grad=requires_grad)


class Scaled(Function):
    """y = x * w with the gradient of w scaled by ``factor`` and, if ``bump`` is set, one
    element of it moved: a Function that is wrong in a known place."""

    factor = 1.0
    bump: tuple | None = None

    @classmethod
    def make(cls, factor=1.0, bump=None):
        return type("Scaled", (cls,), {"factor": factor, "bump": bump})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        cls = ctx._forward_cls
        gw = (g * x * cls.factor).clone()
        if cls.bump is not None:
            gw.numpy()[cls.bump] += 0.5
        return g * w, gw


class CubeDetached(Function):
    """x**3 whose backward detaches x: right first derivative, zero second derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x.detach() ** 2


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (mg.tanh, [(3, 4)]),
        (mg.exp, [(5,)]),
        (mg.matmul, [(2, 3), (3, 4)]),
        (lambda a, b: a * b + a, [(2, 3), (3,)]),  # broadcasting
        (lambda a, b: (a - b).sum(dim=0), [(4, 1), (1, 3)]),
        (lambda a: (a.sigmoid(), a.tanh().sum()), [(2, 2)]),  # a tuple of outputs
        (lambda a, b: (a @ b).tanh().mean(), [(3,), (3, 2)]),
        (lambda a: a, [(2, 2)]),  # outputs that share memory with the perturbed input
        (lambda a: a.T[0], [(2, 3)]),
    ],
)
def test_gradcheck_passes_on_correct_ops(fn, shapes):
    inputs = [_t(s, seed=i) for i, s in enumerate(shapes)]
    assert gradcheck(fn, inputs)


def test_gradcheck_leaves_the_inputs_untouched():
    x = _t((2, 3))
    before = x.numpy().copy()
    assert gradcheck(mg.tanh, (x,))
    np.testing.assert_array_equal(x.numpy(), before)
    assert x._version == 0 and x.grad is None


def test_gradcheck_accepts_a_single_tensor_and_constant_arguments():
    x = _t((4,))
    idx = mg.tensor([3, 0, 0])
    assert gradcheck(mg.exp, x)
    assert gradcheck(lambda a, i, k: a[i] * k, (x, idx, 2.5))


def test_wrong_function_fails_naming_input_and_element():
    x, w = _t((2, 3), seed=1), _t((2, 3), seed=2)
    bad = Scaled.make(bump=(1, 2))
    with pytest.raises(GradcheckError) as info:
        gradcheck(bad.apply, (x, w))
    msg = str(info.value)
    assert "output 0 with respect to input 1" in msg
    assert "element (1, 2) of input 1" in msg
    # the worst entry is a row of the Jacobian whose true value is 0 (y[i] does not depend on
    # w[1, 2] unless i == (1, 2)): numerical 0.0, analytical 0.5
    assert "numerical 0.0 vs analytical 0.5" in msg
    assert "tolerance 1e-05" in msg
    assert isinstance(info.value, RuntimeError)


def test_input_index_counts_all_arguments():
    x, w = _t((3,), seed=1), _t((3,), seed=2)
    bad = Scaled.make(factor=2.0)
    with pytest.raises(GradcheckError, match="with respect to input 2"):
        gradcheck(lambda k, a, b: bad.apply(a * k, b), (1.5, x, w))


def test_raise_exception_false_returns_false():
    x, w = _t((2, 3), seed=1), _t((2, 3), seed=2)
    assert gradcheck(Scaled.make(bump=(0, 0)).apply, (x, w), raise_exception=False) is False
    assert gradcheck(Scaled.make().apply, (x, w), raise_exception=False) is True


def test_tolerance_is_atol_plus_rtol_times_numerical():
    # the gradient of w is 5e-4 too large, relatively: inside rtol=1e-3, outside rtol=1e-4
    x = mg.tensor(np.array([1.0, 2.0, 4.0]), requires_grad=True)
    w = _t((3,), seed=3)
    off = Scaled.make(factor=1 + 5e-4)
    assert gradcheck(off.apply, (x, w), atol=0.0, rtol=1e-3)
    assert not gradcheck(off.apply, (x, w), atol=0.0, rtol=1e-4, raise_exception=False)


def test_float32_inputs_are_checked_in_float64():
    x = _t((3, 2), dtype=np.float32)
    w = _t((2, 2), seed=1, dtype=np.float32)
    seen = []

    def fn(a, b):
        seen.append((a.dtype, b.dtype))
        return (a @ b).tanh()

    assert gradcheck(fn, (x, w))
    assert set(seen) == {(mg.float64, mg.float64)}
    assert x.dtype == mg.float32 and x.grad is None


def test_non_floating_output_is_ignored():
    x = _t((4,))
    assert gradcheck(lambda a: (a * 2, a > 0), (x,))


def test_nothing_to_check_is_a_clear_error():
    with pytest.raises(ValueError, match="no input requires grad"):
        gradcheck(mg.exp, (_t((2,), requires_grad=False),))
    with pytest.raises(ValueError, match="no floating-point Tensor"):
        gradcheck(lambda a: a.argmax(), (_t((2,)),))


def test_integer_input_that_requires_grad_is_a_clear_error():
    idx = mg.tensor([1, 2])
    idx._requires_grad = True  # the setter forbids it; gradcheck must not assume that
    with pytest.raises(TypeError, match=r"gradcheck: input 1 requires grad but has dtype int64"):
        gradcheck(lambda a, i: a * i, (_t((2,)), idx))


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (mg.tanh, [(3,)]),
        (lambda a: a.exp() * a, [(2, 2)]),
        (lambda a, b: (a @ b).tanh(), [(2, 3), (3, 2)]),
        (lambda a, b: (a * b).exp().sum(dim=1), [(2, 3), (3,)]),
        (lambda a, b: a * b, [(4,), (4,)]),  # bilinear: the second derivative mixes inputs
    ],
)
def test_gradgradcheck_passes_on_compositions(fn, shapes):
    inputs = [_t(s, seed=i) for i, s in enumerate(shapes)]
    assert gradgradcheck(fn, inputs)


def test_gradgradcheck_fails_for_a_wrong_double_backward():
    x = _t((3,))
    assert gradcheck(CubeDetached.apply, (x,))  # first derivatives are right
    with pytest.raises(GradcheckError) as info:
        gradgradcheck(CubeDetached.apply, (x,))
    msg = str(info.value)
    assert msg.startswith("gradgradcheck:")
    assert "output 0 (the gradient of input 0) with respect to input 0" in msg
    # d/dx (g 3 x^2) = 6 g x, but the detached backward gives 0
    assert "analytical 0.0" in msg
    assert gradgradcheck(CubeDetached.apply, (x,), raise_exception=False) is False


def test_gradgradcheck_with_given_grad_outputs_and_no_global_rng_use():
    x = _t((3,))
    state = mg.get_rng_state()
    g = mg.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    assert gradgradcheck(lambda a: a.tanh() * a, (x,), grad_outputs=(g,))
    assert gradgradcheck(lambda a: a.tanh() * a, (x,))
    assert mg.get_rng_state() == state
    with pytest.raises(ValueError, match="got 2 grad_outputs for 1"):
        gradgradcheck(mg.tanh, (x,), grad_outputs=(g, g))
