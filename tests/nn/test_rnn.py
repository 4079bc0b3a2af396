"""RNN, LSTM and GRU against a NumPy formulation of PyTorch's equations (layers, directions,
batch_first, initial states, unbatched input), gradcheck, checkpointing, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn
from memgrad.autograd import gradcheck
from memgrad.errors import ShapeError


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _np_cell(kind, x, state, w_ih, w_hh, b_ih, b_hh):
    gi = x @ w_ih.T + b_ih
    gh = state[0] @ w_hh.T + b_hh
    if kind == "RNN":
        return (np.tanh(gi + gh),)
    if kind == "RNN_RELU":
        return (np.maximum(gi + gh, 0),)
    if kind == "LSTM":
        i, f, g, o = np.split(gi + gh, 4, -1)
        c = _sig(f) * state[1] + _sig(i) * np.tanh(g)
        return _sig(o) * np.tanh(c), c
    r_i, z_i, n_i = np.split(gi, 3, -1)
    r_h, z_h, n_h = np.split(gh, 3, -1)
    r, z = _sig(r_i + r_h), _sig(z_i + z_h)
    n = np.tanh(n_i + r * n_h)
    return ((1 - z) * n + z * state[0],)


def _np_run(kind, m, x, states):
    """x (L, N, H_in); states per layer*direction; returns output and final states."""
    p = {k: v.detach().numpy() for k, v in m.named_parameters()}
    dirs = 2 if m.bidirectional else 1
    finals = []
    for layer in range(m.num_layers):
        outs = []
        for d in range(dirs):
            suffix = f"l{layer}{'_reverse' if d else ''}"
            w = [p.get(f"{name}_{suffix}", 0.0) for name in ("weight_ih", "weight_hh", "bias_ih",
                                                              "bias_hh")]
            state = states[layer * dirs + d]
            out = [None] * x.shape[0]
            for t in (range(x.shape[0] - 1, -1, -1) if d else range(x.shape[0])):
                state = _np_cell(kind, x[t], state, *w)
                out[t] = state[0]
            outs.append(np.stack(out))
            finals.append(state)
        x = np.concatenate(outs, -1)
    return x, finals


@pytest.mark.parametrize("kind", ["RNN", "RNN_RELU", "LSTM", "GRU"])
@pytest.mark.parametrize("config", [dict(), dict(num_layers=2, bidirectional=True),
                                    dict(batch_first=True, bias=False)])
def test_recurrent_layers_match_numpy(kind, config):
    mg.manual_seed(0)
    if kind.startswith("RNN"):
        m = nn.RNN(3, 4, nonlinearity="relu" if kind == "RNN_RELU" else "tanh", **config)
    else:
        m = getattr(nn, kind)(3, 4, **config)
    m = m.double()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 2, 3))
    layers = m.num_layers * (2 if m.bidirectional else 1)
    h0 = rng.standard_normal((layers, 2, 4))
    c0 = rng.standard_normal((layers, 2, 4))
    states = [(h0[i], c0[i]) if kind == "LSTM" else (h0[i],) for i in range(layers)]
    want, finals = _np_run("RNN" if kind == "RNN" else kind, m, x, states)
    inp = mg.tensor(x.transpose(1, 0, 2) if m.batch_first else x)
    hx = (mg.tensor(h0), mg.tensor(c0)) if kind == "LSTM" else mg.tensor(h0)
    out, h = m(inp, hx)
    got = out.numpy().transpose(1, 0, 2) if m.batch_first else out.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    hn = h[0] if kind == "LSTM" else h
    np.testing.assert_allclose(hn.numpy(), np.stack([f[0] for f in finals]), rtol=1e-10,
                               atol=1e-12)
    if kind == "LSTM":
        np.testing.assert_allclose(h[1].numpy(), np.stack([f[1] for f in finals]),
                                   rtol=1e-10, atol=1e-12)


def test_parameter_names_shapes_and_initialisation_are_pytorchs():
    mg.manual_seed(0)
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    shapes = {k: v.shape for k, v in m.named_parameters()}
    assert shapes["weight_ih_l0"] == (20, 3) and shapes["weight_hh_l0_reverse"] == (20, 5)
    assert shapes["weight_ih_l1"] == (20, 10) and shapes["bias_hh_l1_reverse"] == (20,)
    assert len(shapes) == 16
    bound = 1 / np.sqrt(5)
    for p in m.parameters():
        assert np.abs(p.numpy()).max() <= bound
    assert len(dict(nn.GRU(3, 5, bias=False).named_parameters())) == 2
    assert repr(nn.GRU(3, 5, num_layers=2, batch_first=True)) == (
        "GRU(3, 5, num_layers=2, batch_first=True)")


def test_zero_initial_states_and_unbatched_input():
    mg.manual_seed(1)
    m = nn.GRU(3, 4).double()
    x = np.random.default_rng(0).standard_normal((6, 3))
    out, h = m(mg.tensor(x))
    want, finals = _np_run("GRU", m, x[:, None], [(np.zeros((1, 4)),)])
    assert out.shape == (6, 4) and h.shape == (1, 4)
    np.testing.assert_allclose(out.numpy(), want[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.numpy(), finals[0][0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_input_gradients(cls):
    mg.manual_seed(2)
    m = cls(2, 3, num_layers=2, bidirectional=True).double()
    x = mg.tensor(np.random.default_rng(0).standard_normal((4, 1, 2)), requires_grad=True)
    assert gradcheck(lambda t: m(t)[0], [x])


def test_lstm_checkpointed_gives_the_plain_gradients_and_dropout_only_in_training():
    mg.manual_seed(3)
    m = nn.LSTM(3, 4, num_layers=2, dropout=0.5, batch_first=True)
    x = mg.randn(2, 5, 3)
    m.eval()
    assert np.array_equal(m(x)[0].numpy(), m(x)[0].numpy())
    m.train()
    mg.manual_seed(9)
    m(x)[0].sum().backward()
    plain = {k: p.grad.numpy().copy() for k, p in m.named_parameters()}
    m.zero_grad()
    mg.manual_seed(9)
    mg.checkpoint.checkpoint(lambda t: m(t)[0], x).sum().backward()
    for k, p in m.named_parameters():
        np.testing.assert_array_equal(p.grad.numpy(), plain[k])


def test_recurrent_errors():
    with pytest.raises(ValueError, match="RNN: unknown nonlinearity 'sigmoid'"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="LSTM: hidden_size must be a positive int"):
        nn.LSTM(3, 0)
    with pytest.raises(NotImplementedError, match="LSTM: proj_size is not supported"):
        nn.LSTM(3, 4, proj_size=2)
    m = nn.GRU(3, 4, num_layers=2)
    with pytest.raises(ShapeError, match="GRU: input must have shape \\(L, N, 3\\)"):
        m(mg.zeros(5, 2, 4))
    with pytest.raises(ShapeError, match="GRU: Expected hidden size \\(2, 2, 4\\)"):
        m(mg.zeros(5, 2, 3), mg.zeros(1, 2, 4))
    with pytest.raises(TypeError, match="LSTM: hx must be a tuple"):
        nn.LSTM(3, 4)(mg.zeros(5, 2, 3), mg.zeros(1, 2, 4))
