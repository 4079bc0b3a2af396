"""Tensor data attributes, factories, dtypes and the global generator."""

import numpy as np
import pytest

import memgrad as mg


def test_data_attributes():
    t = mg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert t.shape == (2, 3) and t.ndim == 2 and t.numel() == 6 and len(t) == 2
    assert t.dtype == mg.float32
    assert t.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert t[1, 2].item() == 6.0
    assert isinstance(t.numpy(), np.ndarray)
    t.numpy()[0, 0] = 9.0  # no copy
    assert t[0, 0].item() == 9.0


def test_dtype_inference_and_from_numpy():
    assert mg.tensor(1.5).dtype == mg.float32
    assert mg.tensor([1, 2]).dtype == mg.int64
    assert mg.tensor([True]).dtype == mg.bool_
    assert mg.tensor(np.zeros(2, dtype=np.float64)).dtype == mg.float64
    a = np.arange(4.0)
    t = mg.from_numpy(a)
    a[0] = 42
    assert t[0].item() == 42
    c = mg.tensor(a)
    a[1] = -1
    assert c[1].item() == 1.0


def test_factories():
    assert mg.zeros(2, 3).numpy().sum() == 0 and mg.zeros((2, 3)).shape == (2, 3)
    assert mg.ones(4, dtype=mg.float64).dtype == mg.float64
    assert mg.full((2,), 7).dtype == mg.int64 and mg.full((2,), 0.5).dtype == mg.float32
    np.testing.assert_array_equal(mg.eye(2).numpy(), np.eye(2))
    np.testing.assert_array_equal(mg.arange(1, 7, 2).numpy(), [1, 3, 5])
    assert mg.arange(0, 1, 0.5).dtype == mg.float32
    x = mg.randn(3, 4)
    assert mg.zeros_like(x).shape == (3, 4) and mg.ones_like(x).dtype == mg.float32
    assert mg.empty(2, 2).shape == (2, 2)
    r = mg.randint(0, 5, (100,))
    assert r.dtype == mg.int64 and 0 <= r.numpy().min() and r.numpy().max() < 5
    u = mg.rand(1000)
    assert 0 <= u.numpy().min() and u.numpy().max() < 1


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(RuntimeError, match="floating point"):
        mg.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        mg.arange(3).requires_grad_()


def test_item_on_many_elements_raises():
    with pytest.raises(RuntimeError, match="3 elements"):
        mg.ones(3).item()


def test_requires_grad_flags_and_detach():
    x = mg.ones(2, requires_grad=True)
    y = x * 2
    assert y.requires_grad and not y.is_leaf
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.numpy() is y.numpy()
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad = False
    y.detach_()
    assert y.grad_fn is None and not y.requires_grad


def test_dtype_promotion_follows_numpy():
    f32 = mg.ones(2)
    f64 = mg.ones(2, dtype=mg.float64)
    i64 = mg.arange(2)
    assert (f32 * 2.5).dtype == mg.float32
    assert (f32 + f64).dtype == mg.float64
    assert (i64 * 2).dtype == mg.int64
    assert (i64 + f32).dtype == np.result_type(np.int64, np.float32)
    assert (f32 > 0).dtype == mg.bool_
    assert f32.double().dtype == mg.float64 and f64.float().dtype == mg.float32


def test_repr_names_grad_fn():
    x = mg.ones(2, requires_grad=True)
    assert "requires_grad=True" in repr(x)
    assert "grad_fn=<MulBackward>" in repr(x * 2)


def test_manual_seed_and_rng_state_replay():
    mg.manual_seed(123)
    a = mg.randn(5)
    mg.manual_seed(123)
    b = mg.randn(5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    state = mg.get_rng_state()
    c = mg.rand(4)
    mg.set_rng_state(state)
    d = mg.rand(4)
    np.testing.assert_array_equal(c.numpy(), d.numpy())


def test_rng_state_is_a_snapshot_that_can_be_set_again():
    mg.manual_seed(5)
    state = mg.get_rng_state()
    first = mg.rand(3).numpy()
    assert mg.get_rng_state() != state  # the draw moved the generator, not the snapshot
    mg.set_rng_state(state)
    state["state"]["state"] = 0  # a change to the dict after setting it is not seen
    np.testing.assert_array_equal(mg.rand(3).numpy(), first)


def test_fork_rng_restores_state():
    mg.manual_seed(7)
    expected = mg.randn(3).numpy()
    mg.manual_seed(7)
    with mg.random.fork_rng():
        mg.randn(100)
    np.testing.assert_array_equal(mg.randn(3).numpy(), expected)
    with pytest.raises(TypeError, match="get_rng_state"):
        mg.set_rng_state("nope")
