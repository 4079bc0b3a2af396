"""Anomaly mode: errors and NaNs in backward name the forward call that made the node."""

import inspect

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd import Function, detect_anomaly, set_detect_anomaly
from memgrad.autograd.anomaly import is_anomaly_enabled

# the NaNs these tests make on purpose come from 0/0 in NumPy
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@pytest.fixture(autouse=True)
def _anomaly_off_after_each_test():
    yield
    assert not is_anomaly_enabled(), "a test left anomaly mode on"
    set_detect_anomaly(False)


def _line() -> int:
    """The line number of the caller's next line."""
    return inspect.currentframe().f_back.f_lineno + 1


class Boom(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise ValueError("boom in backward")


class NanGrad(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, g):
        return g * float("nan")


def _sqrt_at_zero():
    # d/dx sqrt(x) at 0 is 1 / (2 * 0); times a zero upstream gradient that is 0/0 = NaN
    x = mg.tensor([0.0, 4.0], requires_grad=True)
    return x


def test_nan_in_backward_names_the_node_and_the_forward_line():
    x = _sqrt_at_zero()
    with detect_anomaly():
        line = _line()
        y = x.sqrt()
        with pytest.raises(RuntimeError) as info:
            (y * 0).sum().backward()
    msg = str(info.value)
    assert "SqrtBackward" in msg and "nan" in msg
    assert f'"{__file__}", line {line}' in msg
    assert "y = x.sqrt()" in msg


def test_without_anomaly_mode_the_nan_passes_silently():
    x = _sqrt_at_zero()
    (x.sqrt() * 0).sum().backward()
    # the reference: 0 * 1 / (2 * sqrt(0)) is NaN in IEEE arithmetic, 0 * 1/4 is 0
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = 0.0 / (2 * np.sqrt(np.array([0.0, 4.0])))
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    assert np.isnan(x.grad.numpy()[0])


def test_nan_from_a_custom_function_names_it():
    x = mg.ones(2, requires_grad=True)
    with detect_anomaly():
        line = _line()
        y = NanGrad.apply(x)
        with pytest.raises(RuntimeError, match="NanGradBackward") as info:
            y.sum().backward()
    assert f'"{__file__}", line {line}' in str(info.value)


def test_error_in_function_backward_gets_a_note_with_the_forward_call_site():
    x = mg.ones(3, requires_grad=True)
    with detect_anomaly():
        line = _line()
        y = Boom.apply(x)
        with pytest.raises(ValueError, match="boom in backward") as info:
            y.sum().backward()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "BoomBackward" in notes
    assert f'"{__file__}", line {line}' in notes
    assert "y = Boom.apply(x)" in notes


def test_without_anomaly_mode_errors_get_no_note():
    x = mg.ones(3, requires_grad=True)
    y = Boom.apply(x)
    with pytest.raises(ValueError, match="boom in backward") as info:
        y.sum().backward()
    assert not getattr(info.value, "__notes__", [])


def test_node_made_before_anomaly_mode_says_so():
    x = _sqrt_at_zero()
    y = x.sqrt() * 0
    with detect_anomaly(), pytest.raises(RuntimeError, match="created before anomaly mode"):
        y.sum().backward()


def test_set_detect_anomaly_false_restores_and_nests():
    x = _sqrt_at_zero()
    with detect_anomaly():
        assert is_anomaly_enabled()
        with set_detect_anomaly(False):
            assert not is_anomaly_enabled()
            (x.sqrt() * 0).sum().backward()  # no check: the NaN goes through
        assert is_anomaly_enabled()
    assert not is_anomaly_enabled()
    assert np.isnan(x.grad.numpy()[0])

    set_detect_anomaly(True)  # a plain call switches at once
    assert is_anomaly_enabled()
    set_detect_anomaly(False)
    assert not is_anomaly_enabled()


def test_state_is_restored_after_an_exception():
    with pytest.raises(KeyError), detect_anomaly():
        raise KeyError("x")
    assert not is_anomaly_enabled()


def test_detect_anomaly_as_a_decorator():
    @detect_anomaly()
    def run():
        x = _sqrt_at_zero()
        assert is_anomaly_enabled()
        (x.sqrt() * 0).sum().backward()

    assert not is_anomaly_enabled()  # decorating does not switch the mode
    with pytest.raises(RuntimeError, match="SqrtBackward"):
        run()
    assert not is_anomaly_enabled()

    @set_detect_anomaly(False)
    def quiet():
        return is_anomaly_enabled()

    with detect_anomaly():
        assert quiet() is False
        assert is_anomaly_enabled()


def _mlp_grads(anomaly: bool):
    rng = np.random.default_rng(0)
    x = mg.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    w = mg.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    with set_detect_anomaly(anomaly):
        loss = ((x @ w).tanh() * Boom.apply(x).sum() * 0 + (x @ w).exp()).sum()
        loss.backward(inputs=[w])  # Boom's backward is not on the way to w
        (x * w.sum()).sum().backward()
    return x.grad.numpy().copy(), w.grad.numpy().copy()


def test_backward_under_anomaly_mode_reaches_the_leaves_and_gives_the_same_gradients():
    got = _mlp_grads(True)
    want = _mlp_grads(False)
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g, e)


def test_anomaly_mode_accumulates_into_an_existing_grad():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    w.grad = mg.tensor([10.0, 10.0])
    with detect_anomaly():
        (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [12.0, 14.0])
