"""Every script in examples/ runs to completion and prints what it promises, and the Python
code blocks of the README and the getting-started page run."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
# pages whose python blocks are runnable code (others, such as design notes, hold sketches)
PAGES = [
    "README.md",
    "docs/getting-started.md",
    "docs/checkpointing.md",
    "docs/distributed.md",
    "docs/jit.md",
    "docs/memory.md",
    "docs/planning.md",
    "docs/saving.md",
]

# a line every script must print; a new example without an entry here fails the test
EXPECTED = {
    "autograd_basics.py": [
        "d/dx sum(3x^2) at x = [1, 2, 3]: [6.0, 12.0, 18.0]",
        "first derivative 12.0, second derivative 12.0",
        "in-place change of a saved tensor is caught: True",
        "Cube.apply: d/dx x^3 at [1, 2] = [3.0, 12.0]",
        "gradcheck of tanh(x @ w): passed",
        "gradcheck of Cube: passed",
    ],
    "train_mlp.py": ["final test accuracy: "],
    "checkpoint_mlp.py": ["checkpointing lowers the peak: True", "gradients match exactly: True"],
    "plan_under_budget.py": [
        "predicted peak: ", "measured peak fits the budget: True", "PlanError: ",
    ],
    "transformer_lm.py": ["loss went down: True"],
    "data_parallel.py": [
        "1 rank(s), 64 examples per rank and step", "loss went down: True",
        "every rank holds the same weights: True",
    ],
}


def test_every_example_has_expectations():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@functools.cache
def run(name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str):
    r = run(name)
    assert r.returncode == 0, r.stdout + r.stderr
    for line in EXPECTED[name]:
        assert line in r.stdout, f"{name} did not print {line!r}:\n{r.stdout}"


def test_train_mlp_learns():
    r = run("train_mlp.py")
    assert r.returncode == 0, r.stdout + r.stderr
    accuracy = float(r.stdout.rsplit("final test accuracy:", 1)[1])
    assert accuracy > 0.85


@pytest.mark.parametrize("page", PAGES)
def test_doc_code_blocks_run(page: str):
    """A page's ``python`` blocks run in order, as one script (the pages say so)."""
    blocks = BLOCK.findall((ROOT / page).read_text())
    r = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, f"{page}:\n{r.stdout}{r.stderr}"
