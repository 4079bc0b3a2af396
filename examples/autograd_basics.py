"""A tour of memgrad's autograd: gradients, grad modes, hooks, saved tensors, custom
functions and gradient checking. Each section prints what it computed.

Run: python examples/autograd_basics.py
"""

from __future__ import annotations

import memgrad as mg
from memgrad import Tensor
from memgrad.autograd import FunctionCtx


def gradients() -> None:
    """``backward`` fills ``.grad`` of the leaves; ``autograd.grad`` returns gradients."""
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (3 * x**2).sum()
    y.backward()
    assert x.grad is not None  # filled by backward
    print("d/dx sum(3x^2) at x = [1, 2, 3]:", x.grad.tolist())

    t = mg.tensor(2.0, requires_grad=True)
    (d1,) = mg.autograd.grad(t**3, t, create_graph=True)
    assert d1 is not None
    (d2,) = mg.autograd.grad(d1, t)
    assert d2 is not None
    print(f"t^3 at t = 2: first derivative {d1.item()}, second derivative {d2.item()}")


def graph() -> None:
    """Every result of a differentiable op has a ``grad_fn`` linking back to its inputs."""
    x = mg.ones(2, requires_grad=True)
    y = (x * 2).exp().sum()
    node, chain = y.grad_fn, []
    while node is not None:
        chain.append(node.name())
        node = node.next_functions[0][0] if node.next_functions else None
    print("backward graph:", " -> ".join(chain))


def grad_modes() -> None:
    """Under ``no_grad`` nothing is recorded; ``detach`` cuts a tensor out of the graph."""
    w = mg.ones(3, requires_grad=True)
    with mg.no_grad():
        frozen = w * 2
    print("under no_grad: requires_grad =", frozen.requires_grad)
    print("detached: requires_grad =", (w * 2).detach().requires_grad)


def hooks() -> None:
    """A tensor hook sees (and may replace) a gradient; ``retain_grad`` keeps a non-leaf's."""
    x = mg.tensor([1.0, -1.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    handle = h.register_hook(lambda g: g.clamp(max=0.5))
    (h * h).sum().backward()
    assert h.grad is not None and x.grad is not None
    print("hidden grad (clipped by the hook):", h.grad.tolist(), "-> x.grad:", x.grad.tolist())
    handle.remove()


def saved_tensors() -> None:
    """``saved_tensors_hooks`` sees every tensor that backward will need."""
    seen = []

    def pack(t: Tensor) -> Tensor:
        seen.append(tuple(t.shape))
        return t

    with mg.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        w = mg.randn(4, 3, requires_grad=True)
        loss = (mg.randn(5, 4) @ w).tanh().sum()
    loss.backward()
    print("tensors saved for backward:", seen)

    a = mg.randn(3, requires_grad=True)
    b = a.exp()
    b.add_(1)
    try:
        b.sum().backward()
    except RuntimeError as e:
        print("in-place change of a saved tensor is caught:", "modified by an inplace" in str(e))


class Cube(mg.autograd.Function):
    """``x ** 3`` with a hand-written backward."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx: FunctionCtx, g: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        assert x is not None
        out: Tensor = g * 3 * x * x
        return out


def custom_function() -> None:
    """A ``Function`` defines its own backward and is used through ``apply``."""
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    Cube.apply(x).sum().backward()
    assert x.grad is not None
    print("Cube.apply: d/dx x^3 at [1, 2] =", x.grad.tolist())


def gradient_check() -> None:
    """``gradcheck`` compares analytic gradients with finite differences in float64."""
    x = mg.randn(4, dtype=mg.float64, requires_grad=True)
    w = mg.randn(4, 3, dtype=mg.float64, requires_grad=True)
    ok = mg.autograd.gradcheck(lambda x, w: (x @ w).tanh().sum(), (x, w))
    print("gradcheck of tanh(x @ w):", "passed" if ok else "failed")
    ok = mg.autograd.gradcheck(Cube.apply, (x,))
    print("gradcheck of Cube:", "passed" if ok else "failed")


def main() -> None:
    """Run every section with a fixed seed."""
    mg.manual_seed(0)
    for section in (gradients, graph, grad_modes, hooks, saved_tensors, custom_function,
                    gradient_check):
        print(f"-- {section.__name__}")
        section()


if __name__ == "__main__":
    main()
