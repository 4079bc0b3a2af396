"""The dispatcher's per-op path (ops/registry.py ``apply`` and ``_record``) and the engine's
walk, against values worked out by hand: the save rule by call shape, the ufunc a record
names, and the dependency count of roots reachable from other roots."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.interpreters import Interpreter, push, watching_made
from memgrad.ops.registry import REGISTRY

RELEASED = "backward through the graph a second time"


def test_a_scalar_operand_is_kept_as_a_value_so_a_second_backward_works():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 0.5).sum()
    y.backward()
    y.backward()  # nothing was saved: PyTorch allows this too
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])


def test_a_tensor_operand_is_saved_and_freed_after_backward():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * mg.tensor([3.0, 4.0])).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    with pytest.raises(RuntimeError, match=RELEASED):
        y.backward()


def test_the_save_rule_follows_the_call_shape():
    mul = REGISTRY["mul"]
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    t = mg.tensor([3.0, 4.0])
    # the same record, called with a tensor, a scalar and a grad-requiring second input
    for y, keep, needs in (((x * t), (1,), (True, False)), ((x * 2.0), (), (True, False)),
                           ((t * x), (0,), (False, True)), ((x * x), (0, 1), (True, True))):
        node = y.grad_fn
        assert node.prim is mul
        assert node._keep == keep and node._needs == needs
    y = x * 2.0
    assert y.grad_fn._input_meta[1] == 2.0  # the constant reaches the VJP as a value


def test_a_ufunc_record_calls_its_ufunc_and_a_new_forward_replaces_it():
    mul = REGISTRY["mul"]
    assert mul.run is np.multiply
    a, b = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    np.testing.assert_array_equal(mul.forward(a, b), np.multiply(a, b))
    original = mul.forward
    calls = []

    def counting(x, y):
        calls.append(1)
        return original(x, y)

    mul.forward = counting
    try:
        assert mul.run is counting
        np.testing.assert_array_equal((mg.tensor(a) * mg.tensor(b)).numpy(), [3.0, 10.0])
        assert calls == [1]
    finally:
        mul.forward = original
    assert mul.run is original


def test_a_root_reached_from_another_root_gets_both_gradients():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    z = y * 3.0
    mg.autograd.backward([y.sum(), z.sum(), y.sum()])
    # d/dx of sum(y) + sum(3y) + sum(y) = 2 * (1 + 3 + 1)
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0])
    x.grad = None
    mg.autograd.backward([z, y], [mg.ones(2), mg.tensor([1.0, -1.0])])
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 4.0])


def test_a_wide_graph_runs_each_node_once_in_reverse_order():
    x = mg.tensor([1.0], requires_grad=True)
    order = []
    parts = []
    for k in range(5):
        p = x * float(k + 1)
        p.register_hook(lambda g, k=k: order.append(k))
        parts.append(p)
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    total.backward()
    assert x.grad.item() == 15.0
    assert order == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("bumped", [False, True])
def test_a_saved_tensor_operand_changed_in_place_after_forward_is_an_error(bumped):
    # saved as it is while it has no version counter, else with its version
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    t = mg.tensor([3.0, 4.0])
    if bumped:
        t.add_(1.0)  # version 1
    y = (x * t).sum()
    y.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad.numpy(), t.numpy())
    t.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_tensor_made_reaches_the_interpreters_that_override_it_wherever_they_sit():
    class Made(Interpreter):
        def __init__(self):
            self.shapes = []

        def tensor_made(self, t):
            self.shapes.append(t.shape)

    class Passing(Interpreter):
        pass

    x = mg.ones(2, 3)
    outer, inner = Made(), Made()
    with push(Passing()):
        assert not watching_made()
        with push(outer), push(Passing()), push(inner):
            assert watching_made()
            y = (x * 2).sum(1)  # two results on new storage
            y.reshape(1, 2)  # a view: not reported
        assert not watching_made()
    assert outer.shapes == inner.shapes == [(2, 3), (2,)]


def test_a_view_op_result_is_a_view_exactly_when_it_shares_memory():
    base = mg.zeros(4, 6)
    row = mg.zeros(6)
    wrapped = mg.from_numpy(np.frombuffer(bytearray(96), dtype=np.float32).reshape(4, 6))
    cases = [
        (base, base.reshape(24)),  # the owner itself
        (base[1:], base[1:].reshape(18)),  # a view of a view: the same owner
        (base.T, base.T.reshape(24)),  # strides forbid a view: a copy
        (row, row.expand(4, 6)),
        (wrapped, wrapped.reshape(24)),  # memory of a bytearray
        (base[:0], base[:0].reshape(0, 3)),  # empty: shares nothing
    ]
    for src, out in cases:
        shares = np.shares_memory(src.numpy(), out.numpy())
        assert (out._base is not None) == shares, (src.shape, out.shape)
        if shares:
            assert out._vc is src._vc
