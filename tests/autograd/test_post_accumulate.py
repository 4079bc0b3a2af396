"""Post-accumulate-grad hooks and queue_callback (NOTE [ Engine ] point 7): when they fire,
how often, and what ``.grad`` holds then, including the in-place sink path and reentrant
checkpoint regions."""

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn
from memgrad.autograd.engine import queue_callback
from memgrad.checkpoint import checkpoint


def _record(t, log):
    return t.register_post_accumulate_grad_hook(lambda p: log.append(p.grad.numpy().copy()))


def test_fires_once_after_all_uses_are_summed():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    log = []
    _record(w, log)
    (w * 3 + w * w).sum().backward()
    assert len(log) == 1
    np.testing.assert_array_equal(log[0], 3 + 2 * np.array([1.0, 2.0]))


def test_sees_accumulated_grad_and_remove():
    w = mg.tensor([1.0], requires_grad=True)
    log = []
    h = _record(w, log)
    (w * 2).sum().backward()
    (w * 5).sum().backward()
    h.remove()
    (w * 7).sum().backward()
    assert [a.tolist() for a in log] == [[2.0], [7.0]]
    assert w.grad.tolist() == [14.0]


def test_fires_for_a_gradient_added_in_place_by_a_sink():
    # a Linear whose weight .grad exists gets it added in row blocks (no buffer reaches the
    # accumulator); the hook must still fire once, after the addition
    lin = nn.Linear(8, 4)
    x = mg.randn(5, 8)
    lin.zero_grad(set_to_none=False)
    log = []
    _record(lin.weight, log)
    lin(x).sum().backward()
    assert len(log) == 1
    expected = np.ones((5, 4), dtype=np.float32).T @ x.numpy()
    np.testing.assert_allclose(log[0], expected, rtol=1e-6)


def test_not_fired_by_autograd_grad_or_for_unreached_leaves():
    w = mg.tensor([1.0], requires_grad=True)
    v = mg.tensor([1.0], requires_grad=True)
    log = []
    _record(w, log)
    _record(v, log)
    mg.autograd.grad((w * 2).sum(), [w])
    assert log == []
    (w * 2).sum().backward(inputs=[w])
    assert len(log) == 1


def test_only_leaves_that_require_grad():
    with pytest.raises(RuntimeError, match="register_post_accumulate_grad_hook"):
        mg.ones(2).register_post_accumulate_grad_hook(lambda t: None)
    w = mg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_regions(reentrant):
    # a weight used in two checkpoint regions: reentrant regions accumulate once each (in
    # their inner backward), non-reentrant ones once in all
    w = mg.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    x = mg.tensor([[1.0, 2.0]], requires_grad=True)
    counts = []
    w.register_post_accumulate_grad_hook(lambda p: counts.append(p.grad.numpy().copy()))

    def f(h):
        return (h @ w).tanh()

    out = checkpoint(f, checkpoint(f, x, use_reentrant=reentrant), use_reentrant=reentrant)
    out.sum().backward()
    assert len(counts) == (2 if reentrant else 1)
    reference = mg.tensor(w.numpy(), requires_grad=True)
    ((x.detach() @ reference).tanh() @ reference).tanh().sum().backward()
    np.testing.assert_allclose(counts[-1], reference.grad.numpy(), rtol=1e-6)


def test_queue_callback_runs_after_the_outermost_backward():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    events = []

    def hook(p):
        events.append("hook")
        queue_callback(lambda: events.append(("callback", p.grad.tolist())))

    w.register_post_accumulate_grad_hook(hook)

    def f(h):
        return h * w

    # the hook fires inside the reentrant region's inner backward; the callbacks wait for
    # the outer one
    x = mg.tensor([3.0, 4.0], requires_grad=True)
    checkpoint(f, x, use_reentrant=True).sum().backward()
    assert events == ["hook", ("callback", [3.0, 4.0])]


def test_queue_callback_outside_backward_and_after_failure():
    with pytest.raises(RuntimeError, match="queue_callback: no backward is running"):
        queue_callback(lambda: None)
    w = mg.tensor([1.0], requires_grad=True)
    ran = []

    def queue_then_fail(g):
        queue_callback(lambda: ran.append(1))
        raise ValueError("boom")

    y = w * 2
    y.register_hook(queue_then_fail)  # runs before w's accumulator
    with pytest.raises(ValueError, match="boom"):
        y.sum().backward()
    assert ran == []  # dropped with the failed backward
    (w * 2).sum().backward()  # and nothing is left over for the next one
    assert ran == []
