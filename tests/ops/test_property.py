"""Hypothesis property tests: random expression graphs, matmuls and indexing expressions,
whose backward() gradients are compared with central finite differences of an independent
NumPy evaluation (``tests.helpers.numeric_grads``), and whose forward values are compared
with NumPy."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import memgrad as mg
from tests.helpers import numeric_grads
from tests.helpers.strategies import graphs, index_cases, matmul_shapes

SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
BIG = 1e4  # examples whose intermediate values grow past this are rejected (cancellation)


def t64(a: np.ndarray) -> mg.Tensor:
    return mg.tensor(np.asarray(a, dtype=np.float64), dtype=mg.float64, requires_grad=True)


def assert_close(got: np.ndarray, expected: np.ndarray, what: str, rtol: float = 1e-5) -> None:
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-6 * scale, err_msg=what)


def grad_array(t: mg.Tensor) -> np.ndarray:
    return np.zeros(t.shape) if t.grad is None else t.grad.numpy()


def _checked_graph(graph):
    """Evaluate ``graph`` with NumPy, rejecting examples near kinks or with huge values."""
    leaves = graph.leaves()
    _, values = graph.run("np", leaves)
    assume(all(np.all(np.abs(v) < BIG) for v in values))
    assume(graph.safe(values))
    return leaves, values


@SETTINGS
@given(graph=graphs())
def test_random_graph_values_and_gradients(graph):
    leaves_np, values_np = _checked_graph(graph)
    leaves = [t64(a) for a in leaves_np]
    loss, values = graph.run("mg", leaves)
    for k, (v, e) in enumerate(zip(values, values_np)):
        assert v.shape == np.shape(e), (k, v.shape, np.shape(e))
        assert v.dtype == np.float64
        np.testing.assert_allclose(v.numpy(), e, rtol=1e-10, atol=1e-12, err_msg=f"value %{k}")
    loss.backward()
    expected = numeric_grads(lambda *xs: graph.run("np", list(xs))[0], leaves_np)
    for i, (t, e) in enumerate(zip(leaves, expected)):
        assert t.grad is None or t.grad.dtype == np.float64
        assert_close(grad_array(t), e, f"gradient of leaf %{i}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(max_ops=6, max_leaves=2, max_side=3, max_ndim=2), data=st.data())
def test_random_graph_second_derivatives(graph, data):
    """Hessian-vector products from double backward against finite differences of the
    first gradients (which the test above checks against NumPy)."""
    leaves_np, _ = _checked_graph(graph)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    vs = [rng.standard_normal(a.shape) for a in leaves_np]

    def directional(*arrays):
        xs = [t64(a) for a in arrays]
        loss, _ = graph.run("mg", xs)
        grads = mg.autograd.grad(loss, xs, allow_unused=True)
        return sum(float((g.numpy() * v).sum()) for g, v in zip(grads, vs) if g is not None)

    xs = [t64(a) for a in leaves_np]
    loss, _ = graph.run("mg", xs)
    assume(loss.requires_grad)
    grads = mg.autograd.grad(loss, xs, create_graph=True, allow_unused=True)
    terms = [(g * mg.tensor(v)).sum() for g, v in zip(grads, vs) if g is not None and
             g.requires_grad]
    assume(terms)
    hvp = mg.autograd.grad(sum(terms[1:], terms[0]), xs, allow_unused=True)
    expected = numeric_grads(directional, leaves_np)
    for i, (h, e) in enumerate(zip(hvp, expected)):
        got = np.zeros(e.shape) if h is None else h.numpy()
        assert_close(got, e, f"Hessian-vector product for leaf %{i}", rtol=1e-4)


@SETTINGS
@given(shapes=matmul_shapes(), seed=st.integers(0, 2**16))
def test_matmul_gradients(shapes, seed):
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal(s) for s in shapes)
    out_shape = np.matmul(x, y).shape
    w = rng.standard_normal(out_shape)
    tx, ty = t64(x), t64(y)
    out = tx @ ty
    np.testing.assert_allclose(out.numpy(), np.matmul(x, y), rtol=1e-12, atol=1e-12)
    (out * mg.tensor(w)).sum().backward()
    ex, ey = numeric_grads(lambda a, b: float((np.matmul(a, b) * w).sum()), [x, y])
    assert_close(tx.grad.numpy(), ex, "gradient of x")
    assert_close(ty.grad.numpy(), ey, "gradient of y")


@SETTINGS
@given(case=index_cases(), seed=st.integers(0, 2**16))
def test_getitem_gradients(case, seed):
    shape, index = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    expected_value = x[index]
    w = rng.standard_normal(expected_value.shape)
    tx = t64(x)
    out = tx[index]
    assert out.shape == expected_value.shape
    np.testing.assert_array_equal(out.numpy(), expected_value)
    (out * mg.tensor(w)).sum().backward()
    (ex,) = numeric_grads(lambda a: float((a[index] * w).sum()), [x])
    assert_close(grad_array(tx), ex, "gradient of x")


@SETTINGS
@given(case=index_cases(unique=True), seed=st.integers(0, 2**16), bcast=st.booleans())
def test_setitem_gradients(case, seed, bcast):
    shape, index = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    target = x[index].shape
    # the value either fills the selection or broadcasts into it from its trailing dims
    v_shape = target[len(target) // 2:] if bcast else target
    v = rng.standard_normal(v_shape)
    w = rng.standard_normal(shape)

    def ref(a, b):
        out = a * 2.0
        out[index] = b
        return out

    tx, tv = t64(x), t64(v)
    out = tx * 2.0
    version = out._version
    out[index] = tv
    assert out._version == version + 1
    np.testing.assert_array_equal(out.numpy(), ref(x, v))
    (out * mg.tensor(w)).sum().backward()
    ex, ev = numeric_grads(lambda a, b: float((ref(a, b) * w).sum()), [x, v])
    assert_close(grad_array(tx), ex, "gradient of x")
    assert_close(grad_array(tv), ev, "gradient of the value")


@SETTINGS
@given(
    shapes=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=4),
    dim=st.sampled_from([0, 1, -1, -2]),
    seed=st.integers(0, 2**16),
)
def test_cat_split_round_trip_gradients(shapes, dim, seed):
    rng = np.random.default_rng(seed)
    other = shapes[0][1 - dim % 2]
    arrays = [rng.standard_normal((s[0], other) if dim % 2 == 0 else (other, s[0]))
              for s in shapes]
    ts = [t64(a) for a in arrays]
    joined = mg.cat(ts, dim=dim)
    np.testing.assert_array_equal(joined.numpy(), np.concatenate(arrays, axis=dim))
    sizes = [a.shape[dim] for a in arrays]
    pieces = joined.split(sizes[::-1], dim=dim)
    ws = [rng.standard_normal(p.shape) for p in pieces]
    loss = sum(((p.tanh() * mg.tensor(w)).sum() for p, w in zip(pieces, ws)), mg.tensor(0.0))

    def ref(*xs):
        j = np.concatenate(xs, axis=dim)
        cuts = np.cumsum(sizes[::-1])[:-1]
        return float(sum((np.tanh(p) * w).sum() for p, w in zip(np.split(j, cuts, dim), ws)))

    loss.backward()
    for i, (t, e) in enumerate(zip(ts, numeric_grads(ref, arrays))):
        assert_close(t.grad.numpy(), e, f"gradient of input {i}")
