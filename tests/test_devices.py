"""Devices and dtypes as PyTorch code writes them: ``Tensor.to`` in its three forms,
``.device``, ``.cpu()``, ``.contiguous()``, ``.type_as``, ``.new_*``, the casts and the dtype
aliases (``mg.long``, ``mg.float``...)."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg


def test_dtype_aliases_are_torchs_names():
    assert (mg.long, mg.int, mg.float, mg.double, mg.half, mg.float16, mg.bool) == (
        np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.float64),
        np.dtype(np.float16), np.dtype(np.float16), np.dtype(np.bool_))
    assert mg.zeros(2, dtype=mg.long).dtype == np.int64
    assert mg.ones(2, dtype=mg.half).dtype == np.float16


def test_to_takes_a_dtype_a_device_both_or_another_tensor():
    x = mg.tensor([1.5, -2.0])
    assert x.to(mg.float64).dtype == np.float64
    assert x.to("cpu") is x
    assert x.to(mg.device("cpu")) is x
    both = x.to("cpu", mg.long)
    assert both.dtype == np.int64 and both.tolist() == [1, -2]
    assert x.to(device="cpu", dtype=mg.double).dtype == np.float64
    assert x.to(mg.zeros(1, dtype=mg.int32)).dtype == np.int32
    same = x.to(mg.float32, copy=True)
    assert same is not x and not np.shares_memory(same.numpy(), x.numpy())
    assert x.to("cpu", non_blocking=True) is x


def test_to_refuses_another_device_and_a_bad_dtype():
    x = mg.ones(2)
    with pytest.raises(RuntimeError, match=r"Tensor.to: memgrad runs on the CPU only .*'cuda'"):
        x.to("cuda")
    with pytest.raises(RuntimeError, match="Tensor.to: memgrad runs on the CPU"):
        x.to(device="cuda:0", dtype=mg.float64)
    with pytest.raises(TypeError, match="Tensor.to: dtype must be a numeric dtype"):
        x.to(object)
    with pytest.raises(TypeError, match="at most 2 positional arguments"):
        x.to("cpu", mg.float32, mg.float64)


def test_to_keeps_the_gradient_path():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    (x.to("cpu", mg.float64) * 3).sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.tolist() == [3.0, 3.0]


def test_device_cpu_and_contiguity():
    x = mg.arange(6.0).reshape(2, 3)
    assert x.device == mg.device("cpu") and x.device.type == "cpu"
    assert x.cpu() is x
    assert x.is_contiguous() and x.contiguous() is x
    t = x.T
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous() and c.tolist() == t.tolist()
    assert not np.shares_memory(c.numpy(), x.numpy())


def test_contiguous_is_in_the_graph():
    x = mg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x.T.contiguous()
    assert y.grad_fn is not None and y.grad_fn.name() == "ContiguousBackward"
    (y * mg.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert x.grad.tolist() == [[1.0, 3.0], [2.0, 4.0]]


def test_casts_and_type_as():
    x = mg.tensor([1.7, -0.2])
    assert [x.float().dtype, x.double().dtype, x.half().dtype, x.long().dtype, x.int().dtype,
            x.bool().dtype] == [np.float32, np.float64, np.float16, np.int64, np.int32, np.bool_]
    assert x.long().tolist() == [1, 0] and x.bool().tolist() == [True, True]
    assert x.type_as(mg.zeros(1, dtype=mg.float64)).dtype == np.float64
    with pytest.raises(TypeError, match="Tensor.type_as: other must be a Tensor"):
        x.type_as(np.float64)


def test_new_factories_take_the_tensors_dtype():
    x = mg.zeros(1, dtype=mg.float64)
    z = x.new_zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype == np.float64 and z.tolist() == [[0.0] * 3] * 2
    o = x.new_ones((2,), dtype=mg.int64)
    assert o.dtype == np.int64 and o.tolist() == [1, 1]
    assert x.new_empty(4).shape == (4,) and x.new_empty(4).dtype == np.float64
    f = x.new_full((2,), 7, requires_grad=True)
    assert f.dtype == np.float64 and f.tolist() == [7.0, 7.0] and f.requires_grad
    with pytest.raises(RuntimeError, match="new_zeros|zeros: memgrad runs on the CPU"):
        x.new_zeros(2, device="cuda")


def test_mg_dtype_is_the_class_of_memgrads_dtypes():
    assert mg.dtype is np.dtype
    assert all(isinstance(d, mg.dtype) for d in (mg.float32, mg.long, mg.bool, mg.zeros(1).dtype))


def test_type_names_pytorchs_cpu_type_under_memgrads_prefix():
    names = {mg.float32: "FloatTensor", mg.float64: "DoubleTensor", mg.float16: "HalfTensor",
             mg.int64: "LongTensor", mg.int32: "IntTensor", mg.bool_: "BoolTensor",
             np.dtype(np.uint8): "ByteTensor", np.dtype(np.int8): "CharTensor",
             np.dtype(np.int16): "ShortTensor"}
    for dt, name in names.items():
        assert mg.zeros(2, dtype=dt).type() == f"memgrad.{name}"


def test_type_with_a_dtype_or_a_name_casts_and_keeps_a_matching_tensor():
    x = mg.tensor([1.5, -2.0], requires_grad=True)
    assert x.type(mg.float32) is x and x.type("torch.FloatTensor") is x
    y = x.type(mg.float64)
    assert y.dtype == np.float64 and y.tolist() == [1.5, -2.0]
    y.sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.tolist() == [1.0, 1.0]
    assert x.type("memgrad.LongTensor").tolist() == [1, -2]
    assert x.type(dtype="torch.DoubleTensor").dtype == np.float64


def test_type_refuses_an_unknown_name_a_cuda_type_and_a_non_dtype():
    x = mg.zeros(2)
    with pytest.raises(ValueError, match="Tensor.type: invalid type 'Float'.*memgrad.FloatTensor"):
        x.type("Float")
    with pytest.raises(RuntimeError, match="Tensor.type: memgrad runs on the CPU only"):
        x.type("torch.cuda.FloatTensor")
    with pytest.raises(TypeError, match="Tensor.type: dtype must be a dtype"):
        x.type(3)
    with pytest.raises(TypeError, match="has no type name"):
        mg.zeros(1, dtype=np.uint32).type()


def test_cuda_says_memgrad_runs_on_the_cpu_only():
    x = mg.zeros(2)
    for args in ((), (0,), ("cuda:1",), ("cpu",)):
        with pytest.raises(RuntimeError, match="Tensor.cuda: memgrad runs on the CPU only"):
            x.cuda(*args)


def test_torch_dropout_alias_takes_pytorchs_positional_arguments():
    x = mg.ones(1000)
    assert mg.dropout(x, 0.3, False) is x
    mg.manual_seed(5)
    y = mg.dropout(x, 0.3, True)
    mg.manual_seed(5)
    assert np.array_equal(y.numpy(), mg.nn.functional.dropout(x, 0.3, training=True).numpy())
    assert sorted(set(y.tolist())) == pytest.approx([0.0, 1 / 0.7])
    with pytest.raises(TypeError):
        mg.dropout(x, 0.3)  # type: ignore[call-arg]
