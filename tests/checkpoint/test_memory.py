"""Checkpointing saves memory: peak live tensor bytes measured by the memory tracker on a
32-block MLP whose activations outweigh its parameters."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.checkpoint import checkpoint_sequential

N, WIDTH, BATCH = 32, 128, 512


@pytest.fixture(scope="module")
def mlp():
    rng = np.random.default_rng(0)
    ws = [
        mg.tensor((rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
                  requires_grad=True)
        for _ in range(N)
    ]
    bs = [mg.zeros(WIDTH, requires_grad=True) for _ in range(N)]
    layers = [lambda h, w=w, b=b: (h @ w + b).relu() for w, b in zip(ws, bs)]
    x = mg.tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))
    return ws + bs, layers, x


def step_peak(mlp, segments):
    params, layers, x = mlp
    for p in params:
        p.grad = None
    with mg.memory.track() as t:
        if segments is None:
            h = x
            for f in layers:
                h = f(h)
        else:
            h = checkpoint_sequential(layers, segments, x)
        loss = (h * h).mean()
        loss.backward()
        del h, loss
    grads = [p.grad.numpy().copy() for p in params]
    return t.peak_above_start, t.end_bytes - t.start_bytes, grads


def test_activation_bytes_of_the_plain_run(mlp):
    # every block keeps its (512, 128) float32 ReLU output for backward: 32 x 256 KiB
    peak, kept, _ = step_peak(mlp, None)
    act = BATCH * WIDTH * 4
    assert peak >= N * act
    assert peak <= N * act + 4 * act  # plus a few gradients in flight
    # what stays after the step is exactly the parameter gradients
    assert kept == N * (WIDTH * WIDTH * 4 + WIDTH * 4)


def test_sqrt_n_segments_peak_is_under_45_percent_and_falls_towards_sqrt_n(mlp):
    plain, _, ref = step_peak(mlp, None)
    peaks = {}
    for segments in (1, 2, 4, round(np.sqrt(N))):
        peaks[segments], _, grads = step_peak(mlp, segments)
        for a, b in zip(grads, ref):
            np.testing.assert_array_equal(a, b)
    assert peaks[1] == plain
    assert peaks[1] > peaks[2] > peaks[4] > peaks[6]
    assert peaks[6] <= 0.45 * plain
