"""Each layer against a NumPy reference with the same weights, PyTorch's initialisation
statistics, train/eval behaviour, causality, and parameter gradients by finite differences."""

import contextlib
import math

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.autograd import gradcheck

RTOL, ATOL = 1e-5, 1e-5


def _np(t):
    return t.numpy().astype(np.float64)


# ------------------------------------------------------------------ NumPy references


def linear_ref(x, w, b):
    return x @ w.T + (0 if b is None else b)


def gelu_ref(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def layer_norm_ref(x, w, b, eps=1e-5, ndim=1):
    axes = tuple(range(-ndim, 0))
    mu = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y if w is None else y * w + (0 if b is None else b)


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def conv2d_ref(x, w, b, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg,
                           i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out if b is None else out + b[None, :, None, None]


def max_pool2d_ref(x, k, s, p=0, d=1):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s:i * s + d * (k - 1) + 1:d, j * s:j * s + d * (k - 1) + 1:d]
            out[:, :, i, j] = win.max(axis=(2, 3))
    return out


def attention_ref(x, wqkv, bqkv, wo, bo, num_heads, causal):
    b, t, e = x.shape
    d = e // num_heads
    qkv = linear_ref(x, wqkv, bqkv)
    q, k, v = (a.reshape(b, t, num_heads, d).transpose(0, 2, 1, 3)
               for a in np.split(qkv, 3, axis=-1))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if causal:
        scores = np.where(np.tril(np.ones((t, t), dtype=bool)), scores, -np.inf)
    y = (softmax_ref(scores) @ v).transpose(0, 2, 1, 3).reshape(b, t, e)
    return linear_ref(y, wo, bo)


def block_ref(x, blk):
    ln = [(_np(m.weight), _np(m.bias)) for m in (blk.ln1, blk.ln2)]
    a = blk.attn
    x = x + attention_ref(layer_norm_ref(x, *ln[0]), _np(a.qkv.weight), _np(a.qkv.bias),
                          _np(a.out_proj.weight), _np(a.out_proj.bias), a.num_heads, a.causal)
    fc1, fc2 = blk.mlp[0], blk.mlp[2]
    h = gelu_ref(linear_ref(layer_norm_ref(x, *ln[1]), _np(fc1.weight), _np(fc1.bias)), "tanh")
    return x + linear_ref(h, _np(fc2.weight), _np(fc2.bias))


# ------------------------------------------------------------------ gradcheck of parameters


@contextlib.contextmanager
def _parameters_replaced(module, names, tensors):
    """Put plain tensors in place of the named parameters (gradcheck differentiates with
    respect to its own float64 copies, so the module must read those)."""
    slots = []
    for name, t in zip(names, tensors):
        *path, attr = name.split(".")
        owner = module
        for part in path:
            owner = owner._modules[part]
        slots.append((owner, attr, owner._parameters[attr]))
        owner._parameters[attr] = t
    try:
        yield
    finally:
        for owner, attr, p in slots:
            owner._parameters[attr] = p


def check_parameter_grads(module, *inputs):
    """gradcheck the module's output with respect to its inputs and all its parameters."""
    module.double()
    names, params = zip(*module.named_parameters())
    n = len(inputs)

    def fn(*args):
        with _parameters_replaced(module, names, args[n:]):
            return module(*args[:n])

    assert gradcheck(fn, (*inputs, *params))


def _x(*shape, requires_grad=True, seed=0):
    data = np.random.default_rng(seed).standard_normal(shape)
    return mg.tensor(data, requires_grad=requires_grad)


# ------------------------------------------------------------------ Linear


def test_linear_forward_matches_numpy():
    lin = nn.Linear(5, 3)
    x = mg.randn(4, 5)
    np.testing.assert_allclose(lin(x).numpy(), linear_ref(_np(x), _np(lin.weight), _np(lin.bias)),
                               rtol=RTOL, atol=ATOL)
    assert lin.weight.shape == (3, 5) and lin.bias.shape == (3,)
    nobias = nn.Linear(5, 3, bias=False)
    assert nobias.bias is None and [n for n, _ in nobias.named_parameters()] == ["weight"]
    x3 = mg.randn(2, 4, 5)  # leading dimensions broadcast
    np.testing.assert_allclose(nobias(x3).numpy(), linear_ref(_np(x3), _np(nobias.weight), None),
                               rtol=RTOL, atol=ATOL)


def test_linear_init_matches_pytorch_default():
    mg.manual_seed(0)
    lin = nn.Linear(256, 512)
    bound = 1 / math.sqrt(256)
    w = lin.weight.numpy()
    assert np.abs(w).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert abs(w.mean()) < 0.01 * bound
    assert np.abs(lin.bias.numpy()).max() <= bound
    assert np.abs(lin.bias.numpy()).max() > 0.8 * bound


def test_linear_init_is_reproducible_under_manual_seed():
    mg.manual_seed(7)
    a = nn.Linear(4, 3)
    mg.manual_seed(7)
    b = nn.Linear(4, 3)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    np.testing.assert_array_equal(a.bias.numpy(), b.bias.numpy())


def test_linear_gradients():
    check_parameter_grads(nn.Linear(3, 2), _x(4, 3))


def test_invalid_sizes_raise():
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        nn.Linear(0, 3)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="approximate must be"):
        nn.GELU("fast")
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadSelfAttention(10, 3)
    with pytest.raises(ValueError, match="padding_idx must be within"):
        nn.Embedding(5, 2, padding_idx=5)


# ------------------------------------------------------------------ activations


@pytest.mark.parametrize("layer, ref", [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.GELU(), gelu_ref),
    (nn.GELU(approximate="tanh"), lambda x: gelu_ref(x, "tanh")),
], ids=["relu", "tanh", "sigmoid", "gelu", "gelu-tanh"])
def test_activations_match_numpy(layer, ref):
    x = mg.randn(3, 7) * 3
    np.testing.assert_allclose(layer(x).numpy(), ref(_np(x)), rtol=RTOL, atol=ATOL)
    assert list(layer.parameters()) == []


def test_flatten():
    x = mg.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 1)(x).shape == (6, 4, 5)
    assert nn.Flatten(1, 2)(x).shape == (2, 12, 5)
    np.testing.assert_array_equal(nn.Flatten()(x).numpy(), x.numpy().reshape(2, 60))


# ------------------------------------------------------------------ Dropout


def test_dropout_is_the_identity_in_eval_mode():
    drop = nn.Dropout(0.5).eval()
    x = mg.randn(100)
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())


def test_dropout_in_training_mode():
    drop = nn.Dropout(0.25)
    x = mg.ones(200, 100)
    y = drop(x).numpy()
    kept = y != 0
    assert abs(1 - kept.mean() - 0.25) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)


def test_dropout_is_reproducible_under_manual_seed():
    drop = nn.Dropout(0.5)
    x = mg.randn(50)
    mg.manual_seed(3)
    a = drop(x).numpy()
    mg.manual_seed(3)
    b = drop(x).numpy()
    c = drop(x).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)


def test_dropout_gradient_uses_the_same_mask():
    x = mg.ones(1000, requires_grad=True)
    y = nn.Dropout(0.5)(x)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())


# ------------------------------------------------------------------ LayerNorm


def test_layer_norm_matches_numpy():
    ln = nn.LayerNorm(6)
    assert (ln.weight.numpy() == 1).all() and (ln.bias.numpy() == 0).all()
    rng = np.random.default_rng(0)
    ln.weight.numpy()[...] = rng.standard_normal(6)
    ln.bias.numpy()[...] = rng.standard_normal(6)
    x = mg.randn(2, 3, 6) * 2 + 1
    np.testing.assert_allclose(ln(x).numpy(), layer_norm_ref(_np(x), _np(ln.weight), _np(ln.bias)),
                               rtol=1e-4, atol=1e-5)


def test_layer_norm_over_two_dims_and_without_affine():
    ln = nn.LayerNorm((3, 4), eps=1e-3, elementwise_affine=False)
    assert list(ln.parameters()) == [] and ln.normalized_shape == (3, 4)
    x = mg.randn(5, 3, 4)
    np.testing.assert_allclose(ln(x).numpy(), layer_norm_ref(_np(x), None, None, 1e-3, ndim=2),
                               rtol=1e-4, atol=1e-5)


def test_layer_norm_gradients():
    ln = nn.LayerNorm(4)
    mg.nn.init.normal_(ln.weight)
    mg.nn.init.normal_(ln.bias)
    check_parameter_grads(ln, _x(3, 4))


# ------------------------------------------------------------------ Embedding


def test_embedding_lookup_and_init():
    mg.manual_seed(0)
    emb = nn.Embedding(1000, 64)
    w = emb.weight.numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02  # N(0, 1), as in PyTorch
    idx = mg.tensor([[1, 5, 999], [0, 0, 3]])
    out = emb(idx)
    assert out.shape == (2, 3, 64)
    np.testing.assert_array_equal(out.numpy(), w[idx.numpy()])


def test_embedding_padding_idx():
    emb = nn.Embedding(6, 3, padding_idx=-1)
    assert emb.padding_idx == 5
    np.testing.assert_array_equal(emb.weight.numpy()[5], 0)
    emb(mg.tensor([5, 1, 5, 1])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[5], 0)
    np.testing.assert_array_equal(emb.weight.grad.numpy()[1], 2)


def test_embedding_gradients():
    check_parameter_grads(nn.Embedding(5, 3), mg.tensor([[0, 2], [2, 4]]))


# ------------------------------------------------------------------ Conv2d and MaxPool2d


@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1),
    dict(padding=(2, 1), dilation=2),
    dict(groups=2, bias=False),
    dict(kernel_size=(2, 3), stride=(1, 2)),
], ids=["plain", "stride-pad", "dilation", "groups", "rect"])
def test_conv2d_matches_numpy(kw):
    kw = {"kernel_size": 3, **kw}
    conv = nn.Conv2d(4, 6, **kw)
    x = mg.randn(2, 4, 7, 8)
    want = conv2d_ref(_np(x), _np(conv.weight), None if conv.bias is None else _np(conv.bias),
                      conv.stride, conv.padding, conv.dilation, conv.groups)
    got = conv(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_conv2d_init_matches_pytorch_default():
    mg.manual_seed(0)
    conv = nn.Conv2d(16, 64, 3, groups=2)
    assert conv.weight.shape == (64, 8, 3, 3)
    bound = 1 / math.sqrt(8 * 3 * 3)
    w = conv.weight.numpy()
    assert np.abs(w).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.03 * bound
    assert np.abs(conv.bias.numpy()).max() <= bound


def test_conv2d_gradients():
    check_parameter_grads(nn.Conv2d(2, 2, 2, stride=1, padding=1), _x(1, 2, 3, 3))


@pytest.mark.parametrize("k, s, p, d", [(2, None, 0, 1), (3, 2, 1, 1), (2, 1, 0, 2)])
def test_max_pool2d_matches_numpy(k, s, p, d):
    pool = nn.MaxPool2d(k, stride=s, padding=p, dilation=d)
    x = mg.randn(2, 3, 7, 6)
    want = max_pool2d_ref(_np(x), k, k if s is None else s, p, d)
    got = pool(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=RTOL, atol=ATOL)


def test_max_pool2d_gradient():
    x = _x(1, 2, 4, 4)
    assert gradcheck(lambda t: nn.MaxPool2d(2)(t), (x,))


# ------------------------------------------------------------------ attention


def _mha_ref(attn, x):
    return attention_ref(_np(x), _np(attn.qkv.weight), _np(attn.qkv.bias),
                         _np(attn.out_proj.weight), _np(attn.out_proj.bias), attn.num_heads,
                         attn.causal)


@pytest.mark.parametrize("causal", [False, True])
def test_multihead_self_attention_matches_numpy(causal):
    attn = nn.MultiheadSelfAttention(8, num_heads=2, causal=causal)
    assert [n for n, _ in attn.named_parameters()] == [
        "qkv.weight", "qkv.bias", "out_proj.weight", "out_proj.bias"]
    x = mg.randn(3, 5, 8)
    out = attn(x)
    assert out.shape == (3, 5, 8)
    np.testing.assert_allclose(out.numpy(), _mha_ref(attn, x), rtol=1e-4, atol=1e-5)


def test_multihead_self_attention_rejects_bad_input():
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, seq, 8\)"):
        nn.MultiheadSelfAttention(8, 2)(mg.randn(5, 8))


@pytest.mark.parametrize("make", [
    lambda: nn.MultiheadSelfAttention(8, 2, causal=True),
    lambda: nn.TransformerBlock(8, 2),
], ids=["attention", "block"])
def test_causal_output_does_not_depend_on_later_positions(make):
    layer = make()
    x = mg.randn(2, 6, 8)
    base = layer(x).numpy()
    for t in range(5):
        x2 = x.numpy().copy()
        x2[:, t + 1:] += np.random.default_rng(t).standard_normal(x2[:, t + 1:].shape)
        out = layer(mg.tensor(x2)).numpy()
        np.testing.assert_allclose(out[:, :t + 1], base[:, :t + 1], rtol=1e-5, atol=1e-6)
        assert not np.allclose(out[:, t + 1:], base[:, t + 1:])


def test_non_causal_attention_sees_later_positions():
    attn = nn.MultiheadSelfAttention(8, 2, causal=False)
    x = mg.randn(1, 4, 8)
    x2 = x.numpy().copy()
    x2[:, 3] += 1
    assert not np.allclose(attn(mg.tensor(x2)).numpy()[:, 0], attn(x).numpy()[:, 0])


def test_multihead_self_attention_gradients():
    check_parameter_grads(nn.MultiheadSelfAttention(4, 2, causal=True), _x(2, 3, 4))


def test_attention_dropout_is_off_in_eval_and_seeded_in_training():
    attn = nn.MultiheadSelfAttention(8, 2, dropout=0.5)
    x = mg.randn(2, 4, 8)
    mg.manual_seed(1)
    a = attn(x).numpy()
    mg.manual_seed(1)
    np.testing.assert_array_equal(attn(x).numpy(), a)
    attn.eval()
    np.testing.assert_allclose(attn(x).numpy(), _mha_ref(attn, x), rtol=1e-4, atol=1e-5)
    assert not np.allclose(a, attn(x).numpy())  # training mode did drop attention weights


# ------------------------------------------------------------------ TransformerBlock


def test_transformer_block_structure():
    blk = nn.TransformerBlock(16, 4)
    assert blk.attn.causal and blk.mlp[0].out_features == 64
    assert isinstance(blk.mlp[1], nn.GELU) and blk.mlp[1].approximate == "tanh"
    assert isinstance(blk.mlp[3], nn.Dropout)
    assert nn.TransformerBlock(16, 4, d_ff=24).mlp[0].out_features == 24
    assert not nn.TransformerBlock(16, 4, causal=False).attn.causal


@pytest.mark.parametrize("causal", [True, False])
def test_transformer_block_matches_numpy(causal):
    blk = nn.TransformerBlock(8, 2, d_ff=16, causal=causal)
    for ln in (blk.ln1, blk.ln2):
        mg.nn.init.normal_(ln.weight)
        mg.nn.init.normal_(ln.bias)
    x = mg.randn(2, 5, 8)
    out = blk(x)
    assert out.shape == (2, 5, 8)
    np.testing.assert_allclose(out.numpy(), block_ref(_np(x), blk), rtol=1e-4, atol=1e-5)


def test_transformer_block_gradients():
    check_parameter_grads(nn.TransformerBlock(4, 2, d_ff=8), _x(1, 3, 4))


def test_functional_names_are_the_op_table_functions():
    from memgrad.ops import conv
    from memgrad.ops import nn as ops_nn

    assert F.tanh is mg.tanh and F.sigmoid is mg.sigmoid
    # F.relu takes PyTorch's inplace= too: the relu primitive, or relu_ in place
    assert F.relu is ops_nn.relu
    assert F.linear is ops_nn.linear and F.cross_entropy is ops_nn.cross_entropy
    assert F.conv2d is conv.conv2d and F.max_pool2d is conv.max_pool2d
    assert set(F.__all__) >= {"linear", "relu", "gelu", "tanh", "sigmoid", "softmax",
                              "log_softmax", "dropout", "layer_norm", "embedding", "conv2d",
                              "max_pool2d", "cross_entropy", "mse_loss", "nll_loss",
                              "scaled_dot_product_attention"}
