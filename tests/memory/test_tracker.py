"""The memory tracker counts tensor buffers exactly: stated by arithmetic, to the byte."""

import threading

import numpy as np
import pytest

import memgrad as mg


def test_views_count_once_and_freeing_returns_to_start():
    with mg.memory.track() as t:
        a = mg.zeros(1000)  # float32: 4000 bytes
        assert mg.memory.allocated_bytes() - t.start_bytes == 4000
        views = [a.reshape(10, 100), a.reshape(10, 100).T, a.expand(3, 1000), a[::2], a.detach()]
        assert mg.memory.allocated_bytes() - t.start_bytes == 4000
        b = a + 1.0  # a new buffer
        assert mg.memory.allocated_bytes() - t.start_bytes == 8000
        del a, views
        assert mg.memory.allocated_bytes() - t.start_bytes == 4000  # b alone
        del b
        assert mg.memory.allocated_bytes() == t.start_bytes
    assert t.peak_above_start == 8000 and t.end_bytes == t.start_bytes


def test_saved_tensors_are_counted_until_backward_frees_them():
    x = mg.ones(100, dtype=mg.float64, requires_grad=True)  # 800 bytes, before tracking
    with mg.memory.track() as t:
        assert mg.memory.allocated_bytes() - t.start_bytes == 0
        loss = (x.exp() * 3.0).sum()
        # exp's output (800) is saved by exp itself; mul by a constant saves nothing and
        # its output (800) is freed once sum ran; the scalar loss is 8 bytes
        assert mg.memory.allocated_bytes() - t.start_bytes == 800 + 8
        loss.backward()
        # exp's saved output is freed; x.grad (800) remains, besides the loss
        assert mg.memory.allocated_bytes() - t.start_bytes == 800 + 8
        assert x.grad is not None
        del loss
    assert t.end_bytes - t.start_bytes == 800
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.e)


def test_timeline_names_ops_and_phases():
    from memgrad.checkpoint import checkpoint

    w = mg.ones(4, 4, dtype=mg.float64, requires_grad=True)
    x = mg.ones(2, 4, dtype=mg.float64)
    with mg.memory.track() as t:
        y = checkpoint(lambda h: (h @ w).tanh(), x)
        y.sum().backward()
    phases = [(e.op, e.phase) for e in t.timeline]
    assert ("matmul", "forward") in phases and ("tanh", "forward") in phases
    assert ("matmul", "recompute") in phases and ("tanh", "recompute") in phases
    assert ("tanh_backward", "backward") in phases
    assert all(e.bytes >= t.start_bytes for e in t.timeline)
    assert t.timeline[t.peak_index].bytes <= t.peak_bytes


def test_allocated_bytes_without_tracking_scans_live_tensors():
    before = mg.memory.allocated_bytes()
    a = mg.zeros(250, dtype=mg.float64)  # 2000 bytes
    v = a[10:]  # a view: nothing more
    assert mg.memory.allocated_bytes() - before == 2000
    del a, v
    assert mg.memory.allocated_bytes() == before


def test_peak_needs_accounting_and_reset_peak():
    with pytest.raises(RuntimeError, match="track"):
        mg.memory.peak_bytes()
    with mg.memory.track():
        big = mg.zeros(10_000)
        del big
        assert mg.memory.peak_bytes() - mg.memory.allocated_bytes() >= 40_000
        mg.memory.reset_peak()
        assert mg.memory.peak_bytes() == mg.memory.allocated_bytes()


def test_tracking_is_an_interpreter_and_patches_nothing():
    from memgrad import interpreters
    from memgrad.tensor import Tensor

    init = Tensor.__init__
    before = interpreters.current()
    with mg.memory.track():
        with mg.memory.track():
            assert Tensor.__init__ is init
            assert len(interpreters.current()) == len(before) + 1  # one per thread
    assert Tensor.__init__ is init and interpreters.current() == before


def test_buffers_made_before_tracking_are_not_counted_nor_their_freeing():
    old = mg.zeros(1000)  # 4000 bytes, made before
    with mg.memory.track() as t:
        view = old.reshape(10, 100)  # a view of storage made before: nothing new
        assert mg.memory.allocated_bytes() == t.start_bytes
        new = old + 1.0
        del old, view  # freeing storage made before changes nothing
        assert mg.memory.allocated_bytes() - t.start_bytes == 4000
        del new
    assert t.peak_above_start == 4000 and t.end_bytes == t.start_bytes


def test_a_free_during_registration_does_not_deadlock():
    # the cyclic collector can free a buffer while register() holds the lock, on the same
    # thread: release() must get the lock again
    from memgrad.memory import tracker

    acc = tracker._Accounting()
    kept = np.zeros(8)
    acc.register(kept)
    ref = acc.live[id(kept)]
    done = threading.Event()

    def nested() -> None:
        with acc.lock:
            acc.release(ref)
        done.set()

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), "release() under the held lock deadlocked"
    assert acc.allocated == 0 and not acc.live


def test_ctrl_c_inside_a_free_is_delivered_again():
    # a weak reference's callback cannot raise, nor send the signal again (the main thread
    # would take it inside the callback and drop it too): the next op raises it, once
    from memgrad.memory import tracker

    acc = tracker._Accounting()

    class Interrupting:
        def __enter__(self):
            raise KeyboardInterrupt

        def __exit__(self, *exc):
            return False

    acc.lock = Interrupting()
    acc.release(object())  # swallowed here, as Python would
    assert acc.interrupted
    accountant = tracker._Accountant(acc)
    from memgrad.ops.registry import REGISTRY

    prim = REGISTRY["neg"]
    with pytest.raises(KeyboardInterrupt):
        accountant.process(prim, (), {}, lambda *a: None)
    assert not acc.interrupted
    assert accountant.process(prim, (), {}, lambda *a: 7) == 7  # raised once only


def test_an_ops_result_counts_only_on_new_storage():
    # the dispatcher reports an op's result to the tracker only when it shares no memory
    # with the op's inputs: told by identity for arrays that own their memory, else by
    # NumPy's may_share_memory (an input whose memory NumPy does not own: as_strided's)
    from numpy.lib.stride_tricks import as_strided

    x = mg.tensor(np.arange(6.0))  # made before the block: not counted
    strided = mg.from_numpy(as_strided(np.arange(12.0), (3,), (16,)))
    assert strided.numpy().base.__class__ is not np.ndarray
    with mg.memory.track():
        y = x.clone()  # new: 48 bytes
        assert mg.memory.allocated_bytes() == 48
        aliases = [x.contiguous(), x.reshape(2, 3), y.contiguous(), y.reshape(3, 2).T,
                   strided.to(mg.float64)]
        assert mg.memory.allocated_bytes() == 48
        assert aliases[0].numpy() is x.numpy() and aliases[4].numpy() is strided.numpy()
        z = strided.contiguous()  # a copy: 24 bytes more
        assert mg.memory.allocated_bytes() == 72
        del y, z, aliases
        assert mg.memory.allocated_bytes() == 0
