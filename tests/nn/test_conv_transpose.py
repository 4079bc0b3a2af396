"""conv_transpose2d and nn.ConvTranspose2d: values against a direct NumPy scatter of each input
element times the kernel, gradients against finite differences (first and second order), the
layer's initialisation and output_size, and the error messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.autograd import gradcheck, gradgradcheck


def np_conv_transpose2d(x, w, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                        groups=1, dilation=(1, 1)):
    """Each input element x[n, c, i, j] adds x * w[c, o, ki, kj] at output position
    (i*s + ki*d - p, j*s + kj*d - p) of channel group(c) * C_out/groups + o."""
    n, ci, h, wd = x.shape
    _, cog, kh, kw = w.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((n, cog * groups, oh + 2 * ph, ow + 2 * pw))
    cig = ci // groups
    for c in range(ci):
        g = c // cig
        for o in range(cog):
            for i in range(h):
                for j in range(wd):
                    for ki in range(kh):
                        for kj in range(kw):
                            full[:, g * cog + o, i * sh + ki * dh, j * sw + kj * dw] += (
                                x[:, c, i, j] * w[c, o, ki, kj])
    out = full[:, :, ph:ph + oh, pw:pw + ow]
    return out if b is None else out + b[None, :, None, None]


CASES = [
    dict(),
    dict(stride=(2, 2)),
    dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
    dict(dilation=(2, 1), padding=(1, 1)),
    dict(groups=2, stride=(2, 1)),
]


@pytest.mark.parametrize("case", CASES)
def test_conv_transpose2d_matches_the_scatter_reference(case):
    rng = np.random.default_rng(0)
    groups = case.get("groups", 1)
    x = rng.standard_normal((2, 4, 3, 4))
    w = rng.standard_normal((4, 3, 2, 3))
    b = rng.standard_normal(3 * groups)
    args = dict(stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1, dilation=(1, 1))
    args.update(case)
    out = F.conv_transpose2d(mg.tensor(x), mg.tensor(w), mg.tensor(b), **args)
    np.testing.assert_allclose(out.numpy(), np_conv_transpose2d(x, w, b, **args),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [CASES[2], CASES[4]])
def test_conv_transpose2d_gradients(case):
    rng = np.random.default_rng(1)
    x = mg.tensor(rng.standard_normal((1, 4, 2, 3)), requires_grad=True)
    w = mg.tensor(rng.standard_normal((4, 2, 2, 2)), requires_grad=True)
    b = mg.tensor(rng.standard_normal(2 * case.get("groups", 1)), requires_grad=True)

    def f(x, w, b):
        return F.conv_transpose2d(x, w, b, **case)

    assert gradcheck(f, (x, w, b))
    assert gradgradcheck(f, (x, w, b))


def test_unbatched_input_is_one_sample():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((3, 2, 2)), rng.standard_normal((3, 2, 3, 3))
    out = F.conv_transpose2d(mg.tensor(x), mg.tensor(w), stride=2)
    np.testing.assert_allclose(out.numpy(), np_conv_transpose2d(x[None], w, stride=(2, 2))[0],
                               rtol=1e-12)


def test_layer_shapes_init_and_output_size():
    mg.manual_seed(0)
    up = nn.ConvTranspose2d(8, 6, kernel_size=3, stride=2, padding=1, groups=2)
    assert up.weight.shape == (8, 3, 3, 3) and up.bias.shape == (6,)
    # PyTorch's fan_in of a transposed conv's weight is weight.shape[1] * kH * kW
    bound = 1 / math.sqrt(3 * 3 * 3)
    assert np.abs(up.bias.numpy()).max() <= bound
    assert np.abs(up.weight.numpy()).max() <= bound  # kaiming_uniform(a=sqrt(5)) bound
    x = mg.randn(2, 8, 5, 5)
    assert up(x).shape == (2, 6, 9, 9)
    y = up(x, output_size=(2, 6, 10, 10))
    np.testing.assert_allclose(
        y.numpy(), np_conv_transpose2d(x.numpy().astype(np.float64),
                                       up.weight.numpy().astype(np.float64),
                                       up.bias.numpy().astype(np.float64), (2, 2), (1, 1),
                                       (1, 1), 2), rtol=1e-5, atol=1e-5)
    assert repr(up) == "ConvTranspose2d(8, 6, kernel_size=(3, 3), stride=(2, 2), " \
        "padding=(1, 1), groups=2)"
    with pytest.raises(ValueError, match=r"output_size \(11, 11\) is not reachable"):
        up(x, output_size=(11, 11))


def test_errors_name_the_api_and_the_fix():
    x, w = mg.ones(1, 4, 3, 3), mg.ones(4, 2, 2, 2)
    with pytest.raises(ValueError, match="output_padding .* must be smaller than stride"):
        F.conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(mg.errors.ShapeError, match="expects an input with 3 channels"):
        F.conv_transpose2d(x, mg.ones(3, 2, 2, 2))
    with pytest.raises(mg.errors.ShapeError, match=r"bias must have shape \(2,\)"):
        F.conv_transpose2d(x, w, mg.ones(3))
    with pytest.raises(TypeError, match="conv_transpose2d: input must be a Tensor"):
        F.conv_transpose2d(np.ones((1, 4, 3, 3)), w)
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.ConvTranspose2d(4, 3, 2, groups=2)
    with pytest.raises(ValueError, match="padding_mode='zeros'"):
        nn.ConvTranspose2d(4, 2, 2, padding_mode="reflect")
