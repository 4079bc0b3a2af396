"""Bad input to every command: one line on stderr that names the fix, exit status 2, and no
traceback."""

from __future__ import annotations

import pytest

TINY_TRAIN = ["--steps", "2", "--batch", "2", "--seq", "16", "--d-model", "16", "--blocks", "1",
              "--samples", "0"]

CASES = {
    "unknown model": (["tune", "nosuch"], "unknown model 'nosuch': MODEL is one of mlp"),
    "unknown model (plan)": (["plan", "resnet"], "unknown model 'resnet'"),
    "model without a factory name": (["tune", "tests.cli.factories:"], "cannot read the model"),
    "module not found": (["tune", "no_such_package.models:make"],
                         "cannot import 'no_such_package.models'"),
    "factory not found": (["tune", "tests.cli.factories:nothing"],
                          "module 'tests.cli.factories' has no attribute 'nothing'"),
    "factory raises": (["plan", "tests.cli.factories:fails"],
                       "tests.cli.factories:fails() failed: RuntimeError: the data set is missing"),
    "factory returns a pair": (["tune", "tests.cli.factories:pair"],
                               "returned a tuple of 2; a factory must return (model, "),
    "factory model not a Module": (["tune", "tests.cli.factories:not_module"],
                                   "a factory must return (model, example_input, loss_fn) "
                                   "with model an nn.Module"),
    "factory model changes a tensor in place": (["plan", "tests.cli.factories:in_place"],
                                                "cannot plan tests.cli.factories:in_place"),
    "factory loss not scalar": (["tune", "tests.cli.factories:bad_loss"],
                                "one training step of tests.cli.factories:bad_loss failed"),
    "unparsable budgets": (["tune", "mlp", "--budgets", "25%,12XB"], "unknown unit 'XB'"),
    "empty budgets": (["tune", "mlp", "--budgets", ","], "no sizes"),
    "unparsable budget": (["plan", "mlp", "--budget", "lots"], "cannot read the size 'lots'"),
    "impossible budget": (["plan", "mlp", "--budget", "1KB"],
                          "no schedule of mlp fits a budget of 1.00 kB"),
    "unparsable train budget": (["train", "--budget", "1.2.3"], "--budget: cannot read the size"),
    "impossible train budget": (["train", "--budget", "100B", *TINY_TRAIN],
                                "no schedule fits --budget 100B"),
    "save into a missing directory": (["train", "--save", "no/such/dir/w.npz"],
                                      "the directory 'no/such/dir' does not exist"),
    "heads do not divide d_model": (["train", "--d-model", "30"],
                                    "--d-model 30 is not a multiple of --heads 4"),
    "plot into a missing directory": (["tune", "mlp", "--plot", "no/such/dir/p.png"],
                                      "does not exist"),
}


@pytest.mark.parametrize("args, message", list(CASES.values()), ids=list(CASES))
def test_bad_input(cli, args: list[str], message: str):
    r = cli(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"memgrad {args[0]}: error: ")
    assert message in lines[0]


def test_impossible_budget_names_a_budget_that_works(cli):
    r = cli("plan", "mlp", "--budget", "1KB")
    assert r.returncode == 2
    suggestion = r.stderr.split("pass --budget ")[1].split()[0]
    assert cli("plan", "mlp", "--budget", suggestion).returncode == 0


def test_module_that_fails_to_import(cli, tmp_path):
    (tmp_path / "broken_models.py").write_text("import numpy\nraise ImportError('needs torch')\n")
    r = cli("tune", "broken_models:make", pythonpath=str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        "memgrad tune: error: importing 'broken_models' for the model 'broken_models:make' "
        "failed: ImportError: needs torch; fix the module"
    )


def test_module_whose_dependency_is_missing(cli, tmp_path):
    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_xyz\n")
    r = cli("tune", "needs_dep:make", pythonpath=str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        "memgrad tune: error: importing 'needs_dep' for the model 'needs_dep:make' failed: "
        "No module named 'no_such_dependency_xyz'; install what it needs"
    )


def test_a_factory_on_the_module_path(cli, tmp_path):
    (tmp_path / "my_models.py").write_text(
        "from tests.cli.factories import tiny as make\n"
    )
    r = cli("plan", "my_models:make", "--json", pythonpath=str(tmp_path))
    assert r.returncode == 0, r.stderr
