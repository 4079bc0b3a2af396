"""Property tests: on random models, checkpointing changes nothing but memory and work."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import memgrad as mg
from memgrad import nn
from memgrad.checkpoint import checkpoint_sequential, policy

ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": lambda: nn.GELU(),
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
}
POLICIES = {
    "none": None,
    "matmuls": policy.save_matmuls,
    "all": policy.save_all,
    "relu": policy.save_only("relu"),
}


@st.composite
def models(draw):
    depth = draw(st.integers(1, 6))
    widths = draw(st.lists(st.integers(2, 9), min_size=depth + 1, max_size=depth + 1))
    layers = []
    for i in range(depth):
        layers.append(("linear", widths[i], widths[i + 1]))
        layers.append((draw(st.sampled_from(sorted(ACTIVATIONS))),))
        if draw(st.booleans()):
            layers.append(("dropout", draw(st.sampled_from([0.1, 0.5]))))
        if draw(st.booleans()):
            layers.append(("layer_norm", widths[i + 1]))
    return layers, widths[0]


def build(spec, dtype, seed):
    mg.manual_seed(seed)
    layers = []
    for item in spec:
        if item[0] == "linear":
            layers.append(nn.Linear(item[1], item[2]))
        elif item[0] == "dropout":
            layers.append(nn.Dropout(item[1]))
        elif item[0] == "layer_norm":
            layers.append(nn.LayerNorm(item[1]))
        else:
            layers.append(ACTIVATIONS[item[0]]())
    model = nn.Sequential(*layers)
    return model.double() if dtype == np.float64 else model


def step(model, x, segments, use_reentrant, pol, seed):
    model.zero_grad()
    x.grad = None
    mg.manual_seed(seed)  # the same dropout masks in every run
    if segments is None:
        out = model(x)
    elif pol is None:
        out = checkpoint_sequential(model, segments, x, use_reentrant=use_reentrant)
    else:
        from memgrad.checkpoint import checkpoint
        from memgrad.checkpoint.sequential import segment_bounds

        bounds = segment_bounds(len(model), segments)
        out = x
        for s, e in bounds[:-1]:
            out = checkpoint(model[s:e], out, policy=pol)
        out = model[bounds[-1][0]:bounds[-1][1]](out)
    loss = (out * out).mean()
    loss.backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    if x.requires_grad:
        grads.append(x.grad.numpy().copy())
    return out.numpy().copy(), loss.item(), grads


@settings(max_examples=40, deadline=None)
@given(
    spec=models(),
    dtype=st.sampled_from([np.float32, np.float64]),
    batch=st.integers(1, 5),
    x_grad=st.booleans(),
    use_reentrant=st.booleans(),
    pol=st.sampled_from(sorted(POLICIES)),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_checkpointed_training_step_equals_plain(
    spec, dtype, batch, x_grad, use_reentrant, pol, seed, data
):
    layers, width = spec
    model = build(layers, dtype, seed)
    segments = data.draw(st.integers(1, len(model)), label="segments")
    x = mg.tensor(np.random.default_rng(seed).standard_normal((batch, width)).astype(dtype))
    x.requires_grad_(x_grad or use_reentrant)  # the reentrant variant needs an input with grad
    if use_reentrant:
        pol = "none"
    plain_out, plain_loss, plain_grads = step(model, x, None, False, None, seed)
    out, loss, grads = step(model, x, segments, use_reentrant, POLICIES[pol], seed)
    np.testing.assert_array_equal(out, plain_out)  # forward outputs bit-identical
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    assert abs(loss - plain_loss) <= rtol * abs(plain_loss)
    assert len(grads) == len(plain_grads)
    for g, ref in zip(grads, plain_grads):
        np.testing.assert_allclose(g, ref, rtol=rtol, atol=rtol * np.abs(ref).max())
