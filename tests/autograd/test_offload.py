"""Offload hooks: save_on_cpu keeps saved tensors as they are, save_on_disk moves them to
files until backward; both keep the version check, give plain training's gradients and
compose with checkpoint."""

import gc
import os

import numpy as np
import pytest

import memgrad as mg
from memgrad.autograd.graph import save_on_cpu, save_on_disk
from memgrad.checkpoint import checkpoint

N = 64


def weights():
    rng = np.random.default_rng(0)
    return [mg.tensor(rng.standard_normal((N, N)) * 0.1, requires_grad=True) for _ in range(3)]


def model(ws, x):
    for w in ws:
        x = (x @ w).tanh()
    return (x * x).sum()


def reference():
    ws = weights()
    x = mg.tensor(np.random.default_rng(1).standard_normal((16, N)))
    model(ws, x).backward()
    return [w.grad.numpy().copy() for w in ws], x


def test_save_on_cpu_gives_the_same_gradients_and_checks_versions():
    ref, x = reference()
    ws = weights()
    with save_on_cpu(pin_memory=True):
        loss = model(ws, x)
    loss.backward()
    for w, g in zip(ws, ref):
        np.testing.assert_array_equal(w.grad.numpy(), g)
    a = mg.ones(3, requires_grad=True)
    with save_on_cpu():
        b = a.exp()
        c = b.exp()
    with mg.no_grad():
        b.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_save_on_disk_spills_and_cleans_up(tmp_path):
    ref, x = reference()
    ws = weights()
    with save_on_disk(tmp_path, min_bytes=1024):
        loss = model(ws, x)
    # each matmul saves its input (16 x 64 float64: 8 KiB), each tanh its output and the
    # square its input twice: one file per save; the weights, parameters, stay as they are
    assert len(os.listdir(tmp_path)) == 1 + 3 + 2 + 2
    loss.backward()
    for w, g in zip(ws, ref):
        np.testing.assert_array_equal(w.grad.numpy(), g)
    del loss
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_small_tensors_stay_in_memory(tmp_path):
    a = mg.ones(8, requires_grad=True)
    with save_on_disk(tmp_path, min_bytes=1 << 20):
        y = (a.exp() * a).sum()
    assert os.listdir(tmp_path) == []
    y.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * np.e, rtol=1e-6)


def test_a_spilled_tensor_changed_in_place_raises(tmp_path):
    a = mg.ones(256, requires_grad=True)
    with save_on_disk(tmp_path, min_bytes=0):
        b = a * 2.0
        c = b * b
    with mg.no_grad():
        b.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_a_temporary_directory_is_made_and_removed():
    a = mg.ones(256, requires_grad=True)
    hooks = save_on_disk(min_bytes=0)
    path = hooks.directory
    with hooks:
        y = a.exp().exp().sum()
    assert len(os.listdir(path)) == 2
    y.backward()
    del y, hooks
    gc.collect()
    assert not os.path.exists(path)
    np.testing.assert_allclose(a.grad.numpy(), np.exp(np.e) * np.e, rtol=1e-6)


@pytest.mark.parametrize("where", ["around", "inside"])
def test_save_on_disk_composes_with_checkpoint(tmp_path, where):
    ref, x = reference()
    ws = weights()
    h = x * 1.0

    def region(t):
        if where == "inside":
            with save_on_disk(tmp_path, min_bytes=1024):
                return model(ws[1:], (t @ ws[0]).tanh())
        return model(ws[1:], (t @ ws[0]).tanh())

    if where == "around":
        with save_on_disk(tmp_path, min_bytes=1024):
            loss = checkpoint(region, h)
        # the region keeps only its argument, which the enclosing hooks spilled
        assert len(os.listdir(tmp_path)) == 1
    else:
        loss = checkpoint(region, h)
    loss.backward()
    for w, g in zip(ws, ref):
        np.testing.assert_allclose(w.grad.numpy(), g, rtol=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match="save_on_disk: min_bytes must be an int >= 0"):
        save_on_disk(min_bytes=-1)
    with pytest.raises(FileNotFoundError, match="save_on_disk: directory .* does not exist"):
        save_on_disk("/nonexistent/memgrad")


def test_disable_saved_tensors_hooks_refuses_hooks_and_checkpoints_inside_it():
    graph = mg.autograd.graph
    x = mg.ones(3, requires_grad=True)
    outer = []
    with graph.saved_tensors_hooks(lambda t: outer.append(1) or t, lambda t: t):
        with graph.disable_saved_tensors_hooks("feature X does not work with hooks"):
            with pytest.raises(RuntimeError, match="feature X does not work with hooks"):
                with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
            with pytest.raises(RuntimeError, match="feature X"):
                mg.checkpoint.checkpoint(lambda t: t.sin(), x)
            y = x.sin()  # hooks entered before stay active
        assert outer
    with graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # restored on exit
        pass
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(1.0), rtol=1e-6)
