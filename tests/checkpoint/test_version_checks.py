"""Checkpointed code raises where eager code raises (NOTE [ Recompute rules ] point 5): what a
checkpoint keeps, the forward tensors its placeholders stand for and what its recomputation
reads are version-checked; where eager code would still compute a gradient but the
recomputation would read a changed value, a CheckpointError says so. Never a different
gradient. Each case runs the same code eagerly as the reference."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.checkpoint import checkpoint, policy

INPLACE = "modified by an inplace operation"


def _leaf(*shape, seed=0):
    return mg.tensor(np.random.default_rng(seed).standard_normal(shape), requires_grad=True)


def _region(fn, ck, **kw):
    """``fn`` itself, or checkpointed with ``kw``."""
    return (lambda *a: checkpoint(fn, *a, **kw)) if ck else fn


VARIANTS = [None, {"use_reentrant": False}, {"use_reentrant": True},
            {"use_reentrant": False, "policy": policy.save_all}]
IDS = ["eager", "non-reentrant", "reentrant", "policy-all"]


@pytest.mark.parametrize("kw", VARIANTS, ids=IDS)
def test_an_argument_changed_in_place_after_forward_raises_as_in_eager(kw):
    x, w = _leaf(2, 3), _leaf(3, 3, seed=1)
    h = x * 1.0
    y = _region(lambda a: a @ w, kw is not None, **(kw or {}))(h)
    h.mul_(10)
    with pytest.raises(RuntimeError, match=INPLACE + "|changed in place"):
        y.sum().backward()


@pytest.mark.parametrize("kw", VARIANTS, ids=IDS)
def test_a_parameter_changed_between_forward_and_backward_raises_as_in_eager(kw):
    x, w = _leaf(2, 3), _leaf(3, 3, seed=1)
    y = _region(lambda a: (a @ w).tanh(), kw is not None, **(kw or {}))(x)
    with mg.no_grad():
        w.sub_(0.1)  # an optimizer step before backward
    with pytest.raises(RuntimeError, match=INPLACE + "|changed in place"):
        y.sum().backward()


@pytest.mark.parametrize("ck", [False, True], ids=["eager", "checkpoint"])
def test_a_saved_output_of_the_region_changed_in_place_raises_as_in_eager(ck):
    x = _leaf(3)
    y = _region(lambda a: a.exp(), ck)(x)  # exp saves its output: y itself
    with mg.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


@pytest.mark.parametrize("ck", [False, True], ids=["eager", "checkpoint"])
def test_an_output_the_policy_kept_changed_in_place_raises_as_in_eager(ck):
    x, w = _leaf(2, 3), _leaf(3, 3, seed=1)
    kept = {}

    def f(a):
        kept["e"] = (a @ w).exp()
        return kept["e"] * 2.0

    y = checkpoint(f, x, policy=policy.save_only("exp")) if ck else f(x)
    with mg.no_grad():
        kept["e"].add_(1)
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_a_closure_changed_after_forward_is_an_error_not_a_wrong_gradient(use_reentrant):
    x = _leaf(3)
    c = mg.tensor([1.0, 2.0, 3.0], dtype=mg.float64)
    eager = (x + c).exp()  # add saves nothing: eager code does not notice a change to c
    eager.sum().backward()
    want = x.grad.numpy().copy()
    x.grad = None
    y = checkpoint(lambda a: (a + c).exp(), x, use_reentrant=use_reentrant)
    c.mul_(10)
    with pytest.raises(mg.CheckpointError, match=r"op 0 \(add\) .*changed in place since the "
                                                 r"forward pass \(version 0 -> 1\)"):
        y.sum().backward()
    c.div_(10)
    y = checkpoint(lambda a: (a + c).exp(), x, use_reentrant=use_reentrant)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_a_change_the_early_stopped_recomputation_does_not_read_is_harmless():
    x, w = _leaf(2, 3), _leaf(3, 3, seed=1)
    late = mg.tensor(2.0, dtype=mg.float64)

    def f(a):
        h = (a @ w).tanh()
        return h.sum() + late  # add saves nothing and comes after every save
    y = checkpoint(f, x)
    late.add_(1)
    y.backward()
    ref_x, ref_w = _leaf(2, 3), _leaf(3, 3, seed=1)
    (ref_x @ ref_w).tanh().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref_x.grad.numpy())
    np.testing.assert_array_equal(w.grad.numpy(), ref_w.grad.numpy())


@pytest.mark.parametrize("ck", [False, True], ids=["eager", "checkpoint"])
def test_an_in_place_change_of_a_saved_tensor_inside_the_region_raises_as_in_eager(ck):
    x, w = _leaf(2, 3), _leaf(3, 3, seed=1)

    def f(a):
        e = (a @ w).exp()
        out = e * w[0]
        e.mul_(2)  # e was saved by exp and by mul: eager backward refuses
        return out

    y = _region(f, ck)(x)
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


def test_a_function_changing_its_own_input_in_place_is_refused_on_recomputation():
    x = _leaf(3)

    def f(a):
        a.mul_(2)  # runs again on recomputation: the input would be doubled twice
        return a.exp()

    y = checkpoint(f, x * 1.0)
    with pytest.raises(RuntimeError, match=INPLACE + "|changed in place"):
        y.sum().backward()


# ---------------------------------------------------------------------------- reentrant


def test_reentrant_determinism_check_catches_another_path_with_the_same_shapes():
    x, w = _leaf(3, 3), _leaf(3, 3, seed=1)
    calls = [0]

    def f(a):
        calls[0] += 1
        return (a.tanh() if calls[0] > 1 else a) @ w

    y = checkpoint(f, x, use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match="op 0 of the recomputation is tanh, but in the "
                                                 "forward pass op 0 is matmul"):
        y.sum().backward()
    calls[0] = 0
    y = checkpoint(f, x, use_reentrant=True, debug=True)
    with pytest.raises(mg.CheckpointError, match=r"original forward:\n  \[.matmul.\]"):
        y.sum().backward()


def test_reentrant_determinism_check_catches_other_shapes_and_counts():
    x, w = _leaf(3, 3), _leaf(3, 3, seed=1)
    state = {"n": 3}

    def f(a):
        n = state["n"]
        state["n"] = 2
        return (a[:, :n] @ w[:n]).sum() * 1.0

    y = checkpoint(f, x, use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match=r"op 0 \(getitem\) has an output of shape "
                                                 r"\(3, 2\).*shape \(3, 3\)"):
        y.backward()
    calls = [0]

    def g(a):
        calls[0] += 1
        y = a.exp()
        return y.sum() if calls[0] > 1 else y.exp().sum()

    y = checkpoint(g, x, use_reentrant=True)
    with pytest.raises(mg.CheckpointError, match="op 1 of the recomputation is sum"):
        y.backward()


def test_reentrant_determinism_check_none_skips_it():
    x, w = _leaf(3, 3), _leaf(3, 3, seed=1)
    calls = [0]

    def f(a):
        calls[0] += 1
        return (a.tanh() if calls[0] > 1 else a) @ w

    y = checkpoint(f, x, use_reentrant=True, determinism_check="none")
    y.sum().backward()  # the user said the function is deterministic: its gradient is taken
    ref = _leaf(3, 3)
    (ref.tanh() @ w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref.grad.numpy())


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_an_index_tensor_changed_after_forward_is_an_error_not_a_wrong_gradient(use_reentrant):
    x = _leaf(3)
    idx = mg.tensor([1])
    y = checkpoint(lambda a, i: (a + 1.5)[i].tanh(), x, idx, use_reentrant=use_reentrant)
    with mg.no_grad():
        idx.fill_(0)
    with pytest.raises(mg.CheckpointError, match="changed in place"):
        y.sum().backward()
    y = checkpoint(lambda a: (a + 1.5)[idx].tanh(), x, use_reentrant=use_reentrant)  # a closure
    with mg.no_grad():
        idx.fill_(1)
    with pytest.raises(mg.CheckpointError, match=r"op 1 \(getitem\) .*indexes with an index "
                                                 "tensor that was changed in place"):
        y.sum().backward()


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_a_write_with_no_gradient_reading_a_changed_index_is_refused(use_reentrant):
    # the write records no op (nothing it touches requires grad), but what it wrote feeds
    # the gradient: recomputing it with the changed index would give another gradient
    x = mg.tensor(0.5, dtype=mg.float64, requires_grad=True)
    i = mg.tensor([0])

    def region(t):
        c = mg.zeros(2, dtype=mg.float64)
        c[i] = 5.0
        return (c * t * mg.tensor([1.0, 2.0], dtype=mg.float64)).sum()

    y = checkpoint(region, x, use_reentrant=use_reentrant)
    i.fill_(1)
    with pytest.raises(mg.CheckpointError, match="in-place index_put_ of the checkpointed "
                                                 "function indexes with an index tensor that "
                                                 "was changed"):
        y.backward()


@pytest.mark.parametrize("kw", [
    {"use_reentrant": True},
    {"use_reentrant": False, "early_stop": False},
    {"use_reentrant": False, "early_stop": False,
     "policy": policy.negate(policy.save_matmuls)},
], ids=["reentrant", "non-reentrant", "selective"])
def test_a_closure_view_refreshed_in_forward_only_recomputes_the_same_ops(kw):
    # the view is taken before its base is filled with a graph, so the forward's first read
    # replays its view op on the base; the recomputation finds it up to date: the replay must
    # not count as an op of the region (else op numbers shift and kept outputs mismatch)
    def step(ck):
        x = mg.tensor([0.3, -0.9, -0.1], dtype=mg.float64, requires_grad=True)
        buf = mg.zeros(4, dtype=mg.float64)
        view = buf.view(4)
        buf[0] = x[0] * 2.0
        buf[1:] = x

        def region(b, c):
            m = mg.maximum(b, c)
            return m * mg.nn.functional.rms_norm(view, (4,), None)

        out = ck(region, buf, x[2]) if ck else region(buf, x[2])
        (out * mg.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
        return x.grad.numpy()

    plain = step(None)
    got = step(lambda f, *a: checkpoint(f, *a, **kw))
    # the reentrant form sums the region's gradients in its own backward: another order
    np.testing.assert_allclose(got, plain, rtol=1e-14 if kw["use_reentrant"] else 0, atol=0)
