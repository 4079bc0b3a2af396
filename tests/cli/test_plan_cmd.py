"""``memgrad plan``: the graph plan under a budget, its values by module and predictions."""

from __future__ import annotations

import json


def test_plan_json_fits_the_budget(cli):
    r = cli("plan", "mlp", "--budget", "75%", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["budget"] == "75%" and p["budget_bytes"] == int(0.75 * p["plain_peak_bytes"])
    assert p["predicted_peak_bytes"] <= p["budget_bytes"]
    assert p["stages"] > 1 and p["ops"] >= p["stages"] and p["levels"] >= 1
    assert p["predicted_extra_seconds"] > 0 and p["predicted_overhead_seconds"] >= 0
    # the plain step's time, the runtime's overhead and the recomputation
    assert p["predicted_step_seconds"] > p["predicted_extra_seconds"] + p[
        "predicted_overhead_seconds"]
    modules = {m["path"]: m for m in p["modules"]}
    assert "0.0" in modules and "15.1" in modules  # Linear and ReLU of the first and last
    assert sum(m["recomputed"] for m in modules.values()) > 0
    assert sum(m["kept"] for m in modules.values()) > 0


def test_plan_prints_values_by_module_and_predictions(cli):
    r = cli("plan", "transformer", "--budget", "50%")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "memgrad plan transformer (small): " in out and " stages" in out
    assert "plain step peak (measured): " in out and "budget: 50% = " in out
    for text in ("module", "kept bytes", "recomputed bytes", "recompute time", "1.attn",
                 "predicted peak: ", "predicted extra time: ", " of the plan's runtime"):
        assert text in out
    assert "% of the plain peak" in out


def test_plan_of_a_module_that_is_not_sequential(cli):
    r = cli("plan", "tests.cli.factories:residual", "--json", "--grads", "in-place")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["budget"] is None and p["budget_bytes"] is None
    assert p["predicted_peak_bytes"] < p["predicted_plain_peak_bytes"]
    assert any(m["path"].startswith("blocks.") for m in p["modules"])


def test_plan_of_the_gpt(cli):
    r = cli("plan", "gpt", "--budget", "60%", "--grads", "in-place")
    assert r.returncode == 0, r.stderr
    assert "h.0.attn" in r.stdout and "h.3.mlp" in r.stdout
