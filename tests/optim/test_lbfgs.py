"""LBFGS: PyTorch's iterates on the Rosenbrock function (recorded from torch.optim.LBFGS in
float64), an exact quadratic minimum, the closure-call budget, the history, and the
errors."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg

# torch.optim.LBFGS from (-1.5, 2.0): (options, [(loss returned, parameters after)] per
# step, closure calls, iterations)
TORCH_ROSENBROCK = [
    ({}, [(12.5, [-0.781122729831648, 0.6131352916809746])], 20, 20),
    ({"line_search_fn": "strong_wolfe"},
     [(12.5, [-0.08511855589860293, -0.028757058413769698]),
      (1.3070983150500495, [0.9995835472529905, 0.9991550319577943])], 50, 38),
    ({"lr": 0.5, "max_iter": 7, "history_size": 3},
     [(12.5, [-1.4206165498638803, 2.0325928176157646]),
      (5.880239988469634, [-1.4044115150168057, 1.96007330267403])], 14, 14),
]


def rosenbrock(x: mg.Tensor) -> mg.Tensor:
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def minimise(x: mg.Tensor, fn, **options):
    opt = mg.optim.LBFGS([x], **options)
    calls = []

    def closure():
        opt.zero_grad()
        loss = fn(x)
        loss.backward()
        calls.append(x.tolist())
        return loss

    return opt, closure, calls


@pytest.mark.parametrize("options,steps,evals,iters", TORCH_ROSENBROCK)
def test_rosenbrock_iterates_are_pytorchs(options, steps, evals, iters):
    x = mg.tensor([-1.5, 2.0], dtype=mg.float64, requires_grad=True)
    opt, closure, calls = minimise(x, rosenbrock, **options)
    for loss, after in steps:
        assert opt.step(closure).item() == pytest.approx(loss, rel=1e-12)
        np.testing.assert_allclose(x.tolist(), after, rtol=1e-10, atol=1e-12)
    assert (opt.state[x]["func_evals"], opt.state[x]["n_iter"]) == (evals, iters)
    assert len(calls) == evals


def test_a_quadratic_converges_to_its_solution():
    rng = np.random.default_rng(4)
    m = rng.normal(size=(4, 4))
    a, b = m @ m.T + 4 * np.eye(4), rng.normal(size=4)
    x = mg.zeros(4, dtype=mg.float64, requires_grad=True)
    A, B = mg.tensor(a), mg.tensor(b)
    opt, closure, _ = minimise(x, lambda v: 0.5 * (v @ (A @ v)) - B @ v,
                               line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                               tolerance_change=1e-15)
    opt.step(closure)
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(a, b), atol=1e-8)


def test_closure_calls_stay_within_max_eval_and_history_within_history_size():
    x = mg.tensor([-1.5, 2.0, 0.5], dtype=mg.float64, requires_grad=True)
    opt, closure, calls = minimise(x, rosenbrock, max_iter=30, max_eval=12, history_size=2,
                                   line_search_fn="strong_wolfe")
    opt.step(closure)
    assert len(calls) <= 12
    assert len(opt.state[x]["old_dirs"]) <= 2
    opt2, closure2, calls2 = minimise(x, rosenbrock, max_iter=5)
    opt2.step(closure2)
    assert len(calls2) == 5  # the last iteration is not re-evaluated


def test_a_small_gradient_returns_at_once():
    x = mg.tensor([1.0, 1.0], dtype=mg.float64, requires_grad=True)  # the minimum
    opt, closure, calls = minimise(x, rosenbrock)
    assert opt.step(closure).item() == 0.0 and len(calls) == 1 and x.tolist() == [1.0, 1.0]


def test_several_parameters_and_float32():
    w = mg.tensor([[0.5, -1.0]], requires_grad=True)
    b = mg.tensor([2.0], requires_grad=True)
    target = mg.tensor([3.0])
    opt = mg.optim.LBFGS([w, b], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((w.sum() * 2 + b - target) ** 2).sum() + (w ** 2).sum() * 0.1
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    assert w.dtype == np.float32
    # the minimum: w = (u, u) with 2 (2 * 2u + b - 3) * 2 + 0.2 u = 0 and 4u + b = 3
    np.testing.assert_allclose([w.numpy().ravel()[0], b.item()], [0.0, 3.0], atol=1e-4)


def test_errors():
    x = mg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="LBFGS.step: L-BFGS needs a closure"):
        mg.optim.LBFGS([x]).step()
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        mg.optim.LBFGS([{"params": [x]}, {"params": [mg.ones(1, requires_grad=True)]}])
    with pytest.raises(ValueError, match="line_search_fn must be None or 'strong_wolfe'"):
        mg.optim.LBFGS([x], line_search_fn="backtracking")
    with pytest.raises(ValueError, match="history_size must be a positive int"):
        mg.optim.LBFGS([x], history_size=0)
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        mg.optim.LBFGS([x]).add_param_group({"params": [mg.ones(1, requires_grad=True)]})


def test_state_dict_carries_the_history_to_another_optimizer():
    x = mg.tensor([-1.5, 2.0], dtype=mg.float64, requires_grad=True)
    opt, closure, _ = minimise(x, rosenbrock, max_iter=5)
    opt.step(closure)
    y = mg.tensor(x.tolist(), dtype=mg.float64, requires_grad=True)
    other, closure_y, _ = minimise(y, rosenbrock, max_iter=5)
    other.load_state_dict(opt.state_dict())
    assert other.state[y]["n_iter"] == 5
    opt.step(closure)
    other.step(closure_y)
    assert x.tolist() == y.tolist()


def test_the_line_search_keeps_its_own_tolerance():
    # torch.optim.LBFGS with strong_wolfe and tolerance_change=0.5 moves x from 0.15 to
    # 0.286837585703 (its line search's bracket tolerance is 1e-9 whatever the group's);
    # with the group's 0.5 the search stopped before it moved
    x = mg.tensor([0.15], dtype=mg.float64, requires_grad=True)

    def bump(v: mg.Tensor) -> mg.Tensor:
        u = (v - 0.3) / 0.1
        return (0.01 * v * v - mg.exp(-u * u)).sum()

    opt, closure, _ = minimise(x, bump, line_search_fn="strong_wolfe", tolerance_change=0.5)
    opt.step(closure)
    assert x.tolist() == pytest.approx([0.28683758570267104], rel=1e-12)
