"""Selective checkpointing as PyTorch spells it (context_fn,
create_selective_checkpoint_contexts, CheckpointPolicy) and as memgrad does (policy=): one
mechanism, the gradients of plain training, PyTorch's errors."""

import contextlib
import functools

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import interpreters
from memgrad.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    policy,
)
from memgrad.interpreters import Interpreter


def leaf(*shape, seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape) * 0.5, requires_grad=True)


W = leaf(6, 6, seed=1)
B = leaf(6, seed=2)


def block(h):
    z = F.linear(h, W, B)
    return (z.tanh() @ W).exp()


def sac(policy_fn, **kw):
    return functools.partial(create_selective_checkpoint_contexts, policy_fn, **kw)


class RunCount(Interpreter):
    """Counts the ops that actually run, by name."""

    def __init__(self):
        self.names = []

    def process(self, prim, args, params, call_next):
        self.names.append(prim.name)
        return call_next(prim, args, params)


def grads(fn, x):
    for t in (W, B, x):
        t.grad = None
    fn(x).sum().backward()
    return [t.grad.numpy().copy() for t in (W, B, x) if t.grad is not None]


def backward_ops(fn, x):
    out = fn(x).sum()
    count = RunCount()
    with interpreters.push(count):
        out.backward()
    return count.names


def test_handles_cover_the_op_table():
    assert set(mg.ops.HANDLES) == set(mg.ops.REGISTRY)
    for name, h in mg.ops.HANDLES.items():
        assert getattr(mg.ops, name) is h
    assert mg.ops.HANDLES["matmul"] is mg.ops.matmul
    assert mg.ops.HANDLES["linear"] is mg.ops.REGISTRY["linear"]


def test_the_policy_sees_each_op_with_its_arguments():
    seen = []

    def pol(ctx, op, *args, **params):
        seen.append((ctx.is_recompute, op, len(args)))
        return CheckpointPolicy.PREFER_RECOMPUTE

    x = leaf(3, 6, seed=3)
    checkpoint(block, x, context_fn=sac(pol)).sum().backward()
    forward = [op for rec, op, _ in seen if not rec]
    assert forward == [mg.ops.linear, mg.ops.tanh, mg.ops.matmul, mg.ops.exp]
    assert (False, mg.ops.linear, 3) in seen
    assert any(rec for rec, _, _ in seen)


@pytest.mark.parametrize("spelling", ["list", "function", "bool", "policy="])
def test_saving_the_matmuls_saves_their_work_not_the_gradients(spelling):
    x = leaf(3, 6, seed=4)
    ref = grads(block, x)
    keep = {"linear", "matmul"}

    def fn_policy(ctx, op, *args, **params):
        name = next(n for n, h in mg.ops.HANDLES.items() if h is op)
        if spelling == "bool":
            return name in keep
        return CheckpointPolicy.MUST_SAVE if name in keep else CheckpointPolicy.PREFER_RECOMPUTE

    kw = {
        "list": {"context_fn": sac([mg.ops.linear, mg.ops.matmul])},
        "function": {"context_fn": sac(fn_policy)},
        "bool": {"context_fn": sac(fn_policy)},
        "policy=": {"policy": policy.save_only("linear", "matmul")},
    }[spelling]
    got = grads(lambda h: checkpoint(block, h, **kw), x)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    ran = backward_ops(lambda h: checkpoint(block, h, **kw), x)
    assert "tanh" in ran and "linear" not in ran and "matmul" not in ran[: ran.index("tanh")]
    plain = backward_ops(lambda h: checkpoint(block, h), x)
    assert "linear" in plain


def test_a_stateful_policy_is_asked_again_in_the_recomputation():
    counters = []

    class Counting:
        def __init__(self):
            self.forward, self.recompute = [0], [0]

        def __call__(self, ctx, op, *args, **params):
            c = self.recompute if ctx.is_recompute else self.forward
            c[0] += 1
            counters.append(c[0])
            return CheckpointPolicy.PREFER_RECOMPUTE

    def squares(t):
        a = t * t
        b = a * a
        return b * b

    x = leaf(4, seed=5)
    out = checkpoint(squares, x, context_fn=sac(Counting()))
    out.sum().backward()
    # forward: three muls; recomputation: the last op saves only its inputs, which are the
    # last dropped values, so it stops before asking the policy about it
    assert counters == [1, 2, 3, 1, 2]
    np.testing.assert_allclose(x.grad.numpy(), 8 * x.numpy() ** 7, rtol=1e-12)


def test_a_saved_output_changed_in_place_is_refused_unless_allowed():
    x = leaf(3, 6, seed=6)

    def mutating(h):
        y = h @ W
        y.mul_(2.0)
        return y.tanh()

    ref = grads(mutating, x)
    keep = sac([mg.ops.matmul])
    out = checkpoint(mutating, x, context_fn=keep)
    with pytest.raises(RuntimeError, match="Tensor cached during selective activation "
                                           "checkpoint has been mutated"):
        out.sum().backward()
    for spelling in ({"context_fn": sac([mg.ops.matmul], allow_cache_entry_mutation=True)},
                     {"policy": policy.save_only("matmul")}):
        got = grads(lambda h, kw=spelling: checkpoint(mutating, h, **kw), x)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_a_second_backward_under_sac_is_refused_policy_runs_the_op_again():
    x = leaf(3, 6, seed=7)
    out = checkpoint(block, x, context_fn=sac([mg.ops.matmul])).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="Trying to backward an extra time"):
        out.backward()
    W.grad = None
    out = checkpoint(block, x, policy=policy.save_only("matmul")).sum()
    out.backward(retain_graph=True)
    first = W.grad.numpy().copy()
    out.backward()
    np.testing.assert_allclose(W.grad.numpy(), 2 * first, rtol=1e-12)


def test_a_policy_that_saves_more_in_the_recomputation_is_refused():
    def flips(ctx, op, *args, **params):
        return ctx.is_recompute and op is mg.ops.tanh

    out = checkpoint(block, leaf(3, 6, seed=8), context_fn=sac(flips))
    with pytest.raises(mg.CheckpointError, match="did not save in the forward pass"):
        out.sum().backward()


def test_bad_policies():
    with pytest.raises(ValueError, match="Expected op in `op_list` to be an op handle"):
        create_selective_checkpoint_contexts([mg.ops.matmul, 2])
    with pytest.raises(ValueError, match=r"for linear, pass mg.ops.linear"):
        create_selective_checkpoint_contexts([F.linear])
    with pytest.raises(TypeError, match="either a function or a list of ops"):
        create_selective_checkpoint_contexts("matmul")
    with pytest.raises(TypeError, match="must return a CheckpointPolicy"):
        checkpoint(block, leaf(3, 6), context_fn=sac(lambda ctx, op, *a, **k: "save"))


def test_context_fn_contexts_wrap_the_forward_and_the_recomputation():
    events = []

    @contextlib.contextmanager
    def note(name):
        events.append(name + " in")
        yield
        events.append(name + " out")

    x = leaf(3, 6, seed=9)
    out = checkpoint(block, x, context_fn=lambda: (note("forward"), note("recompute")))
    assert events == ["forward in", "forward out"]
    out.sum().backward()
    assert events == ["forward in", "forward out", "recompute in", "recompute out"]


def test_context_fn_misuse():
    x = leaf(3, 6)
    with pytest.raises(ValueError, match="context_fn` is only supported when "
                                         "use_reentrant=False"):
        checkpoint(block, x, use_reentrant=True, context_fn=sac([mg.ops.matmul]))
    with pytest.raises(ValueError, match="debug=True is incompatible with non-default "
                                         "context_fn"):
        checkpoint(block, x, debug=True, context_fn=sac([mg.ops.matmul]))
    with pytest.raises(ValueError, match="either policy= or context_fn="):
        checkpoint(block, x, policy=policy.save_all, context_fn=sac([mg.ops.matmul]))
    with pytest.raises(TypeError, match="tuple of two context managers"):
        checkpoint(block, x, context_fn=lambda: contextlib.nullcontext())

    class Swallow:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return True

    def fails(h):
        raise ValueError("inside")

    with pytest.raises(RuntimeError, match="suppressed an exception raised during the "
                                           "checkpointed forward"):
        checkpoint(fails, x, context_fn=lambda: (Swallow(), contextlib.nullcontext()))


def test_a_plan_is_a_context_fn_with_plain_gradients():
    from memgrad.checkpoint import plan

    rng = np.random.default_rng(12)
    model = mg.nn.Sequential(mg.nn.Linear(6, 16), mg.nn.Tanh(), mg.nn.Linear(16, 16),
                             mg.nn.GELU(), mg.nn.Linear(16, 6))
    x = mg.tensor(rng.standard_normal((5, 6)))
    p = plan(model, x)
    kept = [k for k in range(len(p.layout.ops)) if p.keeps(k)]
    assert kept  # with no budget the plan keeps outputs (the least peak is not all-recompute)

    def run(fn):
        model.zero_grad()
        fn(x).sum().backward()
        return [q.grad.numpy().copy() for q in model.parameters()]

    ref = run(model)
    got = run(lambda h: checkpoint(model, h, context_fn=p))
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    with_plan = backward_ops(lambda h: checkpoint(model, h, context_fn=p), x)
    without = backward_ops(lambda h: checkpoint(model, h), x)
    assert len(with_plan) < len(without)  # the kept outputs are not recomputed
