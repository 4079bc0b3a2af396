"""Let the planner choose what a training step keeps and what it recomputes, so that the
step fits a budget.

``memgrad.checkpoint.plan`` profiles one forward op by op and decides, for every value the
backward reads, whether it is kept or recomputed (and how often), with the least
recomputation whose predicted peak fits the budget. Here the budget is 40% of the plain
step's measured peak; the plan runs in the model's own forward (``plan.apply(model)``), and
its measured peak and gradients are compared with the prediction and the plain step. The
same from the command line: ``memgrad plan mlp --budget 40% --grads in-place``.

Run: python examples/plan_under_budget.py
"""

from __future__ import annotations

import numpy as np

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.checkpoint import Plan, plan

mg.manual_seed(0)
# widths that change along the chain: the cheapest values to keep are the narrow ones
widths = [64, 256, 256, 64, 256, 256, 64, 256, 256, 64, 256, 256, 64]
model = nn.Sequential(
    *[nn.Sequential(nn.Linear(a, b), nn.Tanh()) for a, b in zip(widths, widths[1:])]
)
x = mg.randn(1024, widths[0])
target = mg.randn(1024, widths[-1])


def loss_fn(out: mg.Tensor) -> mg.Tensor:
    return F.mse_loss(out, target)


def step(p: Plan | None) -> tuple[int, list[np.ndarray]]:
    """Peak bytes above the start of one step (gradients zeroed in place) and the
    gradients; ``p`` None is the plain step."""
    model.zero_grad(set_to_none=False)
    with mg.memory.track() as t:
        if p is None:
            loss = loss_fn(model(x))
        else:
            with p.apply(model):
                loss = loss_fn(model(x))
        loss.backward()
    return t.peak_above_start, [q.grad.numpy().copy() for q in model.parameters()
                                if q.grad is not None]


step(None)  # the gradients exist from here on, and are zeroed in place
plain, reference = step(None)
budget = int(0.4 * plain)
p = plan(model, x, budget_bytes=budget, loss_fn=loss_fn)
measured, grads = step(p)

print(f"plain step peak:  {plain:>11,} bytes")
print(f"budget (40%):     {budget:>11,} bytes")
print(p)
print(f"predicted peak:   {p.predicted_peak:>11,} bytes")
print(f"measured peak:    {measured:>11,} bytes ({100 * measured / p.predicted_peak:.0f}% of "
      "the prediction)")
print(f"measured peak fits the budget: {measured <= budget}")
print(f"gradients equal the plain step's: "
      f"{all(np.array_equal(a, b) for a, b in zip(reference, grads))}")
try:
    plan(model, x, budget_bytes=budget // 10, loss_fn=loss_fn)
except mg.PlanError as e:
    print(f"a tenth of that budget: PlanError: {str(e).split(';')[0]}")
