"""nn.Module, nn.Parameter, nn.Sequential and nn.ModuleList: registration, traversal
order and names, modes, state_dict round trips and errors, containers and repr."""

from collections import OrderedDict

import numpy as np
import pytest

import memgrad as mg
from memgrad import nn


class Scale(nn.Module):
    """A module with a parameter, a buffer and a non-persistent buffer."""

    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(mg.ones(n))
        self.register_buffer("count", mg.zeros(1))
        self.register_buffer("cache", mg.zeros(n), persistent=False)

    def forward(self, x):
        return x * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        self.head = Scale(2)
        self.not_a_param = mg.ones(2)  # a plain tensor attribute: not registered

    def forward(self, x):
        return self.head(self.body(x))


def test_parameter_basics():
    p = nn.Parameter(mg.zeros(2, 3))
    assert isinstance(p, mg.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p).startswith("Parameter containing:\ntensor([[0., 0., 0.],")
    assert repr(p).endswith("requires_grad=True)")
    assert not nn.Parameter(mg.zeros(2), requires_grad=False).requires_grad
    assert nn.Parameter([1.0, 2.0]).dtype == np.float32
    assert nn.Parameter().shape == (0,)
    a = np.zeros(3, dtype=np.float32)
    q = nn.Parameter(a)
    a[0] = 5
    assert q.numpy()[0] == 5  # shares memory, like torch.nn.Parameter(t)
    assert isinstance(p * 2, mg.Tensor) and not isinstance(p * 2, nn.Parameter)


def test_registration():
    m = Scale(3)
    assert list(m._parameters) == ["scale"]
    assert list(m._buffers) == ["count", "cache"]
    assert m.scale is m._parameters["scale"]
    assert "scale" not in m.__dict__
    m.scale = None
    assert m.scale is None and list(m.parameters()) == []
    m.scale = nn.Parameter(mg.ones(3))
    with pytest.raises(TypeError, match=r"cannot assign 'Tensor' as parameter 'scale'"):
        m.scale = mg.ones(3)
    m.count = mg.ones(1)  # buffers take plain tensors
    assert m.count.numpy()[0] == 1
    with pytest.raises(TypeError, match="buffer 'count'"):
        m.count = 3
    with pytest.raises(TypeError, match="cannot assign 'ReLU' as parameter"):
        m.scale = nn.ReLU()
    del m.scale
    m.scale = nn.ReLU()
    assert "scale" in m._modules and "scale" not in m._parameters
    m.scale = nn.Parameter(mg.ones(3))  # a Parameter takes the name from any registry
    assert "scale" in m._parameters and "scale" not in m._modules
    del m.scale
    assert "scale" not in m._parameters
    with pytest.raises(AttributeError, match="'Scale' object has no attribute 'scale'"):
        _ = m.scale


def test_registration_errors():
    class Forgot(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(mg.ones(1))

    with pytest.raises(AttributeError, match=r"call super\(\).__init__\(\) first in Forgot"):
        Forgot()
    m = nn.Module()
    with pytest.raises(KeyError, match="contain no '.'"):
        m.register_parameter("a.b", nn.Parameter(mg.ones(1)))
    with pytest.raises(TypeError, match="nn.Parameter or None required"):
        m.register_parameter("w", mg.ones(1))
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("training", mg.ones(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", 3)
    with pytest.raises(NotImplementedError, match=r'\[Module\] is missing the required "forward"'):
        m(mg.ones(1))


def test_named_parameters_order_and_dotted_names():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias",
                     "head.scale"]
    assert [p for p in net.parameters()] == [p for _, p in net.named_parameters()]
    assert [n for n, _ in net.named_parameters(prefix="model")][0] == "model.body.0.weight"
    assert list(net.named_parameters(recurse=False)) == []
    assert [n for n, _ in net.named_buffers()] == ["head.count", "head.cache"]


def test_traversal():
    net = Net()
    assert [n for n, _ in net.named_children()] == ["body", "head"]
    assert list(net.children()) == [net.body, net.head]
    assert [n for n, _ in net.named_modules()] == ["", "body", "body.0", "body.1", "body.2",
                                                   "head"]
    assert list(net.modules())[0] is net


def test_shared_parameters_and_modules_are_counted_once():
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight  # tied weights
    shared = nn.ReLU()
    net = nn.Sequential(a, b, shared, shared)
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias", "1.bias"]
    assert len(list(net.parameters())) == 3
    assert [n for n, _ in net.named_modules()] == ["", "0", "1", "2"]
    # like PyTorch, state_dict keeps every name of a shared tensor
    assert list(net.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert len(list(net.named_parameters(remove_duplicate=False))) == 4


def test_train_eval_recursion():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net.body.train(False)
    assert net.training and not net.body[0].training and net.head.training
    with pytest.raises(TypeError, match="mode must be a bool"):
        net.train("no")


def test_zero_grad():
    m = Scale(3)
    (m(mg.ones(3)) * 2).sum().backward()
    g = m.scale.grad
    m.zero_grad(set_to_none=False)
    assert m.scale.grad is g
    np.testing.assert_array_equal(g.numpy(), 0)
    m.zero_grad()
    assert m.scale.grad is None


def test_requires_grad_():
    net = Net().requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def _randomize(model, seed):
    rng = np.random.default_rng(seed)
    for t in list(model.parameters()) + list(model.buffers()):
        t.numpy()[...] = rng.standard_normal(t.shape)


def test_state_dict_contents():
    net = Net()
    sd = net.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == ["body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias",
                        "head.scale", "head.count"]  # no non-persistent buffer
    # as PyTorch's: detached tensors that share storage (and the version counter)
    assert all(isinstance(v, mg.Tensor) and not v.requires_grad for v in sd.values())
    assert sd["body.0.weight"].numpy() is net.body[0].weight.numpy()
    version = net.head.scale._version
    with mg.no_grad():
        sd["head.scale"].fill_(7.0)
    assert (net.head.scale.numpy() == 7).all() and net.head.scale._version > version
    snapshot = {k: v.clone() for k, v in sd.items()}
    with mg.no_grad():
        net.head.scale.fill_(1.0)
    assert (snapshot["head.scale"].numpy() == 7).all()
    kept = net.state_dict(keep_vars=True)
    assert kept["body.0.weight"] is net.body[0].weight


def test_state_dict_round_trip_through_npz(tmp_path):
    src = Net()
    _randomize(src, 0)
    path = tmp_path / "model.npz"
    np.savez(path, **src.state_dict())
    dst = Net()
    _randomize(dst, 1)
    weight_array = dst.body[0].weight.numpy()
    version = dst.body[0].weight._version
    with np.load(path) as loaded:
        result = dst.load_state_dict(loaded)
    assert result.missing_keys == [] and result.unexpected_keys == []
    for (name, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert dst.body[0].weight.numpy() is weight_array  # copied in place
    assert dst.body[0].weight._version > version
    x = mg.randn(5, 3)
    np.testing.assert_array_equal(src(x).numpy(), dst(x).numpy())


def test_load_state_dict_accepts_tensors_and_casts():
    m = Scale(2)
    m.load_state_dict({"scale": mg.tensor([2.0, 3.0], dtype=mg.float64),
                       "count": np.array([4], dtype=np.int64)})
    assert m.scale.tolist() == [2.0, 3.0] and m.scale.dtype == np.float32
    assert m.count.tolist() == [4.0]


def test_load_state_dict_strict_errors_name_the_keys():
    net = Net()
    sd = net.state_dict()
    before = net.body[0].weight.numpy().copy()
    bad = OrderedDict(sd)
    bad["body.0.weight"] = np.full_like(sd["body.0.weight"], 9.0)
    del bad["head.count"]
    bad["head.extra"] = np.ones(2)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(bad)
    msg = str(e.value)
    assert "Error(s) in loading state_dict for Net" in msg
    assert "Missing key(s) in state_dict: 'head.count'" in msg
    assert "Unexpected key(s) in state_dict: 'head.extra'" in msg
    assert "strict=False" in msg
    np.testing.assert_array_equal(net.body[0].weight.numpy(), before)  # nothing loaded

    result = net.load_state_dict(bad, strict=False)
    assert result.missing_keys == ["head.count"] and result.unexpected_keys == ["head.extra"]
    assert (net.body[0].weight.numpy() == 9.0).all()


def test_load_state_dict_shape_mismatch_always_raises():
    net = Net()
    sd = net.state_dict()
    sd["body.2.bias"] = np.zeros(5, dtype=np.float32)
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=r"size mismatch for 'body.2.bias': copying a "
                           r"value of shape \(5,\) .* current model is \(2,\)"):
            net.load_state_dict(sd, strict=strict)
    with pytest.raises(TypeError, match="expected a mapping"):
        net.load_state_dict([1, 2])


def test_apply_and_dtype_casts():
    net = Net()
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "ReLU", "Linear", "Sequential", "Scale", "Net"]
    w = net.body[0].weight
    w.grad = mg.ones(w.shape)
    assert net.double() is net
    assert net.body[0].weight is w and w.dtype == np.float64 and w.grad.dtype == np.float64
    assert net.head.count.dtype == np.float64
    net.float()
    assert all(p.dtype == np.float32 for p in net.parameters())
    with pytest.raises(TypeError, match="floating dtype"):
        net.to(mg.int64)
    with pytest.raises(TypeError, match="no device argument"):
        net.to("cuda")


def test_forward_hooks():
    m = Scale(2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.tolist()))
    assert m(mg.zeros(2)).tolist() == [1.0, 1.0]
    assert calls == [[1.0, 1.0]]
    h1.remove()
    h2.remove()
    assert m(mg.zeros(2)).tolist() == [0.0, 0.0] and len(calls) == 1


def test_sequential():
    layers = [Scale(2), Scale(2), Scale(2)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3
    assert list(seq) == layers
    assert seq[0] is layers[0] and seq[-1] is layers[2]
    part = seq[1:]
    assert isinstance(part, nn.Sequential) and list(part) == layers[1:]
    assert list(part._modules) == ["1", "2"]  # slicing keeps the names, as in PyTorch
    with pytest.raises(IndexError, match="index 3 is out of range for length 3"):
        seq[3]
    with pytest.raises(TypeError, match="integers or slices"):
        seq["0"]
    seq[0].scale.numpy()[...] = 2.0
    seq[1].scale.numpy()[...] = 3.0
    assert seq(mg.ones(2)).tolist() == [6.0, 6.0]
    assert seq.append(Scale(2)) is seq and len(seq) == 4
    new = Scale(2)
    seq[0] = new
    assert seq[0] is new
    named = nn.Sequential(OrderedDict([("a", Scale(1)), ("b", nn.ReLU())]))
    assert [n for n, _ in named.named_children()] == ["a", "b"]
    assert nn.Sequential()(mg.ones(1)).tolist() == [1.0]


def test_module_list():
    ml = nn.ModuleList([Scale(1), Scale(2)])
    assert len(ml) == 2
    ml.append(Scale(3))
    ml.extend([Scale(4)])
    assert [m.scale.shape[0] for m in ml] == [1, 2, 3, 4]
    ml.insert(1, Scale(9))
    assert [m.scale.shape[0] for m in ml] == [1, 9, 2, 3, 4]
    assert list(ml._modules) == ["0", "1", "2", "3", "4"]
    assert ml[-1].scale.shape == (4,)
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    del ml[0]
    assert [m.scale.shape[0] for m in ml] == [9, 2, 3, 4]
    ml[0] = Scale(5)
    assert ml[0].scale.shape == (5,)
    assert len(list(ml.parameters())) == 4
    assert [n for n, _ in ml.named_parameters()][:2] == ["0.scale", "1.scale"]
    with pytest.raises(IndexError, match="out of range"):
        ml[10]
    with pytest.raises(TypeError, match="use append"):
        ml.extend(Scale(1))
    with pytest.raises(NotImplementedError):
        ml(mg.ones(1))


def test_repr():
    net = nn.Sequential(
        nn.Linear(2, 3), nn.ReLU(),
        nn.Sequential(nn.Dropout(0.1), nn.GELU(approximate="tanh"), nn.Flatten()),
        nn.LayerNorm(4), nn.Embedding(10, 3, padding_idx=0),
        nn.Conv2d(3, 6, 3, stride=2, padding=1, dilation=2, groups=3, bias=False),
        nn.MaxPool2d(2),
    )
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Dropout(p=0.1)\n"
        "    (1): GELU(approximate='tanh')\n"
        "    (2): Flatten(start_dim=1, end_dim=-1)\n"
        "  )\n"
        "  (3): LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)\n"
        "  (4): Embedding(10, 3, padding_idx=0)\n"
        "  (5): Conv2d(3, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
        "dilation=(2, 2), groups=3, bias=False)\n"
        "  (6): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1)\n"
        ")"
    )
    assert repr(nn.Sequential()) == "Sequential()"
    assert repr(nn.ModuleList([nn.Tanh()])) == "ModuleList(\n  (0): Tanh()\n)"
    assert repr(nn.TransformerBlock(8, 2)).startswith(
        "TransformerBlock(\n  (ln1): LayerNorm((8,), eps=1e-05, elementwise_affine=True, "
        "bias=True)\n  (attn): MultiheadSelfAttention(\n    embed_dim=8, num_heads=2, "
        "dropout=0.0, causal=True\n    (qkv): Linear(in_features=8, out_features=24, bias=True)\n"
    )


def test_a_deep_copy_of_a_parameter_has_its_data_and_no_gradient():
    # as PyTorch's Parameter deep copy: copies of a trained layer start without gradients
    # (a TransformerEncoder copies its layer N times); a plain tensor keeps its gradient
    import copy

    layer = mg.nn.Linear(3, 2)
    layer.bias.requires_grad_(False)
    layer(mg.ones(4, 3)).sum().backward()
    twin = copy.deepcopy(layer)
    for p, q in zip(layer.parameters(), twin.parameters()):
        assert isinstance(q, mg.nn.Parameter) and q.requires_grad == p.requires_grad
        assert q.grad is None and q.numpy() is not p.numpy()
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    assert layer.weight.grad is not None
    trained = mg.nn.TransformerEncoderLayer(4, 2, 8)
    trained(mg.ones(3, 1, 4)).sum().backward()
    stack = mg.nn.TransformerEncoder(trained, 2)
    assert all(p.grad is None for p in stack.parameters())
    x = mg.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    np.testing.assert_array_equal(copy.deepcopy(x).grad.numpy(), [2.0, 2.0])
