"""F.conv3d and nn.Conv3d against a direct NumPy loop over output positions: strides,
padding, dilation, groups, bias, unbatched input; gradients by gradcheck and
gradgradcheck; PyTorch's default initialisation; the errors."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg

F = mg.nn.functional


def conv3d_np(x, w, b, stride, padding, dilation, groups):
    """Cross-correlation by its definition, one output element at a time."""
    n, c, *size = x.shape
    co, cg, *k = w.shape
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    out_size = [(s + 2 * p - d * (kk - 1) - 1) // st + 1
                for s, p, d, kk, st in zip(size, padding, dilation, k, stride)]
    out = np.zeros((n, co, *out_size))
    per = co // groups
    for o in range(co):
        g = o // per
        for pos in np.ndindex(*out_size):
            window = tuple(slice(q * st, q * st + d * (kk - 1) + 1, d)
                           for q, st, d, kk in zip(pos, stride, dilation, k))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + window]
            out[(slice(None), o) + pos] = (patch * w[o]).sum(axis=(1, 2, 3, 4))
    return out + (0 if b is None else b[None, :, None, None, None])


CASES = [
    dict(shape=(2, 3, 4, 5, 4), co=4, k=(3, 2, 3), stride=(1, 1, 1), padding=(0, 0, 0),
         dilation=(1, 1, 1), groups=1, bias=True),
    dict(shape=(1, 4, 6, 5, 5), co=6, k=(2, 3, 2), stride=(2, 1, 2), padding=(1, 2, 0),
         dilation=(2, 1, 1), groups=2, bias=True),
    dict(shape=(1, 3, 5, 6, 4), co=3, k=(3, 3, 1), stride=(1, 2, 3), padding=(2, 1, 1),
         dilation=(1, 2, 1), groups=3, bias=False),
]


@pytest.mark.parametrize("case", CASES)
def test_values_are_the_definitions(case):
    rng = np.random.default_rng(5)
    x = rng.normal(size=case["shape"])
    w = rng.normal(size=(case["co"], case["shape"][1] // case["groups"], *case["k"]))
    b = rng.normal(size=case["co"]) if case["bias"] else None
    args = (case["stride"], case["padding"], case["dilation"], case["groups"])
    got = F.conv3d(mg.tensor(x), mg.tensor(w), None if b is None else mg.tensor(b), *args)
    np.testing.assert_allclose(got.numpy(), conv3d_np(x, w, b, *args), atol=1e-12)


@pytest.mark.parametrize("case", CASES[1:])
def test_gradients_and_second_derivatives(case):
    rng = np.random.default_rng(6)
    shape = (1, case["shape"][1], 4, 4, 3)
    x = mg.tensor(rng.normal(size=shape), requires_grad=True)
    w = mg.tensor(rng.normal(size=(case["co"], shape[1] // case["groups"], *case["k"])),
                  requires_grad=True)
    b = mg.tensor(rng.normal(size=case["co"]), requires_grad=True)
    padding = (2, 2, 1)

    def fn(x, w, b):
        return F.conv3d(x, w, b, case["stride"], padding, case["dilation"], case["groups"])

    assert mg.autograd.gradcheck(fn, (x, w, b))
    assert mg.autograd.gradgradcheck(fn, (x, w, b))


def test_an_unbatched_input_and_the_module():
    mg.manual_seed(0)
    conv = mg.nn.Conv3d(2, 4, kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
    assert conv.weight.shape == (4, 2, 1, 3, 3) and conv.bias.shape == (4,)
    bound = 1 / np.sqrt(2 * 9)  # PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.abs(conv.weight.numpy()).max() <= bound and np.abs(conv.bias.numpy()).max() <= bound
    x = mg.randn(2, 3, 6, 6)
    y = conv(x)
    assert y.shape == (4, 3, 3, 3)
    np.testing.assert_allclose(y.numpy(), conv(x.unsqueeze(0))[0].numpy())
    assert repr(conv) == ("Conv3d(2, 4, kernel_size=(1, 3, 3), stride=(1, 2, 2), "
                          "padding=(0, 1, 1))")


def test_errors():
    x, w = mg.ones(1, 2, 3, 3, 3), mg.ones(1, 2, 2, 2, 2)
    with pytest.raises(mg.ShapeError, match="conv3d: expected a 4-D .* or 5-D"):
        F.conv3d(mg.ones(2, 3, 3), w)
    with pytest.raises(mg.ShapeError, match="conv3d: expected a 5-D weight"):
        F.conv3d(x, mg.ones(1, 2, 2, 2))
    with pytest.raises(mg.ShapeError, match="expects an input with 4 channels"):
        F.conv3d(x, mg.ones(2, 2, 1, 1, 1), groups=2)
    with pytest.raises(mg.ShapeError, match=r"conv3d: the kernel \(4, 2, 2\)"):
        F.conv3d(x, mg.ones(1, 2, 4, 2, 2))
    with pytest.raises(TypeError, match="conv3d: stride must be an int or a triple"):
        F.conv3d(x, w, stride=(1, 1))
    with pytest.raises(ValueError, match="conv3d: padding must be non-negative"):
        F.conv3d(x, w, padding=-1)
    with pytest.raises(TypeError, match=r"conv3d: input \(float32\) and weight \(float64\)"):
        F.conv3d(x, w.double())
    with pytest.raises(TypeError, match="Conv3d: kernel_size must be an int or a triple"):
        mg.nn.Conv3d(1, 1, (2, 2))
