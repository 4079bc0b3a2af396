"""Custom Functions: values and gradients against NumPy formulas and finite differences."""

import gc
import weakref

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd import Function, FunctionCtx, gradcheck, gradgradcheck
from memgrad.autograd.graph import saved_tensors_hooks


class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


class Mul(Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x


def _rng():
    return np.random.default_rng(1234)


def test_exp_matches_numpy_values_and_gradients():
    a = _rng().standard_normal((3, 4))
    w = _rng().standard_normal((3, 4))
    x = mg.tensor(a, requires_grad=True)
    y = Exp.apply(x)
    np.testing.assert_allclose(y.numpy(), np.exp(a))
    assert y.grad_fn.name() == "ExpBackward"
    assert isinstance(y.grad_fn, FunctionCtx)
    (y * mg.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), w * np.exp(a), rtol=1e-12)


def test_mul_matches_numpy_and_feeds_the_graph_on_both_sides():
    a, b = _rng().standard_normal((2, 5))
    x = mg.tensor(a, requires_grad=True)
    y = mg.tensor(b, requires_grad=True)
    z = Mul.apply(x.tanh(), y)  # an input with a grad_fn and a leaf
    np.testing.assert_allclose(z.numpy(), np.tanh(a) * b)
    assert z.grad_fn.next_functions[0][0].name() == "TanhBackward"
    assert z.grad_fn.next_functions[1][0].name() == "AccumulateGrad"
    (z * z).sum().backward()
    # d/dx sum((tanh(x) y)^2) = 2 tanh(x) y^2 (1 - tanh(x)^2); d/dy = 2 tanh(x)^2 y
    t = np.tanh(a)
    np.testing.assert_allclose(x.grad.numpy(), 2 * t * b * b * (1 - t * t), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), 2 * t * t * b, rtol=1e-12)


def test_broadcast_gradients_are_summed_back_to_the_input_shape():
    a = _rng().standard_normal((4, 3))
    b = np.array([0.5, -1.0, 2.0])
    x = mg.tensor(a, requires_grad=True)
    y = mg.tensor(b, requires_grad=True)
    Mul.apply(x, y).sum().backward()  # backward returns g * x of shape (4, 3) for y
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(b, (4, 3)))
    np.testing.assert_allclose(y.grad.numpy(), a.sum(axis=0), rtol=1e-12)
    assert gradcheck(Mul.apply, (x, y))


def test_forward_runs_without_recording_and_outputs_are_fresh():
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen["grad_enabled"] = mg.is_grad_enabled()
            y = x * 2
            seen["inner_grad_fn"] = y.grad_fn
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = mg.ones(3, requires_grad=True)
    y = Probe.apply(x)
    assert seen == {"grad_enabled": False, "inner_grad_fn": None}
    assert y.grad_fn.name() == "ProbeBackward"
    assert y.requires_grad and not y.is_leaf
    assert mg.is_grad_enabled()


def test_no_graph_under_no_grad_or_without_inputs_requiring_grad():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    with mg.no_grad():
        y = Exp.apply(x)
    z = Exp.apply(mg.tensor([1.0, 2.0]))
    for t in (y, z):
        assert t.grad_fn is None and not t.requires_grad
        np.testing.assert_allclose(t.numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_save_for_backward_of_an_input_and_an_output():
    class ExpTimes(Function):
        """out = exp(x) * s; saves x (an input) and out (an output)."""

        @staticmethod
        def forward(ctx, x, s):
            out = x.exp() * s
            ctx.save_for_backward(x, out)
            return out

        @staticmethod
        def backward(ctx, g):
            x, out = ctx.saved_tensors
            return g * out, None

    a = np.array([-1.0, 0.5, 2.0])
    x = mg.tensor(a, requires_grad=True)
    y = ExpTimes.apply(x, 3.0)
    saved_x, saved_out = y.grad_fn.saved_tensors
    assert saved_x is x
    np.testing.assert_array_equal(saved_out.numpy(), y.numpy())
    assert saved_out.grad_fn is y.grad_fn and saved_out.output_nr == 0
    # the saved output is differentiable through the node: second derivative 3 exp(x)
    (g,) = mg.autograd.grad(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * np.exp(a), rtol=1e-12)
    (gg,) = mg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 3 * np.exp(a), rtol=1e-12)


def test_saved_output_makes_no_reference_cycle():
    x = mg.ones(4, requires_grad=True)
    gc.disable()
    try:
        y = Exp.apply(x)
        node = y.grad_fn
        ref = weakref.ref(y)
        del y
        assert ref() is None  # freed by refcount alone
        np.testing.assert_allclose(node.saved_tensors[0].numpy(), np.full(4, np.e), rtol=1e-6)
    finally:
        gc.enable()


def test_saved_second_output_keeps_its_output_nr_for_double_backward():
    class ExpPair(Function):
        """(exp(x), exp(-x)), both outputs saved."""

        @staticmethod
        def forward(ctx, x):
            a = x.exp()
            b = (-x).exp()
            ctx.save_for_backward(a, b)
            return a, b

        @staticmethod
        def backward(ctx, ga, gb):
            a, b = ctx.saved_tensors
            return ga * a - gb * b

    v = np.array([0.3, -0.7])
    w1, w2 = np.array([1.5, -2.0]), np.array([0.25, 3.0])
    x = mg.tensor(v, requires_grad=True)
    a, b = ExpPair.apply(x)
    assert (a.output_nr, b.output_nr) == (0, 1)
    assert a.grad_fn.num_outputs == 2
    assert [t.output_nr for t in a.grad_fn.saved_tensors] == [0, 1]
    loss = (a * mg.tensor(w1) + b * mg.tensor(w2)).sum()
    (g,) = mg.autograd.grad(loss, x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), w1 * np.exp(v) - w2 * np.exp(-v), rtol=1e-12)
    (gg,) = mg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), w1 * np.exp(v) + w2 * np.exp(-v), rtol=1e-12)


def test_saved_tensors_go_through_saved_tensors_hooks():
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t.numpy().copy()

    def unpack(a):
        return mg.tensor(a)

    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = mg.tensor([3.0, 4.0], requires_grad=True)
    with saved_tensors_hooks(pack, unpack):
        z = Mul.apply(x, y)
    assert packed == [(2,), (2,)]
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 2.0])


def test_needs_input_grad():
    record = []

    class ScaleAdd(Function):
        @staticmethod
        def forward(ctx, x, y, k):
            record.append(ctx.needs_input_grad)
            return x * k + y

        @staticmethod
        def backward(ctx, g):
            need_x, need_y, _ = ctx.needs_input_grad
            record.append((need_x, need_y))
            return (g * 2.0 if need_x else None), (g if need_y else None), None

    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = mg.tensor([5.0, 6.0])
    out = ScaleAdd.apply(x, y, 2.0)
    np.testing.assert_array_equal(out.numpy(), [7.0, 10.0])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    with mg.no_grad():
        ScaleAdd.apply(x, y, 2.0)
    assert record == [(True, False, False), (True, False), (False, False, False)]


def test_mark_non_differentiable_and_materialized_grads():
    received = []

    class WithMask(Function):
        @staticmethod
        def forward(ctx, x, materialize):
            ctx.set_materialize_grads(materialize)
            mask = (x > 0).double()
            ctx.mark_non_differentiable(mask)
            return x * 2, mask

        @staticmethod
        def backward(ctx, g, g_mask):
            received.append(g_mask)
            return g * 2, None

    a = np.array([-1.0, 0.5, 2.0])
    for materialize in (True, False):
        x = mg.tensor(a, requires_grad=True)
        y, mask = WithMask.apply(x, materialize)
        np.testing.assert_array_equal(mask.numpy(), a > 0)
        assert not mask.requires_grad and mask.grad_fn is None
        assert y.grad_fn.num_outputs == 2
        (y * mask).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), 2 * (a > 0))
    assert received[1] is None
    np.testing.assert_array_equal(received[0].numpy(), np.zeros(3))


def test_integer_outputs_are_non_differentiable():
    class Argmax(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1, x.argmax()

        @staticmethod
        def backward(ctx, g, g_idx):
            return g

    x = mg.tensor([1.0, 3.0, 2.0], requires_grad=True)
    y, idx = Argmax.apply(x)
    assert idx.item() == 1 and not idx.requires_grad
    assert y.requires_grad


def test_non_tensor_args_and_outputs_pass_through():
    class Power(Function):
        @staticmethod
        def forward(ctx, x, p, label):
            ctx.x = x  # any attribute goes on ctx
            ctx.p = p
            return x**p, label.upper()

        @staticmethod
        def backward(ctx, g, g_label):
            assert g_label is None  # a non-Tensor output gets None, never zeros
            return g * ctx.p * ctx.x ** (ctx.p - 1), None, None

    a = np.array([1.5, 2.0, 3.0])
    x = mg.tensor(a, requires_grad=True)
    y, label = Power.apply(x, 3, "cube")
    assert label == "CUBE"
    assert y.grad_fn.num_outputs == 1
    np.testing.assert_allclose(y.numpy(), a**3)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * a**2)


class Identity(Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 1


def test_output_that_is_an_input_is_wrapped_not_reparented():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = Identity.apply(x)
    assert y is not x
    assert np.shares_memory(y.numpy(), x.numpy())
    assert x.is_leaf and x.grad_fn is None
    assert y.grad_fn.name() == "IdentityBackward"

    h = x * 3  # a non-leaf input keeps its own grad_fn
    k = Identity.apply(h)
    assert h.grad_fn.name() == "MulBackward" and k.grad_fn.name() == "IdentityBackward"
    (y * mg.tensor([5.0, 7.0]) + k).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 10.0])


def test_an_output_that_is_a_view_refuses_an_inplace_change():
    # as PyTorch: written in place, the view would get its base's graph and the Function's
    # backward would never run for it (a silently wrong gradient); a non-view output, or a
    # clone of the view, may be changed
    class Half(Function):
        @staticmethod
        def forward(ctx, x):
            return x[:1], (x * 2)[1:]

        @staticmethod
        def backward(ctx, g0, g1):
            return mg.cat([g0 * 10, g1 * 20])

    x = mg.tensor([1.0, 2.0], requires_grad=True)
    for out in (*Half.apply(x), Identity.apply(x * 1)):
        with pytest.raises(RuntimeError, match=r"output \d of \w+Backward is a view and is "
                                               "being modified in place.*out.clone"):
            out.mul_(3.0)
    a, b = Half.apply(x)
    c = a.clone()
    c.mul_(3.0)
    (c.sum() + b.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [30.0, 20.0])


def test_same_output_returned_twice_gets_two_slots():
    class Twice(Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            return y, y

        @staticmethod
        def backward(ctx, g1, g2):
            return 2 * g1 + 2 * g2

    x = mg.tensor([1.0, -1.0], requires_grad=True)
    a, b = Twice.apply(x)
    assert (a.output_nr, b.output_nr) == (0, 1)
    (a * mg.tensor([1.0, 2.0]) + b * mg.tensor([10.0, 20.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [22.0, 44.0])


def test_double_backward_through_a_function_written_with_memgrad_ops():
    a = np.array([-2.0, 0.5, 1.5])
    x = mg.tensor(a, requires_grad=True)
    y = Cube.apply(x)
    (g,) = mg.autograd.grad(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * a**2)
    assert g.requires_grad
    (gg,) = mg.autograd.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(gg.numpy(), 6 * a)
    (ggg,) = mg.autograd.grad(gg.sum(), x)
    np.testing.assert_allclose(ggg.numpy(), np.full(3, 6.0))


def test_backward_runs_without_grad_unless_create_graph():
    modes = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            modes.append(mg.is_grad_enabled())
            return g

    x = mg.ones(2, requires_grad=True)
    Probe.apply(x).sum().backward()
    Probe.apply(x).sum().backward(create_graph=True)
    assert modes == [False, True]


def test_wrong_gradient_count_names_the_function():
    class TwoGrads(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, g

    x = mg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"TwoGradsBackward.*returned 2 gradients.*took 1"):
        TwoGrads.apply(x).sum().backward()


def test_extra_trailing_none_gradients_are_allowed():
    class ExtraNone(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    x = mg.ones(3, requires_grad=True)
    ExtraNone.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2.0))


def test_backward_may_return_a_list():
    class ListGrads(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return [g * 2, g * 3]

    x, y = mg.ones(2, requires_grad=True), mg.ones(2, requires_grad=True)
    ListGrads.apply(x, y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(y.grad.numpy(), [3.0, 3.0])


def test_gradient_for_a_non_tensor_argument_is_an_error():
    class Scale(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * 2, g

    x = mg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"ScaleBackward.*position 1.*not a Tensor"):
        Scale.apply(x, 2.0).sum().backward()


def test_wrong_gradient_shape_names_the_function():
    class BadShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.sum()

    x = mg.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"BadShapeBackward.*got shape \(\).*\(2, 3\)"):
        BadShape.apply(x).sum().backward()


def test_saved_tensors_after_release_raise_with_retain_graph_hint():
    a = np.array([0.0, 1.0])
    x = mg.tensor(a, requires_grad=True)
    y = Exp.apply(x)
    y.sum().backward(retain_graph=True)
    y.sum().backward()  # retained once: a second pass works and accumulates
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(a), rtol=1e-6)
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        _ = y.grad_fn.saved_tensors


def test_function_that_saved_nothing_can_backward_twice():
    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = mg.ones(2, requires_grad=True)
    y = Double.apply(x).sum()
    y.backward()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])


def test_inplace_change_to_a_saved_input_raises():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    z = Mul.apply(h, mg.tensor([3.0, 4.0]))
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_inplace_change_to_a_saved_output_raises():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = Exp.apply(x)
    with mg.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*ExpBackward"):
        y.sum().backward()


def test_view_of_a_rebased_base_reaches_the_function_with_the_new_graph():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    v = h[0:1]
    h.mul_(3)  # h gets a new grad_fn; v, taken before, follows it
    Exp.apply(v).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 * np.exp(3.0), 0.0], rtol=1e-6)


def test_save_for_backward_rejects_non_tensors():
    class SavesInt(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x * 1

    with pytest.raises(TypeError, match=r"SavesInt.forward: save_for_backward.*ctx.value"):
        SavesInt.apply(mg.ones(2, requires_grad=True))


def test_missing_backward_and_base_apply_are_clear_errors():
    class NoBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

    y = NoBackward.apply(mg.ones(2, requires_grad=True))
    with pytest.raises(NotImplementedError, match="NoBackward must define backward"):
        y.sum().backward()
    with pytest.raises(TypeError, match="subclass Function"):
        Function.apply(mg.ones(2))


def test_gradcheck_and_gradgradcheck_on_custom_functions():
    rng = _rng()
    x = mg.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    y = mg.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    assert gradcheck(Mul.apply, (x, y))
    assert gradcheck(Exp.apply, (x,))
    assert gradgradcheck(Cube.apply, (x,))
    assert gradgradcheck(Mul.apply, (x, y))
