"""The ``memgrad`` command: help, the demo's output, and argparse's errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import memgrad as mg
from memgrad.cli.__main__ import build_parser, check_gradients, main, sgd_step, train

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, exe: tuple[str, ...] = (sys.executable, "-m", "memgrad")):
    return subprocess.run(
        [*exe, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_help_lists_the_subcommands():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "usage: memgrad" in r.stdout
    for command in ("demo", "train", "tune", "plan"):
        assert command in r.stdout


@pytest.mark.parametrize("command, options", [
    ("demo", ["--steps", "--lr"]),
    ("train", ["--steps", "--batch", "--seq", "--d-model", "--blocks", "--lr", "--seed",
               "--budget", "--save", "64MB", "1.5GiB"]),
    ("tune", ["MODEL", "--budgets", "--size", "--repeats", "--plot", "--timeline", "--json",
              "package.module:factory", 'pip install "memgrad[plot]"']),
    ("plan", ["MODEL", "--budget", "--size", "--json"]),
])
def test_subcommand_help(command: str, options: list[str]):
    r = run(command, "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())  # argparse wraps lines
    assert f"usage: memgrad {command}" in text
    for option in options:
        assert option in text, option


def test_no_subcommand_prints_help_and_succeeds():
    r = run()
    assert r.returncode == 0, r.stderr
    assert "usage: memgrad" in r.stdout


def test_bad_subcommand_exits_2():
    r = run("no-such-command")
    assert r.returncode == 2
    assert "invalid choice" in r.stderr


def test_demo_trains_and_passes_gradcheck():
    r = run("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    losses = [float(m) for m in re.findall(r"^step +\d+ +loss ([0-9.]+)$", r.stdout, re.M)]
    assert len(losses) >= 5
    assert losses[-1] < losses[0] / 10
    assert re.search(r"^gradcheck: passed", r.stdout, re.M)


@pytest.mark.skipif(shutil.which("memgrad") is None, reason="the console script is not installed")
def test_console_script():
    r = run("--version", exe=("memgrad",))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"memgrad {mg.__version__}"


def test_main_in_process(capsys):
    assert main(["demo", "--steps", "30", "--log-every", "10"]) == 0
    out = capsys.readouterr().out
    assert "step    20" in out and "gradcheck: passed" in out


def test_train_is_reproducible_and_learns():
    a = train(steps=100, lr=0.05, seed=3, log_every=50)
    b = train(steps=100, lr=0.05, seed=3, log_every=50)
    assert a == b
    assert [step for step, _ in a] == [0, 50, 99]
    assert a[-1][1] < a[0][1]


def test_sgd_step_updates_in_place_and_zeroes_grads():
    p = mg.tensor([1.0, 2.0], requires_grad=True)
    (p * p).sum().backward()
    data = p.numpy()
    sgd_step([p], lr=0.5)
    assert p.numpy() is data
    assert p.tolist() == [0.0, 0.0] and p.grad.tolist() == [0.0, 0.0]


def test_check_gradients_counts_weights():
    assert check_gradients(seed=1) == 3 * 5 + 5 + 5 + 1


def test_parser_rejects_bad_values():
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["demo", "--steps", "many"])
    assert e.value.code == 2
