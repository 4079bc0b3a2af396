"""Early stop: with it the recomputation stops once every dropped value is rebuilt; without
it the whole function runs again. ``set_checkpoint_early_stop`` wins over the keyword."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.checkpoint import checkpoint, set_checkpoint_early_stop


def leaf(*shape, seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


class Counted:
    """``exp(tanh(x))`` followed by a counted tail that saves nothing: the tail runs in a
    recomputation only when early stop is off."""

    def __init__(self):
        self.tail_runs = 0

    def __call__(self, x):
        y = x.tanh().exp()
        self.tail_runs += 1
        return y.clone()


def tail_runs_after_backward(make_call):
    fn = Counted()
    x = leaf(5)
    out = make_call(fn, x)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (np.exp(np.tanh(x.numpy()))
                                                * (1 - np.tanh(x.numpy()) ** 2)), rtol=1e-12)
    return fn.tail_runs


@pytest.mark.parametrize("early_stop, runs", [(None, 1), (True, 1), (False, 2)])
def test_keyword_decides_outside_the_context(early_stop, runs):
    got = tail_runs_after_backward(lambda f, x: checkpoint(f, x, early_stop=early_stop))
    assert got == runs


@pytest.mark.parametrize("setting, keyword, runs", [
    (False, None, 2), (True, None, 1), (False, True, 2), (True, False, 1),
])
def test_the_context_wins_over_the_keyword(setting, keyword, runs):
    def call(f, x):
        with set_checkpoint_early_stop(setting):
            return checkpoint(f, x, early_stop=keyword)  # backward runs outside the context

    assert tail_runs_after_backward(call) == runs


def test_the_innermost_context_applies():
    def call(f, x):
        with set_checkpoint_early_stop(False), set_checkpoint_early_stop(True):
            return checkpoint(f, x, early_stop=False)

    assert tail_runs_after_backward(call) == 1


def test_a_region_that_saves_nothing_is_never_recomputed():
    fn = Counted()
    x = leaf(4)
    out = checkpoint(lambda t: fn(t * 1.0).sum() * 0 + (t * 2.0).sum(), x, early_stop=False)
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(4, 2.0))


def test_extra_saves_in_the_recomputation():
    state = {"calls": 0}

    def grows(t):
        state["calls"] += 1
        y = t.tanh()
        if state["calls"] > 1:
            y = y.exp()  # only in the recomputation, after every dropped value is rebuilt
        return y

    x = leaf(3)
    checkpoint(grows, x).sum().backward()  # early stop: the extra op never runs
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(x.numpy()) ** 2, rtol=1e-12)
    state["calls"] = 0
    out = checkpoint(grows, leaf(3), early_stop=False)
    with pytest.raises(mg.CheckpointError, match="trying to save more tensors during "
                                                 "recomputation"):
        out.sum().backward()


def test_bad_settings_are_refused():
    with pytest.raises(TypeError, match="set_checkpoint_early_stop: expected a bool, got str"):
        with set_checkpoint_early_stop("no"):
            pass
    with pytest.raises(TypeError, match="early_stop must be a bool or None, got int"):
        checkpoint(lambda t: t.tanh(), leaf(2), early_stop=1)
