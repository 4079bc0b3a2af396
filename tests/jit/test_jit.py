"""jit: tracing to the let-binding IR, printing and parsing it, and the interpreter."""

import warnings

import numpy as np
import pytest

import memgrad as mg
from memgrad.checkpoint import checkpoint

RNG = np.random.default_rng(0)
W1 = mg.tensor(RNG.standard_normal((6, 5)), requires_grad=True)
B1 = mg.tensor(RNG.standard_normal(5), requires_grad=True)
W2 = mg.tensor(RNG.standard_normal((5, 5)), requires_grad=True)
SCALE = mg.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=mg.float64)  # a constant (no grad)


def model(x):
    h = (x @ W1 + B1).relu()
    h = checkpoint(lambda z: (z @ W2).tanh() * SCALE, h)
    rows = h[[0, 2, 2]]
    return rows.sum(dim=1), h.mean(), h[:, 1:3].to(mg.float32)


def x_of(seed, shape=(4, 6)):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape))


@pytest.fixture(autouse=True)
def fresh_grads():
    for p in (W1, B1, W2):
        p.grad = None


def test_trace_records_a_closed_program():
    g = mg.jit.trace(model, x_of(1))
    assert [v.name for v in g.inputs] == ["x"]
    assert [v.name for v in g.params] == ["W1", "B1", "W2"]
    assert [b.op for b in g.bindings][:3] == ["matmul", "add", "relu"]
    assert len(g.outputs) == 3 and g.tuple_output
    text = str(g)
    assert "graph(%x: float64[4, 6],\n      param %W1: float64[6, 5]," in text
    assert "%0 = matmul %x, %W1" in text and "# float64[4, 5]" in text
    assert "checkpoint " in text and "{" in text and "}" in text
    assert "const %c0: float64[5]" in text and "mul %4, %c0" in text
    assert "const %c0: float64[5] = [1.0, 2.0, 3.0, 4.0, 5.0]" in g.code
    assert "getitem[index=(array([0, 2, 2], int64), ...)]" in text
    assert "to[dtype=float32]" in text
    assert text.splitlines()[-1].startswith("  return %")


def test_code_round_trips_through_parse():
    g = mg.jit.trace(model, x_of(1))
    parsed = mg.jit.parse(g.code)
    assert parsed == g
    assert parsed.code == g.code
    parsed.bound.update(g.bound)
    for a, b in zip(parsed(x_of(3)), model(x_of(3))):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_rerun_matches_eager_to_the_bit_and_is_differentiable():
    g = mg.jit.trace(model, x_of(1))
    x = x_of(2)
    got = g(x)
    want = model(x)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    (got[0].sum() + got[1] + got[2].sum()).backward()
    grads = [p.grad.numpy().copy() for p in (W1, B1, W2)]
    for p in (W1, B1, W2):
        p.grad = None
    (want[0].sum() + want[1] + want[2].sum()).backward()
    for a, p in zip(grads, (W1, B1, W2)):
        np.testing.assert_array_equal(a, p.grad.numpy())


def test_region_reruns_under_checkpoint():
    g = mg.jit.trace(model, x_of(1))
    calls = []
    tanh = mg.ops.REGISTRY["tanh"]
    original, run, ufunc = tanh.forward, tanh.run, tanh.ufunc

    def counting(x):
        calls.append(1)
        return original(x)

    tanh.forward = counting
    try:
        out = g(x_of(2))
        out[1].backward()
    finally:  # the record as it was (its ufunc), for the tests after this one
        tanh.forward = original
        tanh.run, tanh.ufunc = run, ufunc
    assert len(calls) == 2  # forward, then the recomputation in backward


def test_trace_inside_trace_is_an_error():
    def outer(x):
        mg.jit.trace(lambda y: y * 2, x)
        return x * 3

    with pytest.raises(mg.TraceError, match="trace inside a trace"):
        mg.jit.trace(outer, x_of(1))
    assert mg.jit.trace(lambda y: y * 2, x_of(1))  # the failed trace left nothing behind


def test_wrong_inputs_raise_or_retrace_when_dynamic():
    g = mg.jit.trace(lambda x: (x @ W1).sum(dim=0), x_of(1))
    with pytest.raises(mg.TraceError, match=r"traced as float64\[4, 6\], got float64\[3, 6\]"):
        g(x_of(2, (3, 6)))
    with pytest.raises(mg.TraceError, match="takes 1 inputs, got 2"):
        g(x_of(1), x_of(2))
    d = mg.jit.trace(lambda x: (x @ W1).sum(dim=0), x_of(1), dynamic=True)
    np.testing.assert_array_equal(d(x_of(2, (3, 6))).numpy(), (x_of(2, (3, 6)) @ W1).sum(0).numpy())


def test_data_dependent_control_flow_warns():
    def branchy(x):
        if x.sum() > 0:
            return x * 2
        return x * 3

    with pytest.warns(UserWarning, match="specialised to the branch"):
        mg.jit.trace(branchy, x_of(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bool(x_of(1).sum() > 0)  # no warning outside tracing


def test_outputs_must_come_from_the_trace():
    with pytest.raises(mg.TraceError, match="not computed from the inputs"):
        mg.jit.trace(lambda x: mg.ones(2), x_of(1))


def test_parse_errors_name_the_line():
    with pytest.raises(mg.TraceError, match="line 2, column 8: unknown primitive 'frobnicate'"):
        mg.jit.parse("graph(%x: float32[2]):\n  %0 = frobnicate %x\n  return %0\n")
    with pytest.raises(mg.TraceError, match="line 2, column 12: value %y is used before it is "):
        mg.jit.parse("graph(%x: float32[2]):\n  %0 = exp %y\n  return %0\n")


def test_interpreter_frees_each_value_at_its_last_use():
    n, width, batch = 32, 64, 256
    rng = np.random.default_rng(0)
    ws = [mg.tensor(rng.standard_normal((width, width)).astype(np.float32) * 0.1)
          for _ in range(n)]

    def keeps_everything(x):
        hs = [x]  # eager code that holds every activation until it returns
        for w in ws:
            hs.append((hs[-1] @ w).relu())
        return hs[-1]

    x = mg.tensor(rng.standard_normal((batch, width)).astype(np.float32))
    block = batch * width * 4
    with mg.no_grad():
        g = mg.jit.trace(keeps_everything, x)
        with mg.memory.track() as eager:
            keeps_everything(x)
        with mg.memory.track() as interpreted:
            out = g(x)
    np.testing.assert_array_equal(out.numpy(), keeps_everything(x).numpy())
    assert eager.peak_above_start >= n * block
    assert interpreted.peak_above_start <= 3 * block


def test_large_constants_round_trip_compactly():
    mask = mg.tensor(np.triu(np.full((40, 40), -np.inf), 1))  # 1,600 values, with -inf
    g = mg.jit.trace(lambda x: (x + mask).softmax(dim=1), x_of(1, (40, 40)))
    assert "const %c0: float64[40, 40]" in str(g) and "b64:" not in str(g)
    assert "b64:" in g.code and len(g.code) < 20_000
    parsed = mg.jit.parse(g.code)
    assert parsed == g
    np.testing.assert_array_equal(parsed(x_of(2, (40, 40))).numpy(), g(x_of(2, (40, 40))).numpy())
