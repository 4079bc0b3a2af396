"""Running the ``memgrad`` command in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    """``python -m memgrad ARGS`` from the repository root; ``pythonpath`` is added to the
    module search path (for factories written to a temporary directory)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "memgrad", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess]:
    """The ``run_cli`` function."""
    return run_cli
