"""The fused self-attention of ``nn.MultiheadSelfAttention`` (NOTE [ Fused self-attention ] in
memgrad/ops/nn.py): one op forward and one backward, against a float64 NumPy formulation,
what it saves and when the module takes it (its products as jobs: tests/ops/test_handoff.py)."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn
from memgrad.errors import ShapeError
from memgrad.ops.nn import self_attention, self_attention_backward
from tests.helpers.op_samples import _np_self_attention, _np_self_attention_backward


def _reference(qkv: np.ndarray, g: np.ndarray, heads: int, causal: bool,
               scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Attention and its gradient for ``g``, in float64, by the definition."""
    qkv, g = qkv.astype(np.float64), g.astype(np.float64)
    return (_np_self_attention(qkv, heads, causal, scale),
            _np_self_attention_backward(g, qkv, heads, causal, scale))


def _nodes(out: mg.Tensor) -> list:
    seen, stack, found = set(), [out.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(n for n, _ in node.next_functions)
    return found


@pytest.mark.parametrize("causal", [True, False])
def test_values_and_gradient_match_the_definition(causal):
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((4, 70, 3 * 32)).astype(np.float32)
    g = rng.standard_normal((4, 70, 32)).astype(np.float32)
    x = mg.tensor(qkv, requires_grad=True)
    out = self_attention(x, heads=4, causal=causal, scale=0.3)
    out.backward(mg.tensor(g))
    want, want_grad = _reference(qkv, g, 4, causal, 0.3)
    assert out.dtype == np.float32 and x.grad.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(x.grad.numpy(), want_grad, rtol=2e-4, atol=2e-5)


def test_module_attends_in_one_op_that_saves_only_qkv():
    attn = nn.MultiheadSelfAttention(16, 4, causal=True)
    x = mg.randn(2, 9, 16, requires_grad=True)
    out = attn(x)
    fused = [n for n in _nodes(out) if getattr(n, "prim", None) is mg.ops.REGISTRY[
        "self_attention"]]
    assert len(fused) == 1
    (saved,) = fused[0]._saved  # the stacked projection, (N, T, 3E): no weights, no scores
    assert saved.shape == (2, 9, 48)
    assert fused[0]._out_saved is None
    names = {n.name() for n in _nodes(out)}
    assert not names & {"CausalMatmulBackward", "AttentionSoftmaxBackward",
                        "LinearRowsBackward"}


def test_module_with_dropout_trains_through_the_composite_and_evaluates_fused():
    attn = nn.MultiheadSelfAttention(8, 2, dropout=0.5, causal=True)
    x = mg.randn(2, 5, 8, requires_grad=True)
    names = {n.name() for n in _nodes(attn(x))}
    assert "SelfAttentionBackward" not in names and "LinearRowsBackward" in names
    attn.eval()
    assert "SelfAttentionBackward" in {n.name() for n in _nodes(attn(x))}


def test_module_matches_the_composite_formulation():
    # the fused op against scaled_dot_product_attention over the same projections
    attn = nn.MultiheadSelfAttention(16, 4, causal=True).double()
    x = mg.randn(3, 11, 16, dtype=mg.float64, requires_grad=True)
    out = attn(x)
    (gx,) = mg.autograd.grad(out.sum(), x)
    x2 = x.detach().requires_grad_()
    qkv = attn.qkv(x2)
    q, k, v = (t.reshape(3, 11, 4, 4).transpose(1, 2) for t in qkv.chunk(3, -1))
    y = mg.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = attn.out_proj(y.transpose(1, 2).reshape(3, 11, 16))
    (gx2,) = mg.autograd.grad(ref.sum(), x2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gx.numpy(), gx2.numpy(), rtol=1e-11, atol=1e-12)


def test_double_backward_through_the_module():
    attn = nn.MultiheadSelfAttention(4, 2, causal=True).double()
    x = mg.randn(2, 3, 4, dtype=mg.float64, requires_grad=True)
    assert mg.autograd.gradgradcheck(lambda t: attn(t), (x,))


@pytest.mark.parametrize("call, message", [
    (lambda: self_attention(mg.ones(2, 5, 12), heads=5, causal=True, scale=1.0),
     r"self_attention: .*E divisible by heads=5, got shape \(2, 5, 12\)"),
    (lambda: self_attention(mg.ones(5, 12), heads=1, causal=True, scale=1.0),
     r"self_attention: .*\(N, T, 3 \* E\)"),
    (lambda: self_attention(mg.ones(2, 5, 12), heads=0, causal=False, scale=1.0),
     r"self_attention: heads must be a positive int, got 0"),
    (lambda: self_attention_backward(mg.ones(2, 5, 3), mg.ones(2, 5, 12), heads=2,
                                     causal=True, scale=1.0),
     r"self_attention_backward: .*expected g of shape \(2, 5, 4\)"),
])
def test_bad_input_is_refused_with_what_fits(call, message):
    with pytest.raises((ShapeError, ValueError), match=message):
        call()


@pytest.mark.parametrize("shape", [(2, 0, 12), (0, 5, 12)])
def test_empty_batches_and_sequences(shape):
    x = mg.zeros(*shape, requires_grad=True)
    out = self_attention(x, heads=2, causal=True, scale=0.5)
    out.sum().backward()
    assert out.shape == shape[:2] + (4,) and x.grad.shape == shape
    q = mg.zeros(shape[0], shape[1], 4, requires_grad=True)  # the separate ops, likewise
    mg.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    assert q.grad.shape == q.shape


def test_a_single_position_attends_to_itself():
    qkv = mg.randn(3, 1, 12, requires_grad=True)
    out = self_attention(qkv, heads=2, causal=True, scale=0.5)
    np.testing.assert_array_equal(out.numpy(), qkv.numpy()[..., 8:])
    out.backward(mg.ones(3, 1, 4))
    np.testing.assert_array_equal(x_grad := qkv.grad.numpy(), np.concatenate(
        [np.zeros((3, 1, 8), np.float32), np.ones((3, 1, 4), np.float32)], -1))
    assert x_grad.dtype == np.float32


def test_other_dtypes_are_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"self_attention: expected a float32 or float64 qkv, "
                                        r"got dtype float16; convert it first"):
        self_attention(mg.ones(1, 3, 6, dtype=mg.float16), heads=1, causal=True, scale=1.0)
