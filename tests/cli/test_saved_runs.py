"""``memgrad train --save`` / ``--resume`` and ``memgrad sample``: the run file holds the
model's hyperparameters, weights, AdamW state and step count; training N steps, saving and
resuming M steps gives bit for bit the losses and weights of N + M steps in one run; sample
writes what ``generate`` writes with the saved model; bad files and options are one-line
errors with exit status 2."""

from __future__ import annotations

import argparse
import pickle

import numpy as np
import pytest

import memgrad as mg
from memgrad.cli.output import CliError
from memgrad.cli.train import TRAIN_DEFAULTS, _resolve_options, generate, printable
from memgrad.models import build_lm
from tests.cli.conftest import run_cli

MODEL = ["--batch", "4", "--seq", "32", "--d-model", "32", "--heads", "4", "--blocks", "2",
         "--lr", "1e-2", "--samples", "0", "--seed", "3"]


def _ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return " ".join(r.stdout.split())  # rich wraps long lines


def _one_line(r, command):
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"memgrad {command}: error: "), lines[0]
    return lines[0].removeprefix(f"memgrad {command}: error: ")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Five steps in one run; three steps saved, then resumed for two."""
    d = tmp_path_factory.mktemp("runs")
    whole = _ok(run_cli("train", "--steps", "5", *MODEL, "--save", str(d / "whole")))
    first = _ok(run_cli("train", "--steps", "3", *MODEL, "--save", str(d / "first")))
    resumed = _ok(run_cli("train", "--steps", "2", "--resume", str(d / "first.npz"),
                          "--samples", "0", "--save", str(d / "resumed")))
    return d, whole, first, resumed


def test_the_run_file_holds_hyperparameters_weights_and_optimizer_state(runs):
    d, whole, _, _ = runs
    run = mg.load(d / "whole.npz")
    assert run["kind"] == "memgrad train" and run["version"] == 1
    assert run["model"] == {"d_model": 32, "heads": 4, "blocks": 2, "seq": 32,
                            "dtype": "float32"}
    assert run["training"] == {"lr": 1e-2, "batch": 4, "seed": 3, "world": 1}
    assert run["step"] == 5 and run["losses"].shape == (5,)
    assert run["optimizer"]["state"][0]["step"] == 5
    model = build_lm(32, 4, 2, 32)
    assert model.load_state_dict(run["weights"]) == ([], [])
    assert "saved 30 tensors" in whole and "step 5 to" in whole
    with np.load(d / "whole.npz", allow_pickle=False) as archive:  # plain data, no pickle
        assert "__memgrad__" in archive.files


def test_resume_continues_bit_for_bit(runs):
    d, whole, first, resumed = runs
    a, b, c = (mg.load(d / f"{n}.npz") for n in ("whole", "first", "resumed"))
    assert b["step"] == 3 and c["step"] == 5
    assert c["losses"].tobytes() == a["losses"].tobytes()  # every step's loss, bit for bit
    assert c["weights"].keys() == a["weights"].keys()
    for name in a["weights"]:
        same = np.asarray(a["weights"][name]).tobytes() == np.asarray(c["weights"][name]).tobytes()
        assert same, name
    for p, state in a["optimizer"]["state"].items():
        for key, value in state.items():
            assert np.array_equal(c["optimizer"]["state"][p][key], value), (p, key)
    assert "resuming" in resumed and "step 3, loss" in resumed and "2 more steps" in resumed
    assert "step 4/5" in resumed and "step 5/5" in resumed and "step 1/" not in resumed
    assert "step 1/3" in first


def test_sample_writes_what_generate_writes_with_the_saved_model(runs, cli):
    d = runs[0]
    path = str(d / "whole.npz")
    r = cli("sample", path, "--prompt", "import ", "--tokens", "40", "--temperature", "0.9",
            "--seed", "7")
    assert r.returncode == 0, r.stderr
    run = mg.load(path)
    model = build_lm(32, 4, 2, 32)
    model.load_state_dict(run["weights"])
    prompt = np.frombuffer(b"import ", dtype=np.uint8).astype(np.int64)[None]
    cont = generate(model, prompt, 40, 32, 0.9, np.random.default_rng(7))[0]
    assert r.stdout == printable(b"import " + bytes(cont.tolist())) + "\n"
    again = cli("sample", path, "--prompt", "import ", "--tokens", "40", "--temperature",
                "0.9", "--seed", "7")
    assert again.stdout == r.stdout
    greedy = cli("sample", path, "--tokens", "10", "--temperature", "0")
    cont = generate(model, np.frombuffer(b"def ", np.uint8).astype(np.int64)[None], 10, 32,
                    0.0, np.random.default_rng(0))[0]
    assert greedy.stdout == printable(b"def " + bytes(cont.tolist())) + "\n"


def _files(tmp_path):
    weights = tmp_path / "weights.npz"
    mg.save(build_lm(8, 2, 1, 8).state_dict(), weights)
    old = tmp_path / "old.npz"
    np.savez(old, **build_lm(8, 2, 1, 8).state_dict())
    pickled = tmp_path / "p.pt"
    pickled.write_bytes(pickle.dumps({"w": 1}))
    return weights, old, pickled


def test_sample_refuses_what_is_not_a_run_file(cli, tmp_path, runs):
    weights, old, pickled = _files(tmp_path)
    line = _one_line(cli("sample", str(tmp_path / "nothing")), "sample")
    assert line == (f"{tmp_path / 'nothing'}: no such file; give the path 'memgrad train "
                    "--save' printed")
    line = _one_line(cli("sample", str(runs[0] / "whole")), "sample")
    assert line.endswith("no such file; did you mean " + str(runs[0] / "whole") +
                         ".npz (--save adds .npz)?")
    line = _one_line(cli("sample", str(weights)), "sample")
    assert "was written by mg.save but not by memgrad train" in line
    assert line.endswith("give a file written by 'memgrad train --save'")
    line = _one_line(cli("sample", str(old)), "sample")
    assert "a NumPy .npz archive without memgrad's header" in line
    line = _one_line(cli("sample", str(pickled)), "sample")
    assert "it is a pickle; memgrad never loads pickle" in line
    line = _one_line(cli("sample", str(tmp_path)), "sample")
    assert line.endswith("is a directory; give the file 'memgrad train --save' wrote")


def test_sample_refuses_an_empty_prompt(cli, runs):
    line = _one_line(cli("sample", str(runs[0] / "whole.npz"), "--prompt", ""), "sample")
    assert line == "--prompt is empty; give at least one character, e.g. --prompt 'def '"


def test_sample_names_the_range_of_the_temperature(cli, runs):
    line = _one_line(cli("sample", str(runs[0] / "whole.npz"), "--temperature", "-1"), "sample")
    assert line.startswith("argument --temperature: must be a finite number of 0 or more, got "
                           "-1; e.g. 0.8, or 0 for the most likely bytes")


def test_resume_refuses_a_different_model_and_a_file_that_is_not_a_run(cli, runs, tmp_path):
    path = runs[0] / "whole.npz"
    line = _one_line(cli("train", "--resume", str(path), "--d-model", "64", "--steps", "1"),
                     "train")
    assert line == (f"--d-model 64: the model saved in {path} has --d-model 32; drop "
                    "--d-model (a resumed run keeps its model)")
    weights, _, pickled = _files(tmp_path)
    line = _one_line(cli("train", "--resume", str(weights)), "train")
    assert line.startswith(f"--resume {weights}: was written by mg.save but not by memgrad")
    line = _one_line(cli("train", "--resume", str(pickled)), "train")
    assert line.startswith(f"--resume {pickled} is not a file written by mg.save: it is a "
                           "pickle")


def test_resume_fills_the_options_left_out_from_the_run_and_keeps_the_ones_given(runs):
    path = str(runs[0] / "first.npz")
    blank = {key: None for key in TRAIN_DEFAULTS}
    args = argparse.Namespace(**blank, resume=path)
    run = _resolve_options(args)
    assert run["step"] == 3
    assert (args.d_model, args.seq, args.batch, args.seed, args.lr, args.dtype) == (
        32, 32, 4, 3, 1e-2, "float32")
    args = argparse.Namespace(**blank | {"lr": 1e-4, "d_model": 32}, resume=path)
    _resolve_options(args)
    assert args.lr == 1e-4 and args.d_model == 32  # a model option equal to the saved one
    fresh = argparse.Namespace(**blank, resume=None)
    assert _resolve_options(fresh) is None and vars(fresh) == {**TRAIN_DEFAULTS, "resume": None}
    with pytest.raises(CliError, match="--heads 2: the model saved in"):
        _resolve_options(argparse.Namespace(**blank | {"heads": 2}, resume=path))
