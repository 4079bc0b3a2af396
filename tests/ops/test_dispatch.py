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
    assert y.grad_fn._inputs[5] == 2.0  # the constant reaches the VJP as a value


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
        assert mul.run is counting and not mul.ufunc
        np.testing.assert_array_equal((mg.tensor(a) * mg.tensor(b)).numpy(), [3.0, 10.0])
        assert calls == [1]
        mul.forward = original
        assert mul.run is original and not mul.ufunc
    finally:  # the record as it was, for the tests after this one
        mul.forward = original
        mul.run, mul.ufunc = np.multiply, True


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


# NOTE [ Calls of one and two operands ]: operators, unary methods and primitives called
# without parameters take prim.call1/prim.call2, which must give what apply gives

def _count_apply(monkeypatch):
    from memgrad.ops import registry

    calls = []
    real = registry.apply

    def counting(prim, args, params, _dispatched=False):
        calls.append(prim.name)
        return real(prim, args, params, _dispatched)

    monkeypatch.setattr(registry, "apply", counting)
    return calls


def test_operators_unary_methods_and_bare_primitive_calls_take_the_short_path(monkeypatch):
    calls = _count_apply(monkeypatch)
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    a = mg.tensor([3.0, 4.0])
    y = ((x * a + 0.5) - x).tanh()
    z = 2.0 - y  # reflected, a constant first
    g = REGISTRY["tanh_backward"](mg.ones(2), y)
    w = x.reshape(2, 1)  # a view, its base unchanged since
    u = w * 2.0
    with mg.no_grad():
        -(x / a)
    assert calls == ["reshape"]  # reshape takes a parameter (the shape): the general path
    (z.sum() + g.sum() + u.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), _numpy_grad(x.numpy(), a.numpy()) + 2.0,
                               rtol=1e-6)


def _numpy_grad(x, a):
    y = np.tanh(x * a + 0.5 - x)
    t = 1 - y * y
    dz = -t * (a - 1)  # z = 2 - y
    dg = (-2 * y) * t * (a - 1)  # g = 1 - y**2
    return dz + dg


def test_views_interpreters_and_other_operands_still_take_apply(monkeypatch):
    calls = _count_apply(monkeypatch)
    x = mg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = x * 1.0
    v = b.reshape(4)
    b.mul_(2.0)  # the view's base changed in place: the view is refreshed first
    v * 2.0
    x * np.float32(2.0)  # a NumPy scalar
    x * np.ones(2)  # an array constant (copied into the node)
    with push(Interpreter()):
        x * 2.0
    # the reshape, the mul on the stale view and the refresh's reshape inside it, the two
    # other constants, and under the interpreter apply runs twice (to dispatch, and past it)
    assert calls == ["reshape", "mul", "reshape", "mul", "mul", "mul", "mul"], calls


@pytest.mark.parametrize("name", ["mul", "add", "sub", "div", "pow", "maximum", "lt"])
@pytest.mark.parametrize("shape", ["tt", "tc", "ct", "tg", "gg", "bg", "cb", "bb"])
def test_the_short_path_makes_the_node_apply_makes(name, shape):
    from memgrad.ops.registry import apply

    prim = REGISTRY[name]
    rng = np.random.default_rng(0)

    def operands():
        # t: a tensor, g: a leaf that requires grad, b: an op's output changed in place
        # (a version counter at 1), c: a constant
        out, leaves = [], []
        for k, c in enumerate(shape):
            if c == "c":
                out.append(1.5 if k else 2)  # a float, or an int
            else:
                data = rng.uniform(0.5, 2.0, (3, 1) if k else (3, 4)).astype(np.float32)
                t = mg.tensor(data, requires_grad=c != "t")
                leaves.append(t)
                if c == "b":
                    t = t * 1.0
                    t.add_(0.25)
                out.append(t)
        return out, leaves

    results = []
    for run in (lambda x, y: apply(prim, (x, y), {}), prim.call2):
        rng = np.random.default_rng(0)
        (x, y), leaves = operands()
        out = run(x, y)
        node = out.grad_fn
        grads = None
        if node is not None:
            (out * out).sum().backward()
            grads = [t.grad.numpy() if t.requires_grad else None for t in leaves]
        results.append((out.numpy(), out.dtype, out.requires_grad, _node_fields(node, (x, y)),
                        grads))
    (v0, d0, r0, n0, g0), (v1, d1, r1, n1, g1) = results
    np.testing.assert_array_equal(v0, v1)
    assert (d0, r0, n0) == (d1, r1, n1)
    assert (g0 is None) == (g1 is None)
    for a, b in zip(g0 or (), g1 or ()):
        assert (a is None and b is None) or np.array_equal(a, b)


def _node_fields(node, operands):
    """What a node holds, with the operands named by position: two paths that record the
    same call must give equal answers."""
    if node is None:
        return None
    saved = [(type(s).__name__, next((i for i, t in enumerate(operands)
                                      if t is s or getattr(s, "_t", None) is t), None))
             for s in node._saved]
    return (node.prim, node._keep, node._needs, node.sink_inputs, node._params, saved,
            node._out_saved is not None, [type(e[0]) for e in node.next_functions],
            [e[1] for e in node.next_functions], node._inputs[2::3])


@pytest.mark.parametrize("name", ["tanh", "exp", "relu", "neg", "sigmoid", "abs"])
@pytest.mark.parametrize("source", ["leaf", "op", "bumped"])
def test_the_unary_short_path_makes_the_node_apply_makes(name, source):
    from memgrad.ops.registry import apply

    prim = REGISTRY[name]
    data = np.random.default_rng(1).uniform(-2.0, 2.0, (3, 4)).astype(np.float32)
    results = []
    for run in (lambda x: apply(prim, (x,), {}), prim.call1):
        leaf = mg.tensor(data, requires_grad=True)
        x = leaf if source == "leaf" else leaf * 1.0
        if source == "bumped":
            x.add_(0.25)  # a version counter at 1: saved as a SavedTensor
        out = run(x)
        fields = _node_fields(out.grad_fn, (x,))
        (out * out).sum().backward()
        results.append((out.numpy(), fields, leaf.grad.numpy()))
    (v0, n0, g0), (v1, n1, g1) = results
    np.testing.assert_array_equal(v0, v1)
    assert n0 == n1
    np.testing.assert_array_equal(g0, g1)


def test_the_short_path_saves_through_saved_tensor_hooks_and_keeps_anomaly_traces():
    packed = []
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    a = mg.tensor([3.0, 4.0])
    with mg.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = (x * a).tanh()
    assert len(packed) == 2  # mul's a, tanh's output
    y.sum().backward()
    t = np.tanh(x.numpy() * a.numpy())
    np.testing.assert_allclose(x.grad.numpy(), a.numpy() * (1 - t * t), rtol=1e-6)
    with mg.autograd.detect_anomaly():
        y = x * a
    assert y.grad_fn._trace is not None


def test_an_input_meta_follows_the_tensor_data_a_recorded_op_saw():
    # a tensor's (shape, dtype) is kept on it after its first recorded op: a new .data,
    # or Module.to(dtype), must give the next node the new one
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2.0).sum().backward()
    assert x.grad_fn is None and x._meta.shape == (3,)
    x.data = mg.tensor([1.0, 2.0, 3.0, 4.0])
    x.grad = None
    (x * mg.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0, 4.0])

    lin = mg.nn.Linear(2, 1)
    lin(mg.ones(1, 2)).sum().backward()
    lin.zero_grad(set_to_none=True)
    lin.to(mg.float64)
    lin(mg.ones(1, 2, dtype=mg.float64)).sum().backward()
    assert lin.weight.grad.dtype == mg.float64 and lin.bias.grad.dtype == mg.float64
    np.testing.assert_array_equal(lin.weight.grad.numpy(), [[1.0, 1.0]])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_a_ufunc_output_takes_its_operand_meta_only_where_it_is_its_own(name):
    # NOTE [ An output's Meta from its operand ]: handed on where the output has the
    # operand's shape and dtype, left to _meta_of elsewhere; either way the Meta the next
    # node records is the output's (shape, dtype)
    prim = REGISTRY[name]
    assert prim.ufunc
    rng = np.random.default_rng(0)
    x = mg.tensor(rng.random((3, 4), dtype=np.float32) + 1.0, requires_grad=True)
    same = mg.tensor(rng.random((3, 4), dtype=np.float32) + 1.0)
    row = mg.tensor(rng.random((1, 4), dtype=np.float32) + 1.0)
    wide = mg.tensor(rng.random((3, 4)) + 1.0)  # float64
    x._meta = same._meta = None
    cases = [((x, 2.0), True), ((2.0, x), True), ((x, 3), True), ((x, x), True),
             ((x, same), True), ((row, x), False), ((x, wide), False)]
    for operands, handed in cases:
        out = prim.call2(*operands)
        assert out.grad_fn is not None
        assert (out._meta is not None) == handed, operands
        nxt = out * 1.0  # records out's Meta, handed on or looked up
        assert nxt.grad_fn._inputs[2] == (out.shape, out.numpy().dtype)
    unary = x.tanh()
    assert unary._meta == ((3, 4), np.dtype(np.float32))
    (x * same - row).tanh().sum().backward()  # the gradients the Metas are checked against
    t = np.tanh(x.numpy() * same.numpy() - row.numpy())
    np.testing.assert_allclose(x.grad.numpy(), same.numpy() * (1 - t * t), rtol=1e-6)


def test_a_primitive_whose_forward_is_replaced_is_no_ufunc_any_more():
    def negative(x):
        return np.negative(x)

    prim = mg.ops.registry.Primitive("negated", negative, saves={}, ufunc=np.negative)
    assert prim.ufunc and prim.run is np.negative
    prim.forward = lambda x: np.concatenate([x, x])  # not of its operand's shape any more
    assert not prim.ufunc
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    prim.vjp(lambda g, out, needs, x: (g[:2] + g[2:],))
    out = prim.call1(x)
    assert out._meta is None and out.shape == (4,)
