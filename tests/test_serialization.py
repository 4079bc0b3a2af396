"""mg.save and mg.load: what goes in comes back with its types, dtypes, shapes and values
(checked against the NumPy arrays and Python values put in), state dicts of modules,
optimizers and generators restore the same computation, and a file that is not one mg.save
wrote is refused without running anything in it."""

from __future__ import annotations

import io
import json
import math
import pickle
import re
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import memgrad as mg

RAN = []  # set by _Payload when unpickled: a load that runs code would append to it


class _Payload:
    def __reduce__(self):
        return (RAN.append, ("code ran",))


def _roundtrip(obj):
    buf = io.BytesIO()
    mg.save(obj, buf)
    buf.seek(0)
    return mg.load(buf)


def _same(a, b):
    """a and b are equal in value and type, recursively (arrays by dtype, shape, bytes)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, mg.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
        np.testing.assert_array_equal(a.numpy(), b.numpy(), strict=True)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b)
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert type(key) is type(next(k for k in b if k == key))
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("array", [
    np.arange(6, dtype=np.float32).reshape(2, 3),
    np.linspace(-1, 1, 5),  # float64
    np.arange(-3, 3, dtype=np.int64),
    np.array([True, False]),
    np.array(2.5, dtype=np.float32),  # 0-d
    np.zeros((0, 4), dtype=np.float32),  # empty
    np.arange(24, dtype=np.float64).reshape(2, 3, 4).transpose(2, 0, 1),  # not contiguous
])
def test_tensors_come_back_with_dtype_shape_and_values(array):
    t = mg.tensor(array)
    out = _roundtrip(t)
    assert isinstance(out, mg.Tensor)
    assert out.dtype == array.dtype and out.shape == array.shape and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), array, strict=True)


def test_requires_grad_is_kept_and_the_loaded_tensor_is_independent():
    w = mg.randn(3, requires_grad=True)
    out = _roundtrip(w)
    assert out.requires_grad and out.is_leaf
    out.numpy()[0] = 100.0
    assert w.numpy()[0] != 100.0


def test_nested_plain_values_keep_their_types():
    obj = {
        "none": None, "t": True, "f": False, "int": -7, "big": 2**100, "float": 0.1,
        "neg_zero": -0.0, "inf": float("inf"), "nan": float("nan"), "text": "héllo \u2603",
        "list": [1, [2, (3, "x")]], "tuple": (1.5, None), "empty": ([], (), {}),
        "ndarray": np.arange(4, dtype=np.int32), "scalar": np.float32(1.25),
        "np_int": np.int64(3), "np_bool": np.bool_(True),
        3: "int key", 2.5: "float key", (0, "a"): "tuple key", None: "None key", True: "bool",
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "tensors": [mg.ones(2), (mg.arange(3),)],
    }
    out = _roundtrip(obj)
    _same(obj, out)
    assert isinstance(out["ordered"], OrderedDict) and isinstance(out["tuple"], tuple)


def test_a_module_state_dict_restores_the_same_outputs():
    mg.manual_seed(0)
    model = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.ReLU(), mg.nn.Linear(8, 2))
    x = mg.randn(5, 4)
    other = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.ReLU(), mg.nn.Linear(8, 2))
    state = _roundtrip(model.state_dict())
    assert list(state) == list(model.state_dict())
    other.load_state_dict(state)
    np.testing.assert_array_equal(other(x).numpy(), model(x).numpy())


def _adam_steps(model, opt, xs):
    losses = []
    for x in xs:
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_an_optimizer_state_dict_continues_the_same_steps():
    mg.manual_seed(1)
    xs = [mg.randn(3, 4) for _ in range(6)]
    model = mg.nn.Linear(4, 2)
    opt = mg.optim.Adam(model.parameters(), lr=0.05)
    first = _adam_steps(model, opt, xs[:3])
    saved = _roundtrip({"model": model.state_dict(), "optim": opt.state_dict()})
    rest = _adam_steps(model, opt, xs[3:])

    resumed = mg.nn.Linear(4, 2)
    resumed.load_state_dict(saved["model"])
    opt2 = mg.optim.Adam(resumed.parameters(), lr=0.05)
    opt2.load_state_dict(saved["optim"])
    assert list(saved["optim"]["state"]) == [0, 1]  # integer keys stay integers
    assert _adam_steps(resumed, opt2, xs[3:]) == rest
    assert len(first) == 3


def test_generator_states_round_trip():
    g = mg.Generator().manual_seed(5)
    mg.random.generator(g).random(3)
    state = _roundtrip(g.get_state())
    expected = mg.random.generator(g).random(4)
    np.testing.assert_array_equal(mg.random.generator(g.set_state(state)).random(4), expected)
    mg.manual_seed(2)
    rng = _roundtrip(mg.get_rng_state())
    a = mg.randn(3).numpy()
    mg.set_rng_state(rng)
    np.testing.assert_array_equal(mg.randn(3).numpy(), a)


def test_paths_and_file_objects(tmp_path):
    obj = {"w": mg.arange(4), "name": "x"}
    mg.save(obj, tmp_path / "a.mg")
    mg.save(obj, str(tmp_path / "b"))
    assert (tmp_path / "b").exists()  # written as given: no suffix added
    with open(tmp_path / "c.mg", "wb") as f:
        mg.save(obj, f)
    for loaded in (mg.load(tmp_path / "a.mg"), mg.load(str(tmp_path / "b")),
                   mg.load(open(tmp_path / "c.mg", "rb"))):
        _same(obj, loaded)
    assert mg.load(tmp_path / "a.mg", map_location="cpu", weights_only=True)["name"] == "x"


def test_the_file_is_an_npz_of_plain_arrays_and_a_json_header(tmp_path):
    mg.save({"w": mg.ones(2, 3)}, tmp_path / "f")
    with np.load(tmp_path / "f", allow_pickle=False) as archive:
        header = json.loads(archive["__memgrad__"].tobytes().decode("utf-8"))
        assert header["format"] == "memgrad.save" and header["version"] == 1
        (name,) = [n for n in archive.files if n != "__memgrad__"]
        np.testing.assert_array_equal(archive[name], np.ones((2, 3), dtype=np.float32))


# ------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("obj, error, match", [
    (mg.nn.Linear(2, 2), TypeError, r"mg.save: obj has type Linear; memgrad saves data, not "
                                    r"objects: save its state_dict\(\)"),
    ({"f": print}, TypeError, r"mg.save: obj\['f'\] has type builtin_function_or_method; "
                              r"mg.save takes tensors"),
    ([np.array(["a", "b"])], TypeError, r"obj\[0\] is an array of dtype <U1; only arrays of "
                                        r"bool, integer, float and complex"),
    (np.array([object()]), TypeError, "dtype object"),
    ({1.5j: 1}, TypeError, "has a key of type complex"),
    ({b"k": 1}, TypeError, "has a key of type bytes"),
    (b"bytes", TypeError, "has type bytes"),
])
def test_save_refuses_what_it_cannot_store_without_pickle(obj, error, match):
    with pytest.raises(error, match=match):
        mg.save(obj, io.BytesIO())


def test_save_refuses_a_cycle_and_a_bad_destination():
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match=r"mg.save: obj\[0\] contains itself"):
        mg.save(loop, io.BytesIO())
    with pytest.raises(TypeError, match="f must be a path or a binary file object, got int"):
        mg.save({}, 3)


def _written(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _npz(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _memgrad_file(header, **arrays):
    raw = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    return _npz(__memgrad__=raw, **arrays)


def _torch_like():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(_Payload()))
    return buf.getvalue()


@pytest.mark.parametrize("data, match", [
    (b"", "it is empty"),
    (pickle.dumps({"w": _Payload()}), "it is a pickle; memgrad never loads pickle"),
    (b"hello world", r"it starts with b'hello wo', not with the zip archive"),
    (_npz(x=np.zeros(2)), "a NumPy .npz archive without memgrad's header; load it with "
                          "numpy.load"),
    (_torch_like(), r"a PyTorch file \(torch.save\), which holds pickle"),
    (_npz(__memgrad__=np.zeros(1, dtype=np.uint8), a0=np.array([_Payload()], dtype=object)),
     "its array 'a0' has object dtype, which only pickle can read"),
    (_memgrad_file({"format": "memgrad.save", "version": 99, "object": None}),
     "format version 99, this memgrad reads version 1; upgrade memgrad"),
    (_memgrad_file({"format": "other", "version": 1, "object": None}), "header is not memgrad's"),
    (_memgrad_file({"format": "memgrad.save", "version": 1, "object": {"tensor": "a7",
                                                                      "requires_grad": False}}),
     "refers to an array 'a7' that is not in the file"),
    (_memgrad_file({"format": "memgrad.save", "version": 1, "object": {"eval": "x"}}),
     "unknown entry"),
    (_memgrad_file({"format": "memgrad.save", "version": 1, "object": None})[:40],
     "damaged or truncated"),
])
def test_load_refuses_a_file_mg_save_did_not_write_without_running_it(tmp_path, data, match):
    path = _written(tmp_path, "bad", data)
    with pytest.raises(RuntimeError) as info:
        mg.load(path)
    message = str(info.value)
    assert message.startswith(f"mg.load: {path} is not a file written by mg.save: ")
    assert re.search(match, message), message
    assert RAN == []


def test_load_names_a_single_npy_file(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(RuntimeError, match=r"it holds one NumPy array \(a .npy file\)"):
        mg.load(path)


def test_load_refuses_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        mg.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="map_location='cuda'; pass map_location='cpu'"):
        mg.load(io.BytesIO(), map_location="cuda")
    mg.save({}, tmp_path / "f")
    with open(tmp_path / "f", encoding="latin-1") as text:
        with pytest.raises(TypeError, match="is open in text mode; open it with mode 'rb'"):
            mg.load(text)
    with pytest.raises(TypeError, match="f must be a path or a binary file object, got int"):
        mg.load(3)
