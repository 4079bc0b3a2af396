"""``memgrad tune``: the sweep, its JSON, the recommendation, and the pictures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memgrad.cli.tune import equal_counts

ROOT = Path(__file__).resolve().parents[2]
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG = b"\x89PNG\r\n\x1a\n"


def test_tune_json_on_a_small_mlp(cli):
    r = cli("tune", "mlp", "--json", "--repeats", "1")
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)["models"]
    assert result["model"] == "mlp" and result["stages"] == 16
    configs = {c["name"]: c for c in result["configurations"]}
    assert list(configs)[:4] == ["plain", "2 segments", "4 segments", "16 segments"]
    assert [c["budget"] for c in result["configurations"][4:]] == ["25%", "50%", "75%"]
    measured = [c for c in configs.values() if c["feasible"]]
    assert all(c["grads_match"] and c["max_grad_diff"] == 0.0 for c in measured)
    # checkpointing more of the chain keeps less alive
    plain, two, four = (configs[k]["peak_bytes"] for k in ("plain", "2 segments", "4 segments"))
    assert plain == result["plain_peak_bytes"]
    assert four < two < plain
    for c in result["configurations"][4:]:
        assert c["budget_bytes"] == int(plain * float(c["budget"].rstrip("%")) / 100)
        if c["feasible"]:
            assert c["predicted_peak_bytes"] <= c["budget_bytes"]
            assert c["peak_bytes"] <= 1.10 * c["budget_bytes"]
        else:
            assert c["smallest_feasible_bytes"] > c["budget_bytes"]
            assert c["peak_bytes"] is None
    assert any(c["feasible"] for c in result["configurations"][4:])
    assert result["recommended"] in configs and "fastest" in result["rule"]
    for c in measured:
        predicted, peak = c["predicted_peak_bytes"], c["peak_bytes"]
        assert abs(predicted - peak) <= 0.15 * peak, c["name"]
    timing = result["timing"]
    assert timing["rounds"] == 1 and timing["warmup_rounds"] == 1
    assert timing["spread"] == "min-max"
    for c in measured:
        (t,) = c["round_seconds"]  # one timed round: the median is that round
        (plain_t,) = configs["plain"]["round_seconds"]
        assert c["seconds"] == t > 0
        assert c["overhead"] == pytest.approx(t / plain_t - 1)
        assert c["overhead_spread"] == [pytest.approx(c["overhead"])] * 2
        # one round has no spread: only the plain step itself ties with the plain step
        assert c["ties_plain"] == (c["overhead"] == 0.0)


def test_tune_json_medians_spreads_and_ties(cli):
    r = cli("tune", "tests.cli.factories:tiny", "--json", "--repeats", "5",
            "--budgets", "50%")
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)["models"]
    assert result["timing"]["rounds"] == 5 and result["timing"]["spread"] == \
        "interquartile range"
    configs = {c["name"]: c for c in result["configurations"] if c["feasible"]}
    plain = np.array(configs["plain"]["round_seconds"])
    for name, c in configs.items():
        rounds = np.array(c["round_seconds"])
        assert len(rounds) == 5 and c["seconds"] == pytest.approx(np.median(rounds))
        ratios = rounds / plain
        assert c["overhead"] == pytest.approx(np.median(ratios) - 1)
        assert c["overhead_spread"] == pytest.approx(list(np.percentile(ratios, [25, 75]) - 1))
        lo, hi = c["overhead_spread"]
        assert c["ties_plain"] == (lo <= 0 <= hi)
        for other in c["tied_with"]:  # overlapping spreads, both ways
            assert name in configs[other]["tied_with"]
            olo, ohi = configs[other]["overhead_spread"]
            assert lo <= ohi and olo <= hi
    assert result["recommended"] in configs and "tie with the fastest" in result["rule"]


def test_tune_table_of_a_factory_with_absolute_budgets(cli):
    r = cli("tune", "tests.cli.factories:tiny", "--budgets", "300kB,1MB", "--repeats", "1")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "memgrad tune tests.cli.factories:tiny" in out
    for name in ("plain", "2 segments", "6 segments", "plan <= 300kB", "plan <= 1MB"):
        assert name in out
    assert "exact" in out and "differ" not in out
    assert "recommended: " in out


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed")
def test_tune_draws_the_pictures(cli, tmp_path):
    plot, timeline = tmp_path / "tradeoff.png", tmp_path / "timeline.png"
    r = cli("tune", "tests.cli.factories:tiny", "--repeats", "1", "--json",
            "--plot", str(plot), "--timeline", str(timeline))
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)  # the pictures do not mix into the JSON
    for path in (plot, timeline):
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000


def test_missing_matplotlib_is_one_line_and_exit_2(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # makes `import matplotlib` fail
        "from memgrad.cli.__main__ import main\n"
        f"raise SystemExit(main(['tune', 'mlp', '--plot', {str(tmp_path / 'p.png')!r}]))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        'memgrad tune: error: --plot needs matplotlib, which is not installed; run: pip install '
        '"memgrad[plot]"'
    ]
    assert not (tmp_path / "p.png").exists()


def test_equal_counts():
    assert equal_counts(1) == [1]
    assert equal_counts(3) == [1, 2, 3]
    assert equal_counts(16) == [1, 2, 4, 16]
    assert equal_counts(32) == [1, 2, 4, 6, 32]


def test_gradients_zeroed_in_place_leave_only_activations_and_transients(cli):
    peaks = {}
    for grads in ("cleared", "in-place"):
        r = cli("tune", "mlp", "--json", "--repeats", "1", "--budgets", "50%", "--grads", grads)
        assert r.returncode == 0, r.stderr
        (result,) = json.loads(r.stdout)["models"]
        configs = {c["name"]: c for c in result["configurations"]}
        assert all(c["grads_match"] for c in configs.values() if c["feasible"])
        peaks[grads] = configs["4 segments"]["peak_bytes"]
    # the small mlp is 16 x Linear(256, 256) on a batch of 512: with 4 segments the peak
    # comes in backward, after several weight gradients (256 KiB each) have been allocated
    # when they are cleared; zeroed in place, one is in flight at a time
    assert peaks["cleared"] - peaks["in-place"] >= 4 * 256 * 256 * 4
