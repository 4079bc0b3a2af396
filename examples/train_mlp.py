"""Train a perceptron to classify points by which of three rings they fall in.

A complete training loop with nothing but tensors: parameters are leaf tensors, the loss is
cross-entropy from ``log_softmax`` picked out with integer indexing, minibatches are drawn
(with replacement) from the global generator, and SGD with momentum updates the parameters
in place under ``no_grad``. Prints the loss and the accuracy as it trains, in a few seconds.

Run: python examples/train_mlp.py
"""

from __future__ import annotations

import math

import memgrad as mg
from memgrad import Tensor

CLASSES = 3


def rings(n: int) -> tuple[Tensor, Tensor]:
    """Points uniform in the square [-1, 1]^2, labelled 0, 1, 2 by their distance from 0."""
    x = mg.rand(n, 2) * 2 - 1
    r = (x * x).sum(dim=1).sqrt()
    return x, (r > 0.45).long() + (r > 0.8).long()


def init(sizes: list[int]) -> list[Tensor]:
    """Weights ``N(0, 1 / fan_in)`` and zero biases, as leaves that require grad."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append((mg.randn(fan_in, fan_out) / math.sqrt(fan_in)).requires_grad_())
        params.append(mg.zeros(fan_out, requires_grad=True))
    return params


def forward(params: list[Tensor], x: Tensor) -> Tensor:
    """Logits of shape ``(n, CLASSES)``: affine layers with ``tanh`` between them."""
    for i in range(0, len(params) - 2, 2):
        x = (x @ params[i] + params[i + 1]).tanh()
    return x @ params[-2] + params[-1]


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean negative log-likelihood of the true labels."""
    logp = logits.log_softmax(dim=1)
    return -logp[mg.arange(len(labels)), labels].mean()


def accuracy(params: list[Tensor], x: Tensor, labels: Tensor) -> float:
    """Fraction of points whose largest logit is the true class."""
    with mg.no_grad():
        return (forward(params, x).argmax(dim=1) == labels).float().mean().item()


def main() -> None:
    mg.manual_seed(0)
    x_train, y_train = rings(2000)
    x_test, y_test = rings(500)
    params = init([2, 64, 64, CLASSES])
    velocity = [mg.zeros_like(p) for p in params]
    lr, momentum, batch = 0.05, 0.9, 100
    steps_per_epoch = len(x_train) // batch

    print(f"train {len(x_train)} points, test {len(x_test)}, 2-64-64-{CLASSES} MLP")
    for epoch in range(1, 21):
        total = 0.0
        for _ in range(steps_per_epoch):
            idx = mg.randint(0, len(x_train), (batch,))
            loss = cross_entropy(forward(params, x_train[idx]), y_train[idx])
            loss.backward()
            with mg.no_grad():
                for p, v in zip(params, velocity):
                    v.mul_(momentum).add_(p.grad)
                    p.sub_(v * lr)
                    p.grad = None
            total += loss.item()
        if epoch % 4 == 0 or epoch == 1:
            print(f"epoch {epoch:2d}  loss {total / steps_per_epoch:.4f}  "
                  f"train acc {accuracy(params, x_train, y_train):.3f}  "
                  f"test acc {accuracy(params, x_test, y_test):.3f}")
    print(f"final test accuracy: {accuracy(params, x_test, y_test):.3f}")


if __name__ == "__main__":
    main()
