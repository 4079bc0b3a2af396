"""Static analysis of traced graphs agrees with what running them measures."""

import numpy as np

import memgrad as mg
from memgrad.checkpoint import checkpoint, plan, predict, profile, segment_bounds


def mlp(n=12, width=80, batch=200, seed=0):
    rng = np.random.default_rng(seed)
    ws = [
        mg.tensor((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                  requires_grad=True)
        for _ in range(n)
    ]
    bs = [mg.zeros(width, requires_grad=True) for _ in range(n)]
    layers = [lambda h, w=w, b=b: (h @ w + b).tanh() * 0.5 for w, b in zip(ws, bs)]
    return layers, mg.tensor(rng.standard_normal((batch, width)).astype(np.float32))


def test_op_bytes_follows_the_save_rules():
    w = mg.ones(8, 8, requires_grad=True)
    g = mg.jit.trace(lambda x: ((x @ w).tanh() * 3.0).exp().sum(), mg.ones(4, 8))
    rows = [(o.binding.op, o.out_bytes, [str(v) for v in o.saved]) for o in mg.jit.op_bytes(g)]
    assert rows == [
        ("matmul", 128, ["%x"]),  # x needs no grad: w is not saved, x is (for w's gradient)
        ("tanh", 128, ["%1"]),  # its output
        ("mul", 128, []),  # by a constant: nothing
        ("exp", 128, ["%3"]),  # its output
        ("sum", 4, []),
    ]


def test_static_profiles_equal_the_measured_ones_and_plans_agree():
    layers, x = mlp()
    measured = profile(layers, x)
    graphs = mg.jit.trace_stages(layers, x)
    static = [mg.jit.static_profile(g) for g in graphs]
    for m, s in zip(measured, static):
        assert (m.kept, m.out, m.grads) == (s.kept, s.out, s.grads)
    for segments in (1, 3, 6, 12):
        bounds = segment_bounds(12, segments)
        assert predict(measured, bounds)[0] == predict(static, bounds)[0]
    budget = int(0.5 * predict(measured, [(0, 12)])[0])
    assert plan(graphs, None, budget_bytes=budget).predicted_peak <= budget


def test_saved_report_of_a_graph_matches_the_run():
    w = mg.ones(8, 8, requires_grad=True)

    def model(x):
        h = (x @ w).tanh()
        h = checkpoint(lambda z: (z @ w).relu() * 2.0, h)
        return (h * h).sum()

    x = mg.ones(4, 8)
    run = mg.memory.saved_report(model, x)
    static = mg.memory.saved_report(mg.jit.trace(model, x))
    assert (run.kept_bytes, run.recomputed_bytes) == (static.kept_bytes, static.recomputed_bytes)
    assert list(run.by_region().values()) == list(static.by_region().values())
    assert [e.op for e in run.entries] == [e.op for e in static.entries]
    assert static.entries[0].source == "%0 = matmul %x, %w"


def test_static_profiles_of_the_builtin_workloads_match_the_measured_ones():
    from memgrad import models

    sizes = {
        "mlp": dict(depth=4, width=64, batch=16),
        "transformer": dict(blocks=2, d_model=32, heads=4, seq=16, batch=2, vocab=40),
        "convnet": dict(layers=3, channels=4, size=8, batch=2),
    }
    for name, kw in sizes.items():
        model, x, _ = models.BUILTIN[name](**kw)
        stages = list(model)
        measured = profile(stages, x)
        static = [mg.jit.static_profile(g) for g in mg.jit.trace_stages(stages, x)]
        for m, s in zip(measured, static):
            assert (m.out, m.grads) == (s.out, s.grads)
            # the one difference: an index made inside a stage by a factory (the positions
            # of the embedding) is a constant to the trace, so it is not counted
            assert abs(m.kept - s.kept) <= 0.05 * m.kept
        bounds = segment_bounds(len(stages), 2)
        assert abs(predict(measured, bounds)[0] - predict(static, bounds)[0]) <= 0.05 * predict(
            measured, bounds
        )[0]


def _fields(p):
    return (p.kept, p.out, p.grads, p.grad_transient)


def test_measured_and_static_profiles_of_a_linear_agree_with_and_without_grads():
    layer = mg.nn.Linear(256, 256)
    x = mg.randn(64, 256)
    for grads in ("none", "existing"):
        for p in layer.parameters():
            p.grad = mg.zeros(*p.shape) if grads == "existing" else None
        measured = profile([layer], x)[0]
        static = mg.jit.static_profile(mg.jit.trace_stages([layer], x)[0])
        assert _fields(measured) == _fields(static), grads
        if grads == "none":  # every gradient is new: weight and bias
            assert (measured.grads, measured.grad_transient) == (256 * 256 * 4 + 256 * 4, 0)
        else:  # the weight's is added in place in 1 MiB blocks, the bias's made whole
            assert (measured.grads, measured.grad_transient) == (0, 256 * 256 * 4)


def test_measured_and_static_profiles_of_w1_to_w3_stages_agree():
    from memgrad.models import BUILTIN

    sizes = {
        "mlp": dict(depth=3, width=512, batch=8),
        "transformer": dict(blocks=2, d_model=32, heads=4, seq=16, batch=2, vocab=40),
        "convnet": dict(layers=3, channels=4, size=8, batch=2),
    }
    for name, kw in sizes.items():
        model, x, _ = BUILTIN[name](**kw)
        stages = list(model)
        for in_place in (False, True):
            model.zero_grad(set_to_none=not in_place)
            if in_place:
                for p in model.parameters():
                    p.grad = mg.zeros(*p.shape)
            measured = profile(stages, x)
            static = [mg.jit.static_profile(g) for g in mg.jit.trace_stages(stages, x)]
            for m, s in zip(measured, static):
                assert (m.out, m.grads, m.grad_transient) == (s.out, s.grads, s.grad_transient)
