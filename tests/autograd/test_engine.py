"""The engine: graph structure, dependency order, partial graphs, retain_graph, hooks,
reentrancy and deep graphs."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd.graph import AccumulateGrad


def f64(*shape, seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


# ---------------------------------------------------------------------------- graph


def test_grad_fn_next_functions_and_accumulator_shared():
    x = f64(3)
    w = f64(3, seed=1)
    y = x * w
    z = y + x
    assert z.grad_fn.name() == "AddBackward"
    (mul_node, nr0), (acc_x, nr1) = z.grad_fn.next_functions
    assert mul_node is y.grad_fn and nr0 == 0 and nr1 == 0
    assert isinstance(acc_x, AccumulateGrad) and acc_x.variable is x
    # the same leaf has one AccumulateGrad shared by all its uses
    assert y.grad_fn.next_functions[0][0] is acc_x
    assert y.grad_fn.next_functions[1][0].variable is w
    assert x.is_leaf and not y.is_leaf and x.grad_fn is None


def test_constant_inputs_have_no_edge():
    x = f64(2)
    c = mg.tensor([1.0, 2.0], dtype=mg.float64)
    y = x * c
    assert y.grad_fn.next_functions[1] == (None, 0)
    y2 = x * 2.0
    assert y2.grad_fn.next_functions[1] == (None, 0)


def test_a_node_keeps_each_input_as_child_output_nr_and_meta():
    # one flat tuple a node (NOTE [ A node's inputs ] in autograd/graph.py): recorded by the
    # two-operand path, the general path, and a custom Function with two outputs
    from memgrad.autograd.graph import Meta

    class Split(mg.autograd.Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k, a * (k + 1)

        @staticmethod
        def backward(ctx, ga, gb):
            return ga * 2.0 + gb * 3.0, None

    x = f64(3)
    c = mg.tensor([1.0, 2.0, 3.0], dtype=mg.float64)
    m = Meta(((3,), np.dtype(np.float64)))
    y = x * 2.0
    acc = y.grad_fn.next_functions[0][0]
    assert acc.variable is x
    assert y.grad_fn._inputs == (acc, 0, m, None, 0, 2.0)
    first, second = Split.apply(y, 2.0)
    assert second.grad_fn._inputs == (y.grad_fn, 0, m, None, 0, None)
    z = mg.where(c > 1.5, second, c)  # the general path, three inputs
    assert z.grad_fn._inputs[3:] == (second.grad_fn, 1, m, None, 0, m)
    assert z.grad_fn.next_functions == ((None, 0), (second.grad_fn, 1), (None, 0))
    (z.sum() + first.sum()).backward()
    # d/dx of sum(where(c > 1.5, 6x, c)) + sum(4x), through Split's backward (2 ga + 3 gb)
    np.testing.assert_array_equal(x.grad.numpy(), 2.0 * (2.0 + 3.0 * (c.numpy() > 1.5)))


def test_sequence_nr_increases():
    x = f64(2)
    a = x.exp()
    b = a.sin() if hasattr(a, "sin") else a.tanh()
    c = b * 2
    seqs = [t.grad_fn._sequence_nr for t in (a, b, c)]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


def test_no_grad_records_nothing():
    x = f64(2)
    with mg.no_grad():
        y = x * 2
    assert y.grad_fn is None and not y.requires_grad


# ---------------------------------------------------------------------------- values


def test_diamond_sums_gradients():
    x = f64(4)
    a = x.exp()
    b = a * x
    c = a + b  # a used twice
    c.sum().backward()
    xd = x.numpy()
    expected = np.exp(xd) + np.exp(xd) * xd + np.exp(xd)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_multiple_roots_and_root_that_is_upstream_of_another():
    x = f64(3)
    y = x * 3.0
    z = y * y
    mg.autograd.backward([y.sum(), z.sum()])
    np.testing.assert_allclose(x.grad.numpy(), 3 + 18 * x.numpy(), rtol=1e-12)
    # a root that is an intermediate of another root
    x2 = f64(3, seed=4)
    y2 = x2 * 2.0
    z2 = y2 * 5.0
    mg.autograd.backward([y2, z2], [mg.ones_like(y2), mg.ones_like(z2)])
    np.testing.assert_allclose(x2.grad.numpy(), np.full(3, 12.0))


def test_backward_accumulates_into_grad():
    x = f64(2)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])


def test_gradient_argument_and_vjp():
    x = f64(3)
    y = x * x
    v = mg.tensor([1.0, 10.0, 100.0], dtype=mg.float64)
    y.backward(v)
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() * v.numpy())


def test_leaf_root():
    x = f64(3)
    x.backward(mg.ones_like(x))
    np.testing.assert_allclose(x.grad.numpy(), np.ones(3))


# ---------------------------------------------------------------------------- grad()


def test_grad_touches_no_grad_attribute():
    x = f64(3)
    w = f64(3, seed=1)
    y = (x * w).sum()
    gx, gw = mg.autograd.grad(y, [x, w])
    np.testing.assert_allclose(gx.numpy(), w.numpy())
    np.testing.assert_allclose(gw.numpy(), x.numpy())
    assert x.grad is None and w.grad is None


def test_grad_runs_only_the_needed_part():
    calls = []
    x = f64(3)
    w = f64(3, seed=1)
    a = x * 2.0
    b = w * 3.0
    a.grad_fn.register_hook(lambda gi, go: calls.append("a"))
    b.grad_fn.register_hook(lambda gi, go: calls.append("b"))
    out = (a + b).sum()
    (gx,) = mg.autograd.grad(out, x)
    np.testing.assert_allclose(gx.numpy(), np.full(3, 2.0))
    assert calls == ["a"]  # the branch to w never ran
    assert w.grad is None and x.grad is None


class _Counted(mg.autograd.Function):
    """The identity, counting its backward calls (a node without hooks: the engine's usual
    path runs it)."""

    calls = 0

    @staticmethod
    def forward(ctx, t):
        return t * 1.0

    @staticmethod
    def backward(ctx, g):
        _Counted.calls += 1
        return g


@pytest.mark.parametrize("api", ["grad", "backward_inputs"])
def test_grad_runs_only_the_needed_part_through_the_usual_path(api):
    # nodes off every path to the inputs never run and get no gradient, also where the
    # engine's usual path runs the nodes (no hooks, no captures): b's branch (w * 3 through
    # _Counted, a hook on b) feeds a node on the path (c = a * b) but leads only to w, and
    # so does the second root, itself a _Counted node; h, an intermediate input, is
    # captured on the way to x
    _Counted.calls = 0
    x, w = f64(3), f64(3, seed=1)
    h = (x * 2.0).tanh()
    a = h * h
    b = _Counted.apply(w) * 3.0
    c = a * b
    out = (c + a).sum()
    other = _Counted.apply((w * w).sum())
    fired = []
    b.register_hook(lambda g: fired.append(g))  # b leads only to w: it never fires
    xn, wn = x.numpy(), w.numpy()
    hn = np.tanh(2 * xn)
    dh = 2 * hn * (3 * wn + 1)  # d out / d h
    if api == "grad":
        gx, gh = mg.autograd.grad([out, other], [x, h], retain_graph=True)
        np.testing.assert_allclose(gh.numpy(), dh, rtol=1e-12)
        assert x.grad is None and w.grad is None
    else:
        mg.autograd.backward([out, other], inputs=[x], retain_graph=True)
        gx = x.grad
        assert w.grad is None
    np.testing.assert_allclose(gx.numpy(), dh * 2 * (1 - hn * hn), rtol=1e-12)
    assert _Counted.calls == 0 and not fired
    (out + other).backward()  # the graph was retained: the whole of it runs now
    assert _Counted.calls == 2 and len(fired) == 1
    np.testing.assert_allclose(w.grad.numpy(), 3 * hn * hn + 2 * wn, rtol=1e-12)


def test_grad_with_respect_to_intermediate():
    x = f64(3)
    h = x.exp()
    y = (h * h).sum()
    (gh,) = mg.autograd.grad(y, h)
    np.testing.assert_allclose(gh.numpy(), 2 * np.exp(x.numpy()), rtol=1e-12)


def test_grad_outputs_and_unused_inputs():
    x = f64(2)
    z = f64(2, seed=3)
    y = x * 4.0
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        mg.autograd.grad(y, [x, z], grad_outputs=mg.ones_like(y), retain_graph=True)
    gx, gz = mg.autograd.grad(
        y, [x, z], grad_outputs=mg.tensor([1.0, 2.0], dtype=mg.float64), allow_unused=True
    )
    np.testing.assert_allclose(gx.numpy(), [4.0, 8.0])
    assert gz is None


def test_grad_input_that_does_not_require_grad():
    x = f64(2)
    c = mg.ones(2)
    with pytest.raises(RuntimeError, match="does not require grad"):
        mg.autograd.grad((x * c).sum(), c)


def test_backward_inputs_only_accumulates_into_them():
    x = f64(2)
    w = f64(2, seed=1)
    h = x * w
    h.retain_grad()
    y = (h * h).sum()
    y.backward(inputs=[w, h])
    assert x.grad is None
    hv = x.numpy() * w.numpy()
    np.testing.assert_allclose(w.grad.numpy(), 2 * hv * x.numpy())
    np.testing.assert_allclose(h.grad.numpy(), 2 * hv)
    h.grad = None
    (h * h).sum().backward(inputs=[h])  # h alone: its retain_grad hook fills .grad once
    np.testing.assert_allclose(h.grad.numpy(), 2 * hv)


# ---------------------------------------------------------------------------- retain_graph


def test_second_backward_needs_retain_graph():
    x = f64(2)
    y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.numpy()))
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_saved_tensors_are_freed_after_backward():
    x = f64(2)
    y = x.exp()
    node = y.grad_fn
    assert node._out_saved is not None
    y.sum().backward()
    assert node._out_saved is None


def test_nodes_without_saved_tensors_can_rerun():
    x = f64(2)
    y = (x + 1.0).sum()
    y.backward()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


# ---------------------------------------------------------------------------- create_graph


def test_create_graph_second_derivative():
    x = f64(3)
    y = (x.tanh() * x).sum()
    (g,) = mg.autograd.grad(y, x, create_graph=True)
    assert g.requires_grad
    (gg,) = mg.autograd.grad(g.sum(), x)
    xd = x.numpy()
    t = np.tanh(xd)
    s = 1 - t**2
    # d/dx (tanh + x sech^2) = 2 sech^2 - 2 x tanh sech^2
    np.testing.assert_allclose(gg.numpy(), 2 * s - 2 * xd * t * s, rtol=1e-10)


def test_create_graph_backward_keeps_graph_on_grad():
    x = f64(2)
    (x**3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (g2,) = mg.autograd.grad(x.grad.sum(), x)
    np.testing.assert_allclose(g2.numpy(), 6 * x.numpy())


# ---------------------------------------------------------------------------- hooks


def test_tensor_hook_replaces_gradient_and_can_be_removed():
    x = f64(3)
    y = x * 2.0
    h = y.register_hook(lambda g: g * 10)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 20.0))
    h.remove()
    x.grad = None
    (x * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0))


def test_leaf_hook_sees_summed_gradient():
    x = f64(2)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    (x * 2.0 + x * 3.0).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], [5.0, 5.0])


def test_hook_returning_wrong_shape_raises():
    x = f64(3)
    y = x * 2.0
    y.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match=r"shape \(\) for a tensor of shape \(3,\)"):
        y.sum().backward()


def test_node_pre_and_post_hooks():
    x = f64(2)
    y = x.exp()
    log = []
    y.grad_fn.register_prehook(lambda go: log.append(("pre", go[0].numpy().copy())))

    def post(gi, go):
        log.append("post")
        return (gi[0] * 0.0,)

    y.grad_fn.register_hook(post)
    y.sum().backward()
    assert log[0][0] == "pre" and log[1] == "post"
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0])


def test_retain_grad():
    x = f64(2)
    h = x * 3.0
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * 3.0 * x.numpy())


# ---------------------------------------------------------------------------- scale


def test_deep_chain_backward_and_free_without_recursion_error():
    x = mg.tensor([1.0], dtype=mg.float64, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.00001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.00001**100_000], rtol=1e-9)
    del y  # freeing the 100,000-node graph must not overflow the C stack either


def test_deep_chain_freed_without_backward():
    x = mg.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y + 1.0
    del y


def test_reentrant_backward_inside_a_hook():
    # a node's backward may run backward itself (the reentrant checkpoint does)
    x = f64(3)
    inner_x = f64(3, seed=9)
    inner_results = []

    def hook(g):
        with mg.enable_grad():  # backward runs in no-grad mode unless create_graph
            (gi,) = mg.autograd.grad((inner_x**2).sum(), inner_x)
        inner_results.append(gi)
        return g * 2

    y = x * 3.0
    y.register_hook(hook)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 6.0))
    np.testing.assert_allclose(inner_results[0].numpy(), 2 * inner_x.numpy())


# ---------------------------------------------------------------------------- errors


def test_backward_on_non_scalar_needs_gradient():
    x = f64(3)
    with pytest.raises(RuntimeError, match=r"explicit gradient; got shape \(3,\)"):
        (x * 2).backward()


def test_backward_on_tensor_without_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        mg.ones(2).sum().backward()


def test_gradient_of_wrong_shape():
    x = f64(3)
    with pytest.raises(RuntimeError, match=r"has shape \(2,\) but the output has shape \(3,\)"):
        (x * 2).backward(mg.ones(2))


def test_dtype_mixing_gradient_cast_back_to_input_dtype():
    x = mg.ones(3, requires_grad=True)  # float32
    y = mg.tensor([1.0, 2.0, 3.0], dtype=mg.float64, requires_grad=True)
    z = x * y
    assert z.dtype == np.float64
    z.sum().backward()
    assert x.grad.dtype == np.float32 and y.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad.numpy(), [1, 2, 3])


# ---------------------------------------------------------------------------- ownership


def _shares(a, b):
    return np.shares_memory(a.numpy(), b.numpy())


def test_grad_is_accumulated_in_place():
    x = f64(4, 3)
    w = f64(3, 2, seed=1)
    y = x @ w
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ np.ones((4, 2)))
    before = w.grad.numpy()
    (x @ w).sum().backward()
    assert w.grad.numpy() is before  # later gradients are added in place
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.numpy().T @ np.ones((4, 2)))


def test_gradient_passed_to_two_leaves_is_not_shared_between_their_grads():
    x = f64(3)
    w = f64(3, seed=1)
    (x + w).sum().backward()  # add's VJP hands the same gradient to both leaves
    assert not _shares(x.grad, w.grad)
    x.grad.add_(100.0)
    np.testing.assert_allclose(w.grad.numpy(), np.ones(3))


def test_gradient_kept_by_a_hook_is_not_taken():
    x = f64(3)
    kept = []
    x.register_hook(lambda g: kept.append(g))
    (x * 2.0).sum().backward()
    assert not _shares(x.grad, kept[0])
    (x * 2.0).sum().backward()
    np.testing.assert_allclose(kept[0].numpy(), np.full(3, 2.0))


def test_caller_gradient_and_views_are_not_taken():
    x = f64(3)
    v = mg.ones(3, dtype=mg.float64)
    x.backward(v)
    assert not _shares(x.grad, v)
    x.grad.add_(1.0)
    np.testing.assert_allclose(v.numpy(), np.ones(3))
    y = f64(2, 3, seed=2)
    y.sum().backward()  # sum's VJP is an expanded (read-only) view
    y.grad.add_(1.0)
    np.testing.assert_allclose(y.grad.numpy(), np.full((2, 3), 2.0))


def test_hooks_on_a_leaf_accumulator_run_and_the_gradient_still_accumulates():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    y = w * 3
    acc = y.grad_fn.next_functions[0][0]
    assert isinstance(acc, mg.autograd.graph.AccumulateGrad)
    seen = []
    acc.register_prehook(lambda go: seen.append(("pre", go[0].numpy().copy())))
    acc.register_hook(lambda gi, go: seen.append(("post", gi, go[0].numpy().copy())))
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])
    assert seen[0][0] == "pre" and seen[1][:2] == ("post", ())
    np.testing.assert_array_equal(seen[0][1], [3.0, 3.0])
    np.testing.assert_array_equal(seen[1][2], [3.0, 3.0])


def test_a_prehook_on_a_leaf_accumulator_may_replace_the_gradient():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    y = w * 3
    y.grad_fn.next_functions[0][0].register_prehook(lambda go: (go[0] * 0 + 1,))
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0])
