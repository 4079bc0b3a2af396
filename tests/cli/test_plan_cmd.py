"""``memgrad plan``: the plan under a budget and its predictions."""

from __future__ import annotations

import json


def test_plan_json_fits_the_budget(cli):
    r = cli("plan", "mlp", "--budget", "75%", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["budget"] == "75%" and p["budget_bytes"] == int(0.75 * p["plain_peak_bytes"])
    assert p["predicted_peak_bytes"] <= p["budget_bytes"]
    assert p["segments"] == len(p["bounds"]) == len(p["sizes"]) > 1
    assert p["bounds"][0][0] == 0 and p["bounds"][-1][1] == p["stages"] == sum(p["sizes"])
    assert all(a[1] == b[0] for a, b in zip(p["bounds"], p["bounds"][1:]))
    assert p["predicted_extra_seconds"] > 0


def test_plan_prints_segments_and_predictions(cli):
    r = cli("plan", "transformer", "--budget", "50%")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "memgrad plan transformer (small): 6 stages" in out
    assert "plain step peak (measured): " in out and "budget: 50% = " in out
    for text in ("TokenEmbedding", "LMHead", "checkpointed", "cuts at: ", "predicted peak: ",
                 "predicted extra time: "):
        assert text in out
    assert "% of the plain peak" in out


def test_plan_without_budget_is_the_least_peak(cli):
    r = cli("plan", "tests.cli.factories:tiny", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["budget"] is None and p["budget_bytes"] is None
    assert p["predicted_peak_bytes"] < p["plain_peak_bytes"]
