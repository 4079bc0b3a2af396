"""Bad input to the tensor factories: ragged lists, negative, non-int and absurd sizes, and
bad dtypes get an error that names the factory, what came and the fix, before anything is
allocated; good input still gives NumPy's values."""

from __future__ import annotations

import numpy as np
import pytest

import memgrad as mg
from memgrad.sizes import physical_memory

# ---------------------------------------------------------------------------- ragged lists


@pytest.mark.parametrize("data, where", [
    ([[1, 2], [3]], "data[1] has 1 entry where data[0] has 2 entries"),
    ([[1], [2, 3]], "data[1] has 2 entries where data[0] has 1 entry"),
    ([[1, [2]], [3, 4]], "data[0][1] is a sequence of 1 entry where data[0][0] is a number"),
    ([1, [2, 3]], "data[1] is a sequence of 2 entries where data[0] is a number"),
    ([[[1, 2], [3, 4]], [[5, 6], [7]]], "data[1][1] has 1 entry where data[0][0] has 2 entries"),
    ([mg.ones(2), mg.ones(3)], "data[1] has 3 entries where data[0] has 2 entries"),
    (((1.0, 2.0), (3.0,)), "data[1] has 1 entry where data[0] has 2 entries"),
])
def test_ragged_lists_name_the_first_ragged_position(data, where):
    with pytest.raises(ValueError) as e:
        mg.tensor(data)
    assert str(e.value) == (
        f"tensor: nested lists must be rectangular, but {where}; pad the short ones to the "
        "same length, or make one tensor of each"
    )


def test_rectangular_lists_still_work():
    data = [[1.5, 2.0], [3.0, 4.0]]
    t = mg.tensor(data)
    np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=np.float32))
    assert mg.tensor([mg.ones(2), mg.zeros(2)]).tolist() == [[1.0, 1.0], [0.0, 0.0]]


# ---------------------------------------------------------------------------- sizes

SHAPED = {
    "zeros": lambda *s: mg.zeros(*s),
    "ones": lambda *s: mg.ones(*s),
    "empty": lambda *s: mg.empty(*s),
    "randn": lambda *s: mg.randn(*s),
    "rand": lambda *s: mg.rand(*s),
}


@pytest.mark.parametrize("api", list(SHAPED))
@pytest.mark.parametrize("shape, position", [((-1,), 0), ((2, -3), 1), (((4, -1),), 1)])
def test_negative_sizes(api, shape, position):
    with pytest.raises(ValueError) as e:
        SHAPED[api](*shape)
    message = str(e.value)
    assert message.startswith(f"{api}: sizes must not be negative, got -")
    assert f"at position {position}" in message
    assert f"e.g. {api}(2, 3) or {api}((2, 3))" in message


@pytest.mark.parametrize("api", list(SHAPED))
@pytest.mark.parametrize("size, shown", [
    (2.0, "float 2.0"), ("3", "str '3'"), (True, "bool True"), (None, "NoneType None"),
])
def test_non_int_sizes(api, size, shown):
    with pytest.raises(TypeError) as e:
        SHAPED[api](2, size)
    assert str(e.value).startswith(f"{api}: sizes must be ints, got {shown} at position 1")


def test_a_float_size_says_how_to_convert_it():
    with pytest.raises(TypeError, match=r"\(convert it with int\(\)\)"):
        mg.zeros(2.0)


def test_numpy_integer_sizes_are_ints():
    assert mg.zeros(np.int64(2), np.int32(3)).shape == (2, 3)
    assert mg.randn((np.int64(4),)).shape == (4,)


F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


@pytest.mark.parametrize("make, api, shape, dtype", [
    (lambda: mg.zeros(10**12), "zeros", (10**12,), F32),
    (lambda: mg.ones(10**6, 10**6), "ones", (10**6, 10**6), F32),
    (lambda: mg.empty(10**7, 10**7, dtype=mg.float64), "empty", (10**7, 10**7), F64),
    (lambda: mg.randn(10**6, 10**6), "randn", (10**6, 10**6), F32),
    (lambda: mg.rand(2**40), "rand", (2**40,), F32),
    (lambda: mg.full((10**12,), 1.5), "full", (10**12,), F32),
    (lambda: mg.arange(10**13), "arange", (10**13,), I64),
    (lambda: mg.eye(10**7), "eye", (10**7, 10**7), F32),
    (lambda: mg.randint(0, 5, (10**12,)), "randint", (10**12,), I64),
    (lambda: mg.zeros(10**9, 10**9, 10**9), "zeros", (10**9,) * 3, F32),
    (lambda: mg.full_like(mg.from_numpy(np.broadcast_to(np.float32(0), (10**12,))), 1.0),
     "full_like", (10**12,), F32),
])
def test_absurd_sizes_are_a_memory_error_before_allocating(make, api, shape, dtype):
    limit = physical_memory()
    if limit is None:
        pytest.skip("this system does not report its physical memory")
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    assert nbytes > limit
    with pytest.raises(MemoryError) as e:
        make()
    assert str(e.value) == (
        f"{api}: a tensor of shape {shape} and dtype {dtype} needs {nbytes:,} bytes, more "
        f"than this machine's {limit:,} bytes of memory; choose smaller sizes"
    )


def test_physical_memory_matches_sysconf():
    import os

    expected = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert physical_memory() == expected
    if not os.path.exists("/proc/meminfo"):
        return
    with open("/proc/meminfo") as f:  # the kernel's own figure, in KiB
        total_kib = int(f.readline().split()[1])
    assert abs(expected - total_kib * 1024) <= 64 * 2**20


def test_a_numpy_memory_error_names_the_factory(monkeypatch):
    def refuse(*args, **kwargs):
        raise MemoryError("Unable to allocate 8.00 GiB for an array with shape (2147483648,)")

    monkeypatch.setattr(np, "full", refuse)
    with pytest.raises(MemoryError) as e:
        mg.zeros(2**31)
    assert str(e.value) == ("zeros: Unable to allocate 8.00 GiB for an array with shape "
                            "(2147483648,); choose smaller sizes or free memory")


# ---------------------------------------------------------------------------- full, eye, arange


def test_full():
    with pytest.raises(TypeError, match=r"full: shape must be an int or a tuple of ints, got "
                                        r"float 2.5; e\.g\. full\(\(2, 3\), 1\.0\)"):
        mg.full(2.5, 1.0)
    with pytest.raises(TypeError, match="full: fill_value must be a number or a bool, got str"):
        mg.full((2,), "a")
    with pytest.raises(ValueError, match=r"full: sizes must not be negative, got -1 at position "
                                         r"1 of \(2, -1\); e\.g\. full\(\(2, 3\), 0\)"):
        mg.full((2, -1), 0)
    assert mg.full(3, 7).tolist() == [7, 7, 7]
    assert mg.full((2,), True).dtype == np.bool_


@pytest.mark.parametrize("args, exc, message", [
    ((-1,), ValueError, "eye: n must be an int >= 0, got int -1"),
    ((2.5,), TypeError, "eye: n must be an int >= 0, got float 2.5"),
    ((2, -3), ValueError, "eye: m must be an int >= 0, got int -3"),
    ((2, "3"), TypeError, "eye: m must be an int >= 0, got str '3'"),
])
def test_eye(args, exc, message):
    with pytest.raises(exc) as e:
        mg.eye(*args)
    assert str(e.value) == message + "; e.g. eye(3) or eye(2, 3)"


def test_eye_values():
    np.testing.assert_array_equal(mg.eye(2, 3).numpy(), np.eye(2, 3, dtype=np.float32))


@pytest.mark.parametrize("args, exc, message", [
    (("a",), TypeError, "arange: end must be a number, got str 'a'"),
    ((0, 10, None), TypeError, "arange: step must be a number, got NoneType None"),
    ((True,), TypeError, "arange: end must be a number, got bool True"),
    ((0, 10, 0), ValueError, "arange: step must not be 0"),
    ((0, float("inf")), ValueError, "arange: end must be finite, got inf"),
    ((float("nan"), 3), ValueError, "arange: start must be finite, got nan"),
])
def test_arange(args, exc, message):
    with pytest.raises(exc, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        mg.arange(*args)


@pytest.mark.parametrize("args", [(5,), (2, 9, 3), (5, 0, -2), (0.0, 1.0, 0.25), (1, 0)])
def test_arange_values(args):
    expected = np.arange(*args)
    got = mg.arange(*args).numpy()
    np.testing.assert_allclose(got, expected)
    assert got.shape == expected.shape


# ---------------------------------------------------------------------------- randint, dtypes


@pytest.mark.parametrize("args, exc, message", [
    ((0, 5.5, (2,)), TypeError, "randint: high must be an int, got float 5.5"),
    (("0", 5, (2,)), TypeError, "randint: low must be an int, got str '0'"),
    ((5, 3, (2,)), ValueError, "randint: low must be less than high, got low=5, high=3"),
    ((0, 5, (2, -1)), ValueError, "randint: sizes must not be negative, got -1 at position 1"),
    ((0, 5, 2.0), TypeError, "randint: sizes must be ints, got float 2.0 at position 0"),
])
def test_randint(args, exc, message):
    with pytest.raises(exc) as e:
        mg.randint(*args)
    assert str(e.value).startswith(message)
    assert "randint(0, 10, (2, 3))" in str(e.value)


def test_randint_values_stay_in_range():
    mg.manual_seed(0)
    t = mg.randint(3, 7, (1000,))
    assert t.dtype == np.int64 and t.shape == (1000,)
    assert set(t.tolist()) == {3, 4, 5, 6}


@pytest.mark.parametrize("make", [
    lambda: mg.zeros(2, dtype=str),
    lambda: mg.ones(2, dtype="no-such-dtype"),
    lambda: mg.tensor([1, 2], dtype=object),
    lambda: mg.full((2,), 1, dtype=str),
    lambda: mg.arange(3, dtype="U"),
])
def test_non_numeric_dtypes(make):
    with pytest.raises(TypeError, match="dtype must be a numeric dtype, got .*; pass one such "
                                        "as mg.float32"):
        make()


@pytest.mark.parametrize("api", ["zeros_like", "ones_like", "empty_like", "randn_like",
                                 "rand_like"])
def test_like_needs_a_tensor(api):
    with pytest.raises(TypeError, match=f"^{api}: input must be a Tensor, got list"):
        getattr(mg, api)([1.0, 2.0])
    if api not in ("randn_like", "rand_like"):
        assert getattr(mg, api)(mg.ones(2, 3)).shape == (2, 3)


# ---------------------------------------------------------------------------- devices

_FACTORIES = [
    ("tensor", lambda device: mg.tensor([1.0, 2.0], device=device)),
    ("zeros", lambda device: mg.zeros(2, 3, device=device)),
    ("ones", lambda device: mg.ones((2,), device=device)),
    ("empty", lambda device: mg.empty(2, device=device)),
    ("full", lambda device: mg.full((2,), 3.0, device=device)),
    ("zeros_like", lambda device: mg.zeros_like(mg.ones(2), device=device)),
    ("ones_like", lambda device: mg.ones_like(mg.ones(2), device=device)),
    ("full_like", lambda device: mg.full_like(mg.ones(2), 4, device=device)),
    ("empty_like", lambda device: mg.empty_like(mg.ones(2), device=device)),
    ("arange", lambda device: mg.arange(3, device=device)),
    ("eye", lambda device: mg.eye(2, device=device)),
    ("randn", lambda device: mg.randn(2, device=device)),
    ("rand", lambda device: mg.rand(2, device=device)),
    ("randn_like", lambda device: mg.randn_like(mg.ones(2), device=device)),
    ("rand_like", lambda device: mg.rand_like(mg.ones(2), device=device)),
    ("randint", lambda device: mg.randint(0, 5, (2,), device=device)),
    ("randint_like", lambda device: mg.randint_like(mg.ones(2), 5, device=device)),
    ("randperm", lambda device: mg.randperm(3, device=device)),
]


@pytest.mark.parametrize("name, make", _FACTORIES, ids=[n for n, _ in _FACTORIES])
@pytest.mark.parametrize("device", ["cpu", "cpu:0", mg.device("cpu"), mg.device("cpu", 0), None])
def test_every_factory_takes_the_cpu_device(name, make, device):
    t = make(device)
    assert t.device == mg.device("cpu")


@pytest.mark.parametrize("name, make", _FACTORIES, ids=[n for n, _ in _FACTORIES])
@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps", 0])
def test_every_factory_refuses_another_device_by_name(name, make, device):
    with pytest.raises(RuntimeError) as e:
        make(device)
    text = str(e.value)
    assert text.startswith(f"{name}: memgrad runs on the CPU only")
    assert "use device='cpu'" in text


def test_device_objects_follow_torch_device():
    d = mg.device("cpu")
    assert (d.type, d.index, str(d), repr(d)) == ("cpu", None, "cpu", "device(type='cpu')")
    assert mg.device("cpu:0") == mg.device("cpu", 0) != d
    assert str(mg.device("cpu", 0)) == "cpu:0"
    assert mg.device(d) == d and hash(mg.device("cpu")) == hash(d)
    with pytest.raises(RuntimeError, match="device: memgrad runs on the CPU only .* 'cuda:0'"):
        mg.device("cuda", 0)
    with pytest.raises(RuntimeError, match="index 0 only, got 1"):
        mg.device("cpu", 1)
    with pytest.raises(RuntimeError, match="expected a device type such as 'cpu'"):
        mg.device("gpu")
    with pytest.raises(TypeError, match="a device is a string such as 'cpu'"):
        mg.zeros(2, device=1.5)


def test_randperm_and_randint_like_draw_from_the_seeded_generator():
    mg.manual_seed(3)
    a = mg.randperm(10)
    mg.manual_seed(3)
    b = mg.randperm(10)
    assert a.dtype == np.int64 and a.tolist() == b.tolist()
    assert sorted(a.tolist()) == list(range(10))
    assert mg.randperm(4, dtype=mg.float32).dtype == np.float32
    r = mg.randint_like(mg.zeros(50, dtype=mg.int32), 2, 4)
    assert r.dtype == np.int32 and set(r.tolist()) <= {2, 3}
    with pytest.raises(ValueError, match="randperm: n must be an int >= 0, got int -1"):
        mg.randperm(-1)
