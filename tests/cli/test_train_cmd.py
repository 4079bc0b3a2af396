"""``memgrad train``: a tiny run learns, compares the planned and the plain step, samples,
and saves weights that load back."""

from __future__ import annotations

import re

import numpy as np
from rich.console import Console

import memgrad as mg
from memgrad.cli.measure import accounting
from memgrad.cli.train import _choose_plan, generate, stdlib_corpus
from memgrad.models import VOCAB, build_lm, sample_batch

TINY = ["--steps", "12", "--batch", "4", "--seq", "32", "--d-model", "32", "--heads", "4",
        "--blocks", "2", "--lr", "1e-2", "--log-every", "3", "--samples", "1"]


def test_train_learns_and_saves_loadable_weights(cli, tmp_path):
    r = cli("train", *TINY, "--save", str(tmp_path / "weights"))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    steps = re.findall(r"^step +(\d+)/12 +loss ([0-9.]+) .* tok/s +peak ", out, re.M)
    assert [int(s) for s, _ in steps] == [1, 3, 6, 9, 12]
    losses = [float(loss) for _, loss in steps]
    assert losses[-1] < losses[0] - 1.0
    assert re.search(r"^loss [0-9.]+ -> [0-9.]+ \(training batches\); held-out", out, re.M)
    assert "plan: " in out and "predicted peak" in out
    assert re.search(r"planned .* exact", out)
    assert re.search(r"^│ planned .* ms │ +(tie ±\d+%|[+-]\d+% \([+-]\d+\.\.[+-]\d+\)) │", out,
                     re.M)
    flat = " ".join(out.split())
    assert "vs plain (IQR)" in out and "the median of 5 rounds" in flat
    assert re.search(r"training step \(planned, with the optimizer\): median \d+ ms, "
                     r"interquartile range \d+\.\.\d+ ms, over 10 steps after the first 2 "
                     r"\(warm-up, not counted\)", flat)
    assert "sample 1" in out
    path = tmp_path / "weights.npz"
    assert f"to {path}" in out.replace("\n", "")
    state = mg.load(path)["weights"]
    model = build_lm(d_model=32, heads=4, blocks=2, seq=32)
    assert model.load_state_dict(state) == ([], [])
    assert np.array_equal(model.state_dict()["0.tokens.weight"], state["0.tokens.weight"])


def test_corpus_is_the_standard_library_in_a_fixed_order():
    text, files = stdlib_corpus(max_bytes=50_000)
    again, _ = stdlib_corpus(max_bytes=50_000)
    assert text == again and len(text) == 50_000
    assert files[0].name == "textwrap.py" and text.startswith(files[0].read_bytes()[:100])


def test_batches_predict_the_next_byte():
    tokens = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz" * 4, dtype=np.uint8)
    x, y = sample_batch(tokens, 3, 5, np.random.default_rng(0))
    xs, ys = x.numpy(), y.numpy().reshape(3, 5)
    assert np.array_equal(ys[:, :-1], xs[:, 1:])
    assert np.all((ys - xs) % 26 == 1)


def test_generate_is_greedy_at_temperature_zero_and_leaves_no_graph():
    mg.manual_seed(0)
    model = build_lm(d_model=16, heads=2, blocks=1, seq=8)
    prompts = np.array([[1, 2, 3], [4, 5, 6]])
    a = generate(model, prompts, 10, 8, 0.0, np.random.default_rng(0))
    b = generate(model, prompts, 10, 8, 0.0, np.random.default_rng(1))
    assert a.shape == (2, 10) and np.array_equal(a, b)
    assert ((0 <= a) & (a < VOCAB)).all()
    assert all(p.grad is None for p in model.parameters())


def test_an_impossible_default_budget_falls_back_to_the_least_peak():
    mg.manual_seed(0)
    model = build_lm(d_model=16, heads=2, blocks=2, seq=8)
    x, y = sample_batch(np.arange(100, dtype=np.uint8), 2, 8, np.random.default_rng(0))
    out = Console(record=True, width=200)
    with accounting():
        # a plain peak of 100 bytes makes the default budget (half of it) impossible
        chosen = _choose_plan(model, x, y, None, 100, out)
    assert chosen.budget_bytes is None and chosen.predicted_peak > 50
    assert "using the smallest feasible budget" in out.export_text()
