"""Grad modes: thread-local, context managers, decorators, plain calls."""

import threading

import memgrad as mg


def test_context_managers_nest_and_restore():
    x = mg.ones(2, requires_grad=True)
    assert mg.is_grad_enabled()
    with mg.no_grad():
        assert not mg.is_grad_enabled()
        assert not (x * 2).requires_grad
        with mg.enable_grad():
            assert mg.is_grad_enabled()
            assert (x * 2).requires_grad
        assert not mg.is_grad_enabled()
    assert mg.is_grad_enabled()


def test_restored_after_exception():
    try:
        with mg.no_grad():
            raise ValueError
    except ValueError:
        pass
    assert mg.is_grad_enabled()


def test_decorators():
    @mg.no_grad()
    def f(x):
        return x * 2

    @mg.enable_grad()
    def g(x):
        return x * 2

    x = mg.ones(2, requires_grad=True)
    assert not f(x).requires_grad
    with mg.no_grad():
        assert g(x).requires_grad
    assert f.__name__ == "f"


def test_set_grad_enabled_as_call_context_and_decorator():
    mg.set_grad_enabled(False)
    try:
        assert not mg.is_grad_enabled()
    finally:
        mg.set_grad_enabled(True)
    assert mg.is_grad_enabled()
    with mg.set_grad_enabled(False):
        assert not mg.is_grad_enabled()
    assert mg.is_grad_enabled()

    @mg.set_grad_enabled(False)
    def f():
        return mg.is_grad_enabled()

    assert mg.is_grad_enabled()  # decorating does not switch the mode
    assert f() is False and mg.is_grad_enabled()


def test_grad_mode_is_thread_local():
    seen = {}
    started = threading.Event()
    release = threading.Event()

    def worker():
        seen["start"] = mg.is_grad_enabled()
        started.set()
        release.wait(5)
        seen["end"] = mg.is_grad_enabled()

    with mg.no_grad():
        th = threading.Thread(target=worker)
        th.start()
        started.wait(5)
        release.set()
        th.join()
    assert seen == {"start": True, "end": True}
