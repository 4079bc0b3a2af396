"""Floor division, remainder and div's rounding modes: values and dtypes against Python's own
integer and float arithmetic (whose // and % are PyTorch's conventions), gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg

PAIRS = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, 5)]


def test_integer_floor_division_and_remainder_follow_python():
    a = mg.tensor([p[0] for p in PAIRS])
    b = mg.tensor([p[1] for p in PAIRS])
    assert (a // b).tolist() == [x // y for x, y in PAIRS]
    assert (a % b).tolist() == [x % y for x, y in PAIRS]
    assert mg.floor_divide(a, b).dtype == np.int64 and mg.remainder(a, b).dtype == np.int64
    assert (a // 2).tolist() == [x // 2 for x, _ in PAIRS]
    assert (9 // b).tolist() == [9 // y for _, y in PAIRS]
    assert (9 % b).tolist() == [9 % y for _, y in PAIRS]


def test_div_rounding_modes():
    a = mg.tensor([p[0] for p in PAIRS])
    b = mg.tensor([p[1] for p in PAIRS])
    assert mg.div(a, b, rounding_mode="floor").tolist() == [x // y for x, y in PAIRS]
    assert a.div(b, rounding_mode="trunc").tolist() == [int(x / y) for x, y in PAIRS]
    assert mg.div(a, b, rounding_mode="trunc").dtype == np.int64
    f = mg.tensor([7.5, -7.5, 2.0, -0.25])
    assert mg.div(f, 2.0, rounding_mode="trunc").tolist() == [3.0, -3.0, 1.0, -0.0]
    assert mg.div(f, 2.0, rounding_mode="floor").tolist() == [3.0, -4.0, 1.0, -1.0]
    assert mg.div(f, 2.0).tolist() == [3.75, -3.75, 1.0, -0.125]
    with pytest.raises(ValueError, match="rounding_mode must be None, 'floor' or 'trunc'"):
        mg.div(f, 2.0, rounding_mode="round")


def test_float_remainder_has_the_divisors_sign():
    xs, ys = [7.5, -7.5, 7.5, -7.5], [2.0, 2.0, -2.0, -2.0]
    out = mg.tensor(xs) % mg.tensor(ys)
    assert out.tolist() == [math.fmod(x, y) + (y if math.fmod(x, y) * y < 0 else 0)
                            for x, y in zip(xs, ys)]


def test_gradients():
    x = mg.tensor([5.0, -3.0, 2.5], requires_grad=True)
    y = mg.tensor([2.0, 2.0, -1.5], requires_grad=True)
    (x % y).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
    assert y.grad.tolist() == [-(5.0 // 2.0), -(-3.0 // 2.0), -(2.5 // -1.5)]
    x.grad = y.grad = None
    q = x // y
    assert q.requires_grad  # as in PyTorch: a zero gradient, not a constant
    q.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0] and y.grad.tolist() == [0.0, 0.0, 0.0]
