"""Identity, the activation modules (ReLU in place too), Conv1d, AvgPool2d, AdaptiveAvgPool2d,
Upsample (nearest and bilinear), the loss modules and the ModuleDict/ParameterList/ParameterDict
containers, against NumPy formulations of PyTorch's definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad import nn
from memgrad.autograd import gradcheck, gradgradcheck


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def T(a, requires_grad=False):
    return mg.tensor(a, requires_grad=requires_grad)


# ---------------------------------------------------------------------------- activations


@pytest.mark.parametrize("module,ref", [
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (nn.ELU(0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    (nn.Softplus(beta=2.0, threshold=3.0),
     lambda x: np.where(2 * x > 3, x, np.log1p(np.exp(2 * x)) / 2)),
    (nn.Mish(), lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    (nn.Identity(3, bias=False), lambda x: x),
])
def test_activation_modules_match_their_formulas(module, ref):
    x = 3 * rand(4, 5)
    np.testing.assert_allclose(module(T(x)).numpy(), ref(x), rtol=1e-12, atol=1e-300)
    assert list(module.parameters()) == []


def test_inplace_activation_module():
    x = T(rand(3))
    assert nn.LeakyReLU(0.1, inplace=True)(x) is x
    assert repr(nn.SiLU(inplace=True)) == "SiLU(inplace=True)"


# ---------------------------------------------------------------------------- conv1d


def conv1d_ref(x, w, b, stride=1, padding=0, dilation=1, groups=1):
    n, c, length = x.shape
    co, cg, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    out_len = (length + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((n, co, out_len))
    og = co // groups
    for o in range(co):
        g = o // og
        for t in range(out_len):
            window = xp[:, g * cg:(g + 1) * cg, t * stride:t * stride + dilation * (k - 1) + 1
                        :dilation]
            out[:, o, t] = (window * w[o]).sum(axis=(1, 2))
    return out + (0 if b is None else b[None, :, None])


def test_conv1d_matches_a_direct_sum_with_stride_padding_dilation_groups():
    conv = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2).double()
    x = rand(2, 4, 9)
    want = conv1d_ref(x, conv.weight.numpy(), conv.bias.numpy(), 2, 2, 2, 2)
    np.testing.assert_allclose(conv(T(x)).numpy(), want, rtol=1e-12)
    assert conv.weight.shape == (6, 2, 3)
    bound = 1 / math.sqrt(2 * 3)
    assert np.abs(conv.weight.numpy()).max() <= bound
    fn = lambda x, w, b: F.conv1d(x, w, b, padding=1)  # noqa: E731
    args = (T(rand(2, 3, 5), True), T(rand(2, 3, 2, seed=1), True), T(rand(2, seed=2), True))
    assert gradcheck(fn, args) and gradgradcheck(fn, args)
    single = F.conv1d(T(x[0]), conv.weight, conv.bias, 2, 2, 2, 2)
    np.testing.assert_allclose(single.numpy(), want[0], rtol=1e-12)
    assert repr(conv) == ("Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(2,), "
                          "dilation=(2,), groups=2)")
    with pytest.raises(mg.errors.ShapeError, match="conv1d: expected a 2-D"):
        F.conv1d(mg.zeros(1, 1, 1, 4), conv.weight)


# ---------------------------------------------------------------------------- pooling


def avg_pool_ref(x, k, s, p, count_include_pad=True, divisor=None):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    inside = np.pad(np.ones((h, w)), p)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
            count = divisor or (k * k if count_include_pad else
                                inside[i * s:i * s + k, j * s:j * s + k].sum())
            out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


@pytest.mark.parametrize("k,s,p,cip,div", [(2, 2, 0, True, None), (3, 2, 1, True, None),
                                           (3, 1, 1, False, None), (3, 2, 1, True, 4)])
def test_avg_pool2d_matches_window_means(k, s, p, cip, div):
    x = rand(2, 3, 7, 6)
    pool = nn.AvgPool2d(k, s, p, count_include_pad=cip, divisor_override=div)
    np.testing.assert_allclose(pool(T(x)).numpy(), avg_pool_ref(x, k, s, p, cip, div),
                               rtol=1e-12)
    fn = lambda a: F.avg_pool2d(a, k, s, p, count_include_pad=cip)  # noqa: E731
    assert gradcheck(fn, (T(rand(1, 2, 5, 5), True),))


def test_avg_pool2d_errors():
    with pytest.raises(NotImplementedError, match="ceil_mode=True"):
        F.avg_pool2d(mg.zeros(1, 1, 4, 4), 2, ceil_mode=True)
    with pytest.raises(ValueError, match="at most half of kernel_size"):
        F.avg_pool2d(mg.zeros(1, 1, 4, 4), 2, padding=2)


def adaptive_ref(x, oh, ow):
    h, w = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        h0, h1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
        for j in range(ow):
            w0, w1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            out[..., i, j] = x[..., h0:h1, w0:w1].mean(axis=(-2, -1))
    return out


@pytest.mark.parametrize("size,want", [(1, (1, 1)), ((3, 4), (3, 4)), ((None, 2), (7, 2)),
                                       (5, (5, 5))])
def test_adaptive_avg_pool2d_uses_pytorchs_windows(size, want):
    x = rand(2, 3, 7, 5)
    y = nn.AdaptiveAvgPool2d(size)(T(x))
    assert y.shape == (2, 3) + want
    np.testing.assert_allclose(y.numpy(), adaptive_ref(x, *want), rtol=1e-12)
    assert gradcheck(lambda a: F.adaptive_avg_pool2d(a, (2, 3)), (T(rand(1, 2, 5, 4), True),))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(T(x[0]), 2).numpy(), adaptive_ref(x[0], 2, 2),
                               rtol=1e-12)


# ---------------------------------------------------------------------------- upsample


def test_upsample_nearest_repeats_each_element():
    x = rand(2, 3, 2, 3)
    up = nn.Upsample(scale_factor=2)
    y = up(T(x, requires_grad=True))
    np.testing.assert_array_equal(y.numpy(), x.repeat(2, axis=2).repeat(2, axis=3))
    np.testing.assert_array_equal(nn.Upsample(size=(4, 9))(T(x)).numpy(),
                                  x.repeat(2, axis=2).repeat(3, axis=3))
    np.testing.assert_array_equal(nn.Upsample(scale_factor=3)(T(x[:, :, 0])).numpy(),
                                  x[:, :, 0].repeat(3, axis=2))
    # each input element's gradient is the sum over its copies
    assert gradcheck(lambda a: nn.Upsample(scale_factor=(2, 1))(a).pow(2),
                     (T(rand(1, 2, 2, 2), True),))
    # a fractional factor reads source index floor(i / scale), as PyTorch's nearest mode
    np.testing.assert_array_equal(nn.Upsample(scale_factor=1.5)(T(x)).numpy(),
                                  x[:, :, [0, 0, 1]][:, :, :, [0, 0, 1, 2]])
    with pytest.raises(NotImplementedError, match="mode 'bicubic' is not supported"):
        nn.Upsample(scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="align_corners only applies"):
        nn.Upsample(scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        nn.Upsample()


def _bilinear_reference(x, oh, ow, align_corners):
    """Per output pixel: the source coordinate of each axis, and the weighted four corners."""
    n, c, h, w = x.shape
    out = np.empty((n, c, oh, ow))

    def source(i, size_in, size_out):
        if align_corners:
            return i * (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
        return max((i + 0.5) * size_in / size_out - 0.5, 0.0)

    for i in range(oh):
        sy = source(i, h, oh)
        y0 = min(int(np.floor(sy)), h - 1)
        y1, fy = min(y0 + 1, h - 1), sy - y0
        for j in range(ow):
            sx = source(j, w, ow)
            x0 = min(int(np.floor(sx)), w - 1)
            x1, fx = min(x0 + 1, w - 1), sx - x0
            out[:, :, i, j] = ((1 - fy) * ((1 - fx) * x[:, :, y0, x0] + fx * x[:, :, y0, x1])
                               + fy * ((1 - fx) * x[:, :, y1, x0] + fx * x[:, :, y1, x1]))
    return out


@pytest.mark.parametrize("align_corners", [True, False])
def test_upsample_bilinear_matches_the_corner_weights(align_corners):
    x = rand(2, 3, 3, 4)
    up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=align_corners)
    np.testing.assert_allclose(up(T(x)).numpy(), _bilinear_reference(x, 6, 8, align_corners),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        nn.Upsample(size=(5, 7), mode="bilinear", align_corners=align_corners)(T(x)).numpy(),
        _bilinear_reference(x, 5, 7, align_corners), rtol=1e-12, atol=1e-12)
    assert gradcheck(lambda a: up(a).pow(2), (T(rand(1, 2, 2, 3), True),))
    assert repr(up) == f"Upsample(scale_factor=2, mode='bilinear', align_corners={align_corners})"


def test_relu_inplace_overwrites_its_input_and_keeps_the_gradient():
    x = rand(3, 4)
    a = T(x, requires_grad=True)
    for relu in (nn.ReLU(inplace=True), lambda t: F.relu(t, inplace=True)):
        h = a * 1.0
        out = relu(h)
        assert out is h
        np.testing.assert_array_equal(h.numpy(), np.maximum(x, 0))
    out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), (x > 0).astype(float))
    plain = T(x)
    np.testing.assert_array_equal(F.relu(plain).numpy(), np.maximum(x, 0))
    np.testing.assert_array_equal(plain.numpy(), x)  # not in place by default
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)" and repr(nn.ReLU()) == "ReLU()"
    with pytest.raises(TypeError, match="relu: input must be a Tensor"):
        F.relu([1.0])


# ---------------------------------------------------------------------------- losses


def test_loss_modules_equal_their_functions():
    x, t = rand(5, 4), np.array([0, 3, 1, -100, 2])
    w = np.array([1.0, 2.0, 0.5, 1.5])
    ce = nn.CrossEntropyLoss(weight=T(w), label_smoothing=0.1, reduction="sum")
    assert ce(T(x), T(t)).item() == F.cross_entropy(T(x), T(t), weight=T(w),
                                                    label_smoothing=0.1, reduction="sum").item()
    assert list(ce.state_dict()) == ["weight"]
    nll = nn.NLLLoss(ignore_index=3)
    t3 = np.where(t < 0, 3, t)
    assert nll(T(x), T(t3)).item() == F.nll_loss(T(x), T(t3), ignore_index=3).item()
    a, b = rand(3, 2), rand(3, 2, seed=1)
    assert nn.MSELoss()(T(a), T(b)).item() == pytest.approx(((a - b) ** 2).mean())
    np.testing.assert_allclose(nn.L1Loss(reduction="none")(T(a), T(b)).numpy(), np.abs(a - b))
    y = (rand(3, 2, seed=2) > 0).astype(np.float64)
    pw = np.array([1.0, 3.0])
    bce = nn.BCEWithLogitsLoss(pos_weight=T(pw))
    s = 1 / (1 + np.exp(-a))
    want = -(pw * y * np.log(s) + (1 - y) * np.log(1 - s)).mean()
    assert bce(T(a), T(y)).item() == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="MSELoss: 'avg' is not a valid value for reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert nn.L1Loss(size_average=False).reduction == "sum"


# ---------------------------------------------------------------------------- containers


def test_module_dict_registers_its_modules_in_order():
    d = nn.ModuleDict({"a": nn.Linear(2, 3)})
    d.update([("b", nn.ReLU()), ("c", nn.Linear(3, 1))])
    d["a"] = nn.Linear(2, 3, bias=False)
    assert list(d) == ["a", "b", "c"] and len(d) == 3 and "b" in d
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "c.weight", "c.bias"]
    assert isinstance(d.pop("b"), nn.ReLU) and list(d.keys()) == ["a", "c"]
    with pytest.raises(KeyError, match="no module 'z'"):
        d["z"]
    with pytest.raises(TypeError, match="must be a Module"):
        d["x"] = mg.zeros(1)
    d.clear()
    assert len(d) == 0 and list(d.parameters()) == []


def test_parameter_list_and_dict_register_parameters():
    pl = nn.ParameterList([mg.ones(2), nn.Parameter(mg.zeros(3))])
    pl.append(mg.ones(1))
    assert len(pl) == 3 and all(isinstance(p, nn.Parameter) for p in pl)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert pl[-1].shape == (1,) and len(pl[1:]) == 2
    pl[0] = mg.full((2,), 5.0)
    assert pl[0].tolist() == [5.0, 5.0] and isinstance(pl[0], nn.Parameter)
    with pytest.raises(IndexError, match="out of range for length 3"):
        pl[3]
    pd = nn.ParameterDict({"w": mg.ones(2, 2)})
    pd.update({"b": mg.zeros(2)})
    assert list(pd) == ["w", "b"] and list(pd.state_dict()) == ["w", "b"]
    assert pd.get("nope") is None and "w" in pd
    del pd["w"]
    assert list(pd.keys()) == ["b"] and [n for n, _ in pd.named_parameters()] == ["b"]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([mg.ones(3) for _ in range(2)])

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x

    net = Net()
    net(mg.ones(3)).sum().backward()
    assert [p.grad.tolist() for p in net.parameters()] == [[1.0] * 3] * 2
    assert list(net.state_dict()) == ["scales.0", "scales.1"]
