"""Freed memory kept in the process for the next step (NOTE [ Freed pages ]): page faults
of repeated steps, counted by the kernel, with memgrad's setting and with glibc's defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memgrad.memory import heap

# a "step" that allocates and frees 64 arrays of 1 MiB (256 pages each), touching every page;
# prints the minor page faults of five steps after two warm ones
_STEPS = """
import resource
import numpy as np
import memgrad

def step():
    arrays = [np.ones(1 << 18, np.float32) for _ in range(64)]
    del arrays

step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(keep: str) -> int:
    env = {**os.environ, "MEMGRAD_KEEP_FREED_MEMORY": keep}
    out = subprocess.run([sys.executable, "-c", _STEPS], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not heap._glibc(), reason="glibc's heap only")
def test_repeated_steps_fault_no_pages_once_the_first_has_run():
    pages = 5 * 64 * 256  # what five steps touch
    assert _faults("1") < pages // 100
    # with glibc's defaults the freed top of the heap is given back and faulted in again
    assert _faults("0") > pages // 2


@pytest.mark.skipif(not heap._glibc(), reason="glibc's heap only")
def test_keep_freed_memory_sets_glibcs_thresholds():
    assert heap.keep_freed_memory() is True


def test_a_bad_setting_is_an_error_at_import():
    env = {**os.environ, "MEMGRAD_KEEP_FREED_MEMORY": "yes"}
    out = subprocess.run([sys.executable, "-c", "import memgrad"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "MEMGRAD_KEEP_FREED_MEMORY: expected 0" in out.stderr
    assert "got 'yes'" in out.stderr
