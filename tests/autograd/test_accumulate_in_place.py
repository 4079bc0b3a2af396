"""NOTE [ Accumulate in place ]: a linear layer adds its weight gradient straight into an
existing .grad, in row blocks, in a plain backward, and only there."""

import numpy as np

import memgrad as mg
from memgrad.nn import functional as F


def layer(seed=0, n_in=512, n_out=1024):
    rng = np.random.default_rng(seed)
    w = mg.tensor(rng.standard_normal((n_out, n_in)).astype(np.float32), requires_grad=True)
    b = mg.tensor(rng.standard_normal(n_out).astype(np.float32), requires_grad=True)
    x = mg.tensor(rng.standard_normal((8, n_in)).astype(np.float32))
    return w, b, x


def reference(w, b, x):
    gw, gb = mg.autograd.grad(F.linear(x, w, b).tanh().sum(), [w, b])
    return gw.numpy(), gb.numpy()


def test_values_equal_the_separate_gradient():
    w, b, x = layer()
    gw, gb = reference(w, b, x)
    F.linear(x, w, b).tanh().sum().backward()  # first: .grad is made
    F.linear(x, w, b).tanh().sum().backward()  # second: added in place
    np.testing.assert_allclose(w.grad.numpy(), 2 * gw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), 2 * gb, rtol=1e-5, atol=1e-5)
    assert w.grad._version >= 1


def test_the_weight_gradient_is_never_a_whole_separate_array():
    w, b, x = layer()
    w.grad, b.grad = mg.zeros_like(w), mg.zeros_like(b)  # zero_grad(set_to_none=False)
    loss = F.linear(x, w, b).tanh().sum()
    with mg.memory.track() as t:
        loss.backward()
    weight_bytes = 1024 * 512 * 4  # 2 MiB
    assert t.peak_above_start <= weight_bytes // 2 + 8 * 1024 * 4 * 4  # one 1 MiB block
    gw, _ = reference(w, b, x)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-5)


def test_hooks_grad_and_create_graph_see_the_whole_gradient():
    w, b, x = layer()
    seen = []
    w.grad = mg.zeros_like(w)
    w.register_hook(lambda g: seen.append(g.numpy().copy()))
    F.linear(x, w, b).tanh().sum().backward()
    gw, _ = reference(w, b, x)
    np.testing.assert_allclose(seen[0], gw, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-5)
    w2, b2, x2 = layer(seed=1)
    w2.grad = mg.zeros_like(w2)
    (g,) = mg.autograd.grad(F.linear(x2, w2, b2).sum(), w2)  # grad(): .grad untouched
    assert not w2.grad.numpy().any() and g.numpy().any()
    F.linear(x2, w2, b2).tanh().sum().backward(create_graph=True)
    assert w2.grad.requires_grad  # made by ops, not added in place
