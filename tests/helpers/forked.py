"""Run a function in a child process forked from the test's process (fork safety tests)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any


def _run(queue: Any, fn: Callable, args: tuple) -> None:
    queue.put(fn(*args))


def in_forked_child(fn: Callable, *args: Any, timeout: float = 120) -> Any:
    """``fn(*args)`` computed in a forked child and sent back; a child that hangs is killed
    and fails the test."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run, args=(queue, fn, args))
    proc.start()
    try:
        got = queue.get(timeout=timeout)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():  # pragma: no cover - the hang these tests guard against
            proc.kill()
    assert proc.exitcode == 0
    return got
