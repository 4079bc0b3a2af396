"""The command line's checks of what it is given, each one line on stderr: every numeric
option's range, output paths that cannot be written, a model too big for the machine,
Ctrl-C (exit status 130), and user text printed as written (no rich markup or emoji)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from memgrad.cli import __main__ as cli_main
from memgrad.cli.output import console
from memgrad.sizes import physical_memory

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--batch", "2", "--seq", "16", "--d-model", "16", "--blocks", "1", "--samples", "0"]

# ---------------------------------------------------------------------------- numeric options

# every option with a type, per command, and values it must refuse
BAD_VALUES: dict[tuple[str, str], list[str]] = {
    ("demo", "--steps"): ["0", "-3", "2.5", "many"],
    ("demo", "--lr"): ["nan", "-1", "0", "inf", "-inf", "fast"],
    ("demo", "--seed"): ["-1", "1.5"],
    ("demo", "--log-every"): ["-1"],
    ("train", "--steps"): ["0", "-1", "1e3"],
    ("train", "--batch"): ["0", "-2"],
    ("train", "--seq"): ["1", "0"],
    ("train", "--d-model"): ["0"],
    ("train", "--heads"): ["0"],
    ("train", "--blocks"): ["0"],
    ("train", "--lr"): ["nan", "-1", "0", "inf", "-inf", "NaN", "1e999", "abc"],
    ("train", "--seed"): ["-1"],
    ("train", "--log-every"): ["-1"],
    ("train", "--samples"): ["-1"],
    ("train", "--nproc"): ["0", "-2", "two"],
    ("tune", "--repeats"): ["0", "-1"],
    ("sample", "--tokens"): ["0", "-1", "many"],
    ("sample", "--temperature"): ["-1", "-0.5", "nan", "inf", "-inf", "warm"],
    ("sample", "--seed"): ["-1", "1.5"],
}
POSITIONAL = {"tune": ["mlp"], "plan": ["mlp"], "demo": [], "train": [], "sample": ["run.npz"]}


def _typed_options() -> set[tuple[str, str]]:
    parser = cli_main.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = set()
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if action.type is not None and action.option_strings:
                found.add((name, action.option_strings[-1]))
    return found


def test_every_numeric_option_is_checked_here():
    assert _typed_options() == set(BAD_VALUES)


@pytest.mark.parametrize("command, option, value", [
    (c, o, v) for (c, o), values in BAD_VALUES.items() for v in values
])
def test_bad_numbers_are_one_line_and_status_2(capsys, command, option, value):
    with pytest.raises(SystemExit) as e:
        status = cli_main.main([command, *POSITIONAL[command], f"{option}={value}"])
        raise SystemExit(status)  # a CliError (--nproc) returns its status
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"memgrad {command}: error: ")
    assert option in lines[0] and value in lines[0]


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_lr_names_the_range_and_an_example(capsys, value):
    with pytest.raises(SystemExit):
        cli_main.main(["train", "--lr", value])
    assert capsys.readouterr().err == (
        f"memgrad train: error: argument --lr: must be a finite number above 0, got {value}; "
        "e.g. 3e-3; see 'memgrad train --help'\n"
    )


def test_lr_nan_as_a_user_runs_it(cli):
    r = cli("train", "--lr", "nan")
    assert r.returncode == 2
    assert r.stderr == ("memgrad train: error: argument --lr: must be a finite number above 0, "
                        "got nan; e.g. 3e-3; see 'memgrad train --help'\n")


def test_argparse_errors_are_one_line(cli):
    for args in (["train", "--no-such-option"], ["no-such-command"], ["tune"]):
        r = cli(*args)
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "usage:" not in r.stderr and "--help'" in r.stderr


def test_good_numbers_are_kept():
    args = cli_main.build_parser().parse_args(["train", "--lr", "1e-4", "--seed", "0"])
    assert args.lr == 1e-4 and args.seed == 0


# ---------------------------------------------------------------------------- model size


@pytest.mark.parametrize("d_model, heads, blocks, seq", [(16, 4, 1, 16), (48, 3, 2, 24),
                                                         (64, 4, 4, 64)])
def test_lm_parameters_counts_the_model(d_model, heads, blocks, seq):
    from memgrad.models import build_lm, lm_parameters

    model = build_lm(d_model, heads, blocks, seq)
    assert lm_parameters(d_model, blocks, seq) == sum(p.numel() for p in model.parameters())


def test_a_model_bigger_than_memory_is_refused_before_building(cli):
    from memgrad.models import lm_parameters

    limit = physical_memory()
    if limit is None:
        pytest.skip("this system does not report its physical memory")
    n = lm_parameters(65536, 64, 64)
    assert 16 * n > limit  # weights, gradients and two moments of float32
    r = cli("train", "--d-model", "65536", "--blocks", "64")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith(f"memgrad train: error: --d-model 65536 --blocks 64 make a model of "
                           f"{n:,} parameters, whose weights, gradients and AdamW state take ")
    assert line.endswith("choose a smaller --d-model or fewer --blocks")


def test_out_of_memory_is_one_line(capsys, monkeypatch):
    def run_out_of_memory(args: argparse.Namespace) -> int:
        raise MemoryError("Unable to allocate 3.00 GiB for an array")

    monkeypatch.setattr(cli_main, "run_train", run_out_of_memory)
    assert cli_main.main(["train"]) == 2
    assert capsys.readouterr().err == (
        "memgrad train: error: out of memory: Unable to allocate 3.00 GiB for an array; ask for "
        "a smaller model, batch or input\n"
    )


# ---------------------------------------------------------------------------- output paths


def _unwritable_system_directory() -> str:
    """A directory that even root cannot create files in (sysfs), or skip."""
    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pass
    except OSError:
        return "/sys"
    pytest.skip("no directory here refuses new files")


def _one_line(r: subprocess.CompletedProcess, command: str) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"memgrad {command}: error: ")
    return lines[0]


@pytest.mark.parametrize("command, option, name", [
    ("train", "--save", "w.npz"), ("tune", "--plot", "p.png"), ("tune", "--timeline", "t.png"),
])
def test_a_directory_that_takes_no_files(cli, command, option, name):
    path = f"{_unwritable_system_directory()}/{name}"
    args = [command, *POSITIONAL[command], option, path]
    line = _one_line(cli(*args), command)
    assert line.startswith(f"memgrad {command}: error: {option} {path}: cannot create files in "
                           "the directory '/sys' (")
    assert line.endswith("choose a path you can write to, or change its permissions")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes whatever the permissions say")
def test_a_directory_without_write_permission(cli, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = _one_line(cli("train", "--save", str(locked / "w.npz")), "train")
    finally:
        locked.chmod(0o700)
    assert f"cannot create files in the directory {str(locked)!r} (Permission denied)" in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes whatever the permissions say")
def test_a_read_only_file(cli, tmp_path):
    target = tmp_path / "w.npz"
    target.write_bytes(b"old")
    target.chmod(0o400)
    line = _one_line(cli("train", "--save", str(target)), "train")
    assert f"cannot write to {str(target)!r} (Permission denied)" in line
    assert target.read_bytes() == b"old"


def test_an_existing_directory(cli, tmp_path):
    line = _one_line(cli("train", "--save", str(tmp_path)), "train")
    assert line == f"memgrad train: error: --save {tmp_path}: is a directory; give a file name"
    line = _one_line(cli("tune", "mlp", "--plot", str(tmp_path)), "tune")
    assert line == f"memgrad tune: error: --plot {tmp_path}: is a directory; give a file name"


def test_save_where_numpy_would_write_into_a_directory(cli, tmp_path):
    (tmp_path / "w.npz").mkdir()  # numpy.savez("w") writes w.npz
    line = _one_line(cli("train", "--save", str(tmp_path / "w")), "train")
    assert line == (f"memgrad train: error: --save {tmp_path / 'w'}: "
                    f"{str(tmp_path / 'w.npz')!r}, where it would be written, is a directory; "
                    "give another file name")


def test_a_file_where_the_directory_should_be(cli, tmp_path):
    (tmp_path / "notes").write_text("x")
    path = tmp_path / "notes" / "w.npz"
    line = _one_line(cli("train", "--save", str(path)), "train")
    assert line == (f"memgrad train: error: --save {path}: {str(tmp_path / 'notes')!r} is a "
                    "file, not a directory; choose another path")


def test_the_check_leaves_nothing_behind(tmp_path):
    from memgrad.cli.output import check_writable

    existing = tmp_path / "kept.png"
    existing.write_bytes(b"picture")
    assert check_writable(str(existing), "--plot") == existing
    assert check_writable(str(tmp_path / "w"), "--save", ".npz") == tmp_path / "w.npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.png"]
    assert existing.read_bytes() == b"picture"


# ---------------------------------------------------------------------------- Ctrl-C

INTERRUPT_TIMEOUT = 120


def _interrupt(args: list[str], marker: str, group: bool = False) -> subprocess.CompletedProcess:
    """Start ``memgrad ARGS``, wait for a line containing ``marker`` on its stdout, then send
    SIGINT (to its whole process group, as a terminal does, when ``group``)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, "-m", "memgrad", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                break
        else:
            pytest.fail(f"memgrad {' '.join(args)} ended before printing {marker!r}: "
                        f"{proc.stderr.read()}")
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=INTERRUPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)  # the fault handler prints every thread's stack
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        pytest.fail(f"memgrad {' '.join(args)} did not end within {INTERRUPT_TIMEOUT} s of "
                    f"SIGINT; its stderr (stacks at SIGABRT):\n{err}")
    return subprocess.CompletedProcess(args, proc.returncode, "".join(seen) + out, err)


def test_ctrl_c_inside_a_compiled_function_is_an_interrupt(monkeypatch, capsys):
    # Ctrl-C in Python code that a numba function calls back into (numba's unpickling of
    # its constants) reaches the caller as a SystemError caused by the KeyboardInterrupt
    def interrupted(args: argparse.Namespace) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise SystemError("CPUDispatcher(<function column_sum_into>) returned a result "
                              "with an exception set") from e

    monkeypatch.setattr(cli_main, "_demo", interrupted)
    assert cli_main.main(["demo"]) == 130
    assert capsys.readouterr().err == "memgrad demo: interrupted\n"

    def failed(args: argparse.Namespace) -> int:
        raise SystemError("a SystemError of its own")

    monkeypatch.setattr(cli_main, "_demo", failed)
    with pytest.raises(SystemError, match="of its own"):
        cli_main.main(["demo"])


def test_ctrl_c_in_train(tmp_path):
    r = _interrupt(["train", "--steps", "1000000", *TINY, "--save", str(tmp_path / "w.npz")],
                   "step     1/")
    assert r.returncode == 130, r.stderr
    assert r.stderr == "memgrad train: interrupted\n"
    assert "Traceback" not in r.stdout
    assert list(tmp_path.iterdir()) == []  # nothing saved, nothing left by the path check


def test_ctrl_c_in_tune():
    r = _interrupt(["tune", "mlp", "--repeats", "100000"], "measuring")
    assert r.returncode == 130, r.stderr
    assert r.stderr == "memgrad tune: interrupted\n"


def _have_dist() -> bool:
    if importlib.util.find_spec("mpi4py") is None:
        return False
    from memgrad.distributed import DistributedError, launch

    try:
        launch.find_mpiexec()
    except DistributedError:
        return False
    return True


@pytest.mark.skipif(not _have_dist(), reason="the dist extra (mpi4py, mpiexec) is missing")
@pytest.mark.parametrize("group", [True, False], ids=["terminal", "launcher-only"])
def test_ctrl_c_in_train_on_ranks_it_started(group):
    r = _interrupt(["train", "--nproc", "2", "--steps", "1000000", *TINY], "step     1/", group)
    assert r.returncode == 130, r.stderr
    assert r.stderr == "memgrad train: interrupted\n"


# ---------------------------------------------------------------------------- rich text


def test_the_console_prints_markup_and_emoji_codes_as_written(capsys):
    console().print("model pkg.mod:smile: at [bold]here[/bold] :thumbs_up:")
    assert capsys.readouterr().out == "model pkg.mod:smile: at [bold]here[/bold] :thumbs_up:\n"


def _emoji_factory(tmp_path: Path) -> str:
    (tmp_path / "emo.py").write_text("from tests.cli.factories import tiny as smile\n")
    return "emo:smile"


def test_a_model_named_like_an_emoji_prints_as_written(cli, tmp_path):
    spec = _emoji_factory(tmp_path)
    r = cli("plan", spec, pythonpath=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "memgrad plan emo:smile: 12 ops in 12 stages" in r.stdout
    assert "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in r.stdout
    r = cli("tune", spec, "--repeats", "1", "--budgets", "50%", pythonpath=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "measuring emo:smile: one training step" in r.stdout
    assert "memgrad tune emo:smile: 6 stages" in r.stdout


def test_a_path_with_brackets_prints_as_written(cli, tmp_path):
    out = tmp_path / "[bold]red" / ":smile:w.npz"
    out.parent.mkdir()
    r = cli("train", "--steps", "1", *TINY, "--save", str(out))
    assert r.returncode == 0, r.stderr
    assert out.is_file()
    assert f"to {out} " in " ".join(r.stdout.split()) + " "  # rich may wrap the line


def test_an_interrupt_dropped_in_a_weakref_callback_is_raised_again():
    # Python prints and drops an exception raised in a weakref callback; Ctrl-C landing in
    # one (the memory tracker frees through them) must still end the command
    import weakref

    from memgrad.cli.__main__ import _interrupts_kept

    class Obj:
        pass

    def callback(ref):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), _interrupts_kept():
        obj = Obj()
        ref = weakref.ref(obj, callback)
        del obj  # the callback raises; Python drops it and calls the unraisable hook
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the SIGINT sent again arrives in this loop
            pass
    assert ref() is None
