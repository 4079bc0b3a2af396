"""Let the planner choose where to cut a model so that a training step fits a budget.

``memgrad.checkpoint.plan`` profiles each stage once (bytes kept for backward, output
bytes, forward time) and picks the segment boundaries with the least recomputation whose
predicted peak fits the budget. Here the budget is 60% of the plain step's measured peak;
the plan is then run with ``checkpoint_sequential`` and its measured peak compared with the
prediction. The same command-line tool: ``memgrad plan mlp --budget 60%``.

Run: python examples/plan_under_budget.py
"""

from __future__ import annotations

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.checkpoint import checkpoint_sequential, plan

mg.manual_seed(0)
# widths that change along the chain: the cheapest cuts are after the narrow (64-wide) outputs
widths = [64, 256, 256, 64, 256, 256, 64, 256, 256, 64, 256, 256, 64]
model = nn.Sequential(
    *[nn.Sequential(nn.Linear(a, b), nn.Tanh()) for a, b in zip(widths, widths[1:])]
)
x = mg.randn(1024, widths[0])
target = mg.randn(1024, widths[-1])


def peak(segments: object) -> int:
    """Peak bytes above the start of one step from cleared gradients (None: no checkpoints)."""
    model.zero_grad()
    with mg.memory.track() as t:
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
        loss = F.mse_loss(out, target)
        del out
        loss.backward()
    model.zero_grad()
    return t.peak_above_start


plain = peak(None)
budget = int(0.6 * plain)
p = plan(list(model), x, budget_bytes=budget)
measured = peak(p)

print(f"plain step peak:  {plain:>11,} bytes")
print(f"budget (60%):     {budget:>11,} bytes")
print(p)
print(f"predicted peak:   {p.predicted_peak:>11,} bytes")
print(f"measured peak:    {measured:>11,} bytes ({100 * measured / p.predicted_peak:.0f}% of "
      "the prediction)")
print(f"measured peak fits the budget: {measured <= budget}")
try:
    plan(list(model), x, budget_bytes=budget // 10)
except mg.PlanError as e:
    print(f"a tenth of that budget: PlanError: {str(e).split(';')[0]}")
