"""Tests generated from the op table: every primitive in ``memgrad.ops.REGISTRY`` is covered
by the samples of ``tests/helpers/op_samples.py`` (a new primitive without samples fails
here), every differentiable one passes gradcheck and gradgradcheck in float64, and every
sample's forward value matches its plain NumPy formulation."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
from memgrad.ops import REGISTRY
from tests.helpers.op_samples import NONDIFF_SAMPLES, SAMPLES, Case, all_cases, nondiff_cases

CASES = all_cases()
ND_CASES = nondiff_cases()


def _ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]


def _nodes(out: mg.Tensor):
    """Every backward node reachable from ``out``."""
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(n for n, _ in node.next_functions)


# ---------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_primitive_has_samples(name):
    prim = REGISTRY[name]
    if prim.differentiable:
        assert SAMPLES.get(name), (
            f"differentiable primitive {name!r} has no samples: add cases for it to "
            "tests/helpers/op_samples.py (SAMPLES) so that it is gradchecked"
        )
        assert name not in NONDIFF_SAMPLES
    else:
        assert NONDIFF_SAMPLES.get(name), (
            f"non-differentiable primitive {name!r} has no samples: add value cases for it to "
            "tests/helpers/op_samples.py (NONDIFF_SAMPLES)"
        )
        assert name not in SAMPLES, f"{name!r} is not differentiable; list it in NONDIFF_SAMPLES"


def test_samples_name_registered_primitives():
    stale = sorted((set(SAMPLES) | set(NONDIFF_SAMPLES)) - set(REGISTRY))
    assert not stale, f"samples for primitives that are not in the op table: {stale}"


def test_case_ids_are_unique():
    ids = _ids(CASES + ND_CASES)
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_sample_records_its_primitive(case):
    """The sample really runs the primitive it is listed under, and records it."""
    inputs = case.inputs()
    out = case.fn(*inputs)
    assert out.requires_grad and out.grad_fn is not None
    prim = REGISTRY[case.op]
    names = [getattr(n, "prim", None) for n in _nodes(out)]
    assert prim in names, f"{case.id}: no {prim.node_name} in the graph ({names})"
    for t in inputs:
        assert t.dtype == np.float64 and t.requires_grad


# ---------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_gradcheck(case):
    assert mg.autograd.gradcheck(case.fn, case.inputs(), **case.check)


@pytest.mark.parametrize("case", [c for c in CASES if c.second_order],
                         ids=_ids([c for c in CASES if c.second_order]))
def test_gradgradcheck(case):
    assert mg.autograd.gradgradcheck(case.fn, case.inputs(), **case.check)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_backward_gives_each_input_a_gradient_of_its_shape_and_dtype(case):
    inputs = case.inputs()
    out = case.fn(*inputs)
    out.backward(mg.ones_like(out))
    for i, t in enumerate(inputs):
        # fill and copy overwrite their first input: its gradient is zero and left as None
        if t.grad is None:
            assert (case.op, i) in {("fill", 0), ("copy", 0)}, f"input {i} got no gradient"
            continue
        assert t.grad.shape == t.shape
        assert t.grad.dtype == t.dtype


# ---------------------------------------------------------------------------- values


@pytest.mark.parametrize("case", [c for c in CASES if c.ref is not None],
                         ids=_ids([c for c in CASES if c.ref is not None]))
def test_forward_matches_numpy(case):
    out = case.fn(*case.inputs())
    expected = np.asarray(case.ref(*case.arrays()))
    assert out.shape == expected.shape
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_forward_under_no_grad_records_nothing(case):
    inputs = case.inputs()
    with mg.no_grad():
        out = case.fn(*inputs)
    assert out.grad_fn is None and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), case.fn(*inputs).numpy())


@pytest.mark.parametrize("case", ND_CASES, ids=_ids(ND_CASES))
def test_nondifferentiable_values(case):
    inputs = case.inputs()
    out = case.fn(*inputs)
    expected = np.asarray(case.ref(*case.arrays()))
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_array_equal(out.numpy(), expected)
    assert not out.requires_grad and out.grad_fn is None
