"""MultiheadAttention, TransformerEncoderLayer and TransformerEncoder against a NumPy
formulation of PyTorch's definitions (masks, shapes, kdim/vdim, batch_first, unbatched),
gradcheck, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn
from memgrad.autograd import gradcheck
from memgrad.errors import ShapeError


def _np_softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_mha(m, q, k, v, attn_mask=None, key_padding_mask=None):
    """(L, N, E) inputs; returns the output and the per-head weights (N, H, L, S)."""
    p = {name: t.detach().numpy() for name, t in m.named_parameters()}
    e, h = m.embed_dim, m.num_heads
    d = e // h
    if "in_proj_weight" in p:
        wq, wk, wv = np.split(p["in_proj_weight"], 3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq, bk, bv = np.split(p["in_proj_bias"], 3)
    length, n, _ = q.shape
    source = k.shape[0]

    def heads(x, w, b, size):
        return (x @ w.T + b).reshape(size, n, h, d).transpose(1, 2, 0, 3)  # (N, H, len, d)

    qh, kh, vh = heads(q, wq, bq, length), heads(k, wk, bk, source), heads(v, wv, bv, source)
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(d)
    if attn_mask is not None:
        scores = np.where(attn_mask, -np.inf, scores) if attn_mask.dtype == bool else (
            scores + attn_mask)
    if key_padding_mask is not None:
        scores = np.where(key_padding_mask[:, None, None, :], -np.inf, scores)
    w = _np_softmax(scores)
    out = (w @ vh).transpose(2, 0, 1, 3).reshape(length, n, e)
    return out @ p["out_proj.weight"].T + p["out_proj.bias"], w


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_matches_numpy_with_both_masks(batch_first, need_weights):
    mg.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    q, k, v = _rand(5, 3, 8), _rand(7, 3, 8, seed=1), _rand(7, 3, 8, seed=2)
    am = np.triu(np.ones((5, 7), bool), 1)
    kp = np.zeros((3, 7), bool)
    kp[1, -2:] = True
    want, want_w = _np_mha(m, q, k, v, am, kp)
    args = [mg.tensor(a.transpose(1, 0, 2) if batch_first else a) for a in (q, k, v)]
    out, w = m(*args, attn_mask=mg.tensor(am), key_padding_mask=mg.tensor(kp),
               need_weights=need_weights)
    got = out.numpy().transpose(1, 0, 2) if batch_first else out.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if need_weights:
        np.testing.assert_allclose(w.numpy(), want_w.mean(1), rtol=1e-10, atol=1e-12)
    else:
        assert w is None


def test_multihead_attention_float_mask_per_head_weights_kdim_vdim_unbatched():
    mg.manual_seed(1)
    m = nn.MultiheadAttention(8, 4, kdim=6, vdim=5).double()
    assert {"q_proj_weight", "k_proj_weight", "v_proj_weight"} <= set(
        dict(m.named_parameters()))
    q, k, v = _rand(4, 2, 8), _rand(3, 2, 6, seed=1), _rand(3, 2, 5, seed=2)
    fm = _rand(8, 4, 3, seed=3)  # (N*H, L, S), added
    want, want_w = _np_mha(m, q, k, v, fm.reshape(2, 4, 4, 3))
    out, w = m(*(mg.tensor(a) for a in (q, k, v)), attn_mask=mg.tensor(fm),
               average_attn_weights=False)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-10, atol=1e-12)
    single = nn.MultiheadAttention(8, 2).double()
    x = _rand(5, 8)
    want1, want1_w = _np_mha(single, x[:, None], x[:, None], x[:, None])
    out1, w1 = single(mg.tensor(x), mg.tensor(x), mg.tensor(x))
    assert out1.shape == (5, 8) and w1.shape == (5, 5)
    np.testing.assert_allclose(out1.numpy(), want1[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w1.numpy(), want1_w[0].mean(0), rtol=1e-10, atol=1e-12)


def test_multihead_attention_gradients():
    mg.manual_seed(2)
    m = nn.MultiheadAttention(4, 2, batch_first=True).double()
    q = mg.tensor(_rand(2, 3, 4), requires_grad=True)
    kv = mg.tensor(_rand(2, 5, 4, seed=1), requires_grad=True)
    mask = mg.tensor(np.triu(np.ones((3, 5), bool), 3))
    assert gradcheck(lambda a, b: m(a, b, b, attn_mask=mask)[0], [q, kv])
    # the parameters' gradients against central differences, a few entries of each
    m(q, kv, kv, need_weights=False)[0].sum().backward()
    rng = np.random.default_rng(0)
    for name, p in m.named_parameters():
        data = p.numpy()
        for flat in rng.choice(data.size, 3, replace=False):
            at = np.unravel_index(flat, data.shape)
            keep = data[at]
            losses = []
            for step in (1e-6, -1e-6):
                data[at] = keep + step
                with mg.no_grad():
                    losses.append(m(q, kv, kv, need_weights=False)[0].sum().item())
            data[at] = keep
            assert p.grad.numpy()[at] == pytest.approx((losses[0] - losses[1]) / 2e-6,
                                                       rel=1e-5, abs=1e-8), name


def test_initialisation_is_pytorchs():
    mg.manual_seed(0)
    m = nn.MultiheadAttention(64, 4)
    w = m.in_proj_weight.numpy()
    bound = np.sqrt(6.0 / (64 + 3 * 64))  # xavier_uniform over the (3E, E) matrix
    assert w.shape == (192, 64) and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert not m.in_proj_bias.numpy().any() and not m.out_proj.bias.numpy().any()


def test_multihead_attention_errors():
    with pytest.raises(ValueError, match="embed_dim \\(10\\) must be divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)
    m = nn.MultiheadAttention(8, 2)
    x = mg.randn(5, 3, 8)
    with pytest.raises(ShapeError, match="key must have shape \\(L, N, E\\) with last size 8"):
        m(x, mg.randn(5, 3, 6), x)
    with pytest.raises(RuntimeError, match="is_causal=True is a hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(ShapeError, match="attn_mask must have shape \\(5, 5\\)"):
        m(x, x, x, attn_mask=mg.zeros(4, 4))
    with pytest.raises(ShapeError, match="key_padding_mask must have shape \\(3, 5\\)"):
        m(x, x, x, key_padding_mask=mg.zeros(5, 3, dtype=mg.bool))
    with pytest.raises(TypeError, match="attn_mask must be a bool or floating tensor"):
        m(x, x, x, attn_mask=mg.zeros(5, 5, dtype=mg.int64))


# ---------------------------------------------------------------------------- encoder


def _np_layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def _np_encoder_layer(layer, x, mask):
    p = {name: t.detach().numpy() for name, t in layer.named_parameters()}

    def attn(y):
        return _np_mha(layer.self_attn, y, y, y, mask)[0]

    def ff(y):
        hidden = np.maximum(y @ p["linear1.weight"].T + p["linear1.bias"], 0)
        return hidden @ p["linear2.weight"].T + p["linear2.bias"]

    def n1(y):
        return _np_layer_norm(y, p["norm1.weight"], p["norm1.bias"])

    def n2(y):
        return _np_layer_norm(y, p["norm2.weight"], p["norm2.bias"])

    if layer.norm_first:
        x = x + attn(n1(x))
        return x + ff(n2(x))
    x = n1(x + attn(x))
    return n2(x + ff(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_and_encoder_match_numpy(norm_first):
    mg.manual_seed(3)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                       norm_first=norm_first).double()
    x = _rand(6, 2, 8)
    mask = np.triu(np.ones((6, 6), bool), 1)
    got = layer(mg.tensor(x), src_mask=mg.tensor(mask), is_causal=True).numpy()
    np.testing.assert_allclose(got, _np_encoder_layer(layer, x, mask), rtol=1e-10, atol=1e-12)
    enc = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(8).double())
    assert len(enc.layers) == 3 and enc.layers[0].linear1.weight is not layer.linear1.weight
    with mg.no_grad():
        enc.layers[1].linear1.weight.mul_(2.0)  # the copies are independent
    want = x
    for each in enc.layers:
        want = _np_encoder_layer(each, want, mask)
    want = _np_layer_norm(want, enc.norm.weight.numpy(), enc.norm.bias.numpy())
    np.testing.assert_allclose(enc(mg.tensor(x), mask=mg.tensor(mask)).numpy(), want,
                               rtol=1e-10, atol=1e-12)


def test_encoder_layer_trains_under_checkpoint_with_equal_gradients():
    mg.manual_seed(4)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                       batch_first=True, activation="gelu")
    x = mg.randn(2, 5, 8)
    layer(x).sum().backward()
    plain = {n: p.grad.numpy().copy() for n, p in layer.named_parameters()}
    layer.zero_grad()
    mg.checkpoint.checkpoint(layer, x).sum().backward()
    for n, p in layer.named_parameters():
        np.testing.assert_array_equal(p.grad.numpy(), plain[n])


def test_encoder_errors():
    with pytest.raises(ValueError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="num_layers must be a positive int"):
        nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), 0)
    with pytest.raises(TypeError, match="the layer must be a Module"):
        nn.TransformerEncoder("layer", 2)


# ---------------------------------------------------------------------------- decoder


def _np_decoder_layer(layer, x, memory, tgt_mask, memory_padding):
    p = {name: t.detach().numpy() for name, t in layer.named_parameters()}

    def ff(y):
        hidden = np.maximum(y @ p["linear1.weight"].T + p["linear1.bias"], 0)
        return hidden @ p["linear2.weight"].T + p["linear2.bias"]

    def norm(i, y):
        return _np_layer_norm(y, p[f"norm{i}.weight"], p[f"norm{i}.bias"])

    def sa(y):
        return _np_mha(layer.self_attn, y, y, y, tgt_mask)[0]

    def cross(y):
        return _np_mha(layer.multihead_attn, y, memory, memory, None, memory_padding)[0]

    if layer.norm_first:
        x = x + sa(norm(1, x))
        x = x + cross(norm(2, x))
        return x + ff(norm(3, x))
    x = norm(1, x + sa(x))
    x = norm(2, x + cross(x))
    return norm(3, x + ff(x))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_decoder_and_transformer_match_numpy(norm_first):
    mg.manual_seed(5)
    layer = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                       norm_first=norm_first).double()
    rng = np.random.default_rng(6)
    tgt, memory = rng.standard_normal((5, 2, 8)), rng.standard_normal((7, 2, 8))
    causal = np.triu(np.ones((5, 5), bool), 1)
    padding = np.zeros((2, 7), bool)
    padding[1, -3:] = True
    got = layer(mg.tensor(tgt), mg.tensor(memory), tgt_mask=mg.tensor(causal),
                memory_key_padding_mask=mg.tensor(padding), tgt_is_causal=True)
    np.testing.assert_allclose(got.numpy(), _np_decoder_layer(layer, tgt, memory, causal, padding),
                               rtol=1e-10, atol=1e-12)
    model = nn.Transformer(8, 2, 2, 2, dim_feedforward=16, dropout=0.0,
                           norm_first=norm_first).double()
    src = rng.standard_normal((7, 2, 8))
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=mg.float64)
    assert mask.numpy().tolist()[0][:2] == [0.0, -np.inf]
    enc = model.encoder
    want = src
    for each in enc.layers:
        want = _np_encoder_layer(each, want, None)
    want = _np_layer_norm(want, enc.norm.weight.numpy(), enc.norm.bias.numpy())
    out = tgt
    for each in model.decoder.layers:
        out = _np_decoder_layer(each, out, want, mask.numpy(), None)
    out = _np_layer_norm(out, model.decoder.norm.weight.numpy(), model.decoder.norm.bias.numpy())
    np.testing.assert_allclose(model(mg.tensor(src), mg.tensor(tgt), tgt_mask=mask).numpy(), out,
                               rtol=1e-10, atol=1e-12)
    assert len(dict(model.named_parameters())) == 2 * 12 + 2 * 18 + 4
