"""``mg.save`` and ``mg.load``: state dicts (of modules, optimizers, schedulers, generators)
in a file that holds only data, so loading it cannot run code.

NOTE [ Saved file format ]
A saved file is one NumPy ``.npz`` archive (a zip of ``.npy`` arrays). The member
``__memgrad__`` is a uint8 array holding UTF-8 JSON, ``{"format": "memgrad.save", "version":
1, "object": NODE}``, and the members ``a0``, ``a1``, ... are the arrays. A NODE is JSON
``null``, ``true``/``false``, a number or a string for the Python value of that type, or an
object with one tag naming what it stands for:

    {"list": [NODE, ...]}                {"tuple": [NODE, ...]}
    {"dict": [[KEY, NODE], ...]}         {"ordered_dict": [[KEY, NODE], ...]}
    {"tensor": "a0", "requires_grad": false}
    {"ndarray": "a1"}                    {"scalar": "a2"}   (a NumPy scalar: a 0-d array)

A KEY is a NODE that decodes to something hashable (a string, a number, a bool, None, or a
tuple of those), so the integer keys of an optimizer's ``state`` stay integers. ``load``
reads the archive with ``numpy.load(allow_pickle=False)`` and the JSON with ``json.loads``:
neither can run code, and an array of object dtype (which only pickle can read) is refused.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections import OrderedDict
from typing import IO, Any

import numpy as np

from memgrad.tensor import Tensor

__all__ = ["save", "load"]

FORMAT = "memgrad.save"
VERSION = 1
_HEADER = "__memgrad__"
_KINDS = "biufc"  # bool, int, unsigned, float, complex: arrays that need no pickle
_WHAT = ("tensors, NumPy arrays and scalars, numbers, strings, bools, None, and lists, tuples "
         "and dicts of those")

PathOrFile = str | os.PathLike[str] | IO[bytes]


class _Writer:
    """Turns an object into a JSON node, collecting its arrays."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._path: set[int] = set()  # ids of the containers being encoded: a cycle check

    def _array(self, a: np.ndarray, where: str) -> str:
        if a.dtype.kind not in _KINDS or a.dtype.fields is not None:
            raise TypeError(
                f"mg.save: {where} is an array of dtype {a.dtype}; only arrays of bool, "
                "integer, float and complex dtypes can be saved without pickle; convert it "
                "(e.g. a list of strings instead of a string array)"
            )
        name = f"a{len(self.arrays)}"
        self.arrays[name] = a
        return name

    def node(self, obj: Any, where: str) -> Any:
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, Tensor):
            return {"tensor": self._array(obj.numpy(), where),
                    "requires_grad": bool(obj.requires_grad)}
        if isinstance(obj, np.ndarray):
            return {"ndarray": self._array(obj, where)}
        if isinstance(obj, np.generic):  # before float: np.float64 is a float
            return {"scalar": self._array(np.asarray(obj), where)}
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, (list, tuple, dict)):
            return self._container(obj, where)
        if hasattr(obj, "state_dict"):
            raise TypeError(
                f"mg.save: {where} has type {type(obj).__name__}; memgrad saves data, not objects: "
                "save its state_dict() (mg.save(model.state_dict(), path)) and load it back "
                "with load_state_dict(mg.load(path))"
            )
        raise TypeError(f"mg.save: {where} has type {type(obj).__name__}; mg.save takes {_WHAT}")

    def _container(self, obj: list | tuple | dict, where: str) -> Any:
        if id(obj) in self._path:
            raise ValueError(f"mg.save: {where} contains itself; a saved object must be a tree")
        self._path.add(id(obj))
        try:
            if isinstance(obj, dict):
                tag = "ordered_dict" if isinstance(obj, OrderedDict) else "dict"
                return {tag: [[self._key(k, where), self.node(v, f"{where}[{k!r}]")]
                              for k, v in obj.items()]}
            tag = "tuple" if isinstance(obj, tuple) else "list"
            return {tag: [self.node(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        finally:
            self._path.discard(id(obj))

    def _key(self, key: Any, where: str) -> Any:
        if key is None or (
            isinstance(key, (bool, str, int, float)) and not isinstance(key, np.generic)
        ):
            return self.node(key, where)
        if isinstance(key, tuple):
            return {"tuple": [self._key(k, where) for k in key]}
        raise TypeError(
            f"mg.save: {where} has a key of type {type(key).__name__}; dict keys must be "
            "strings, numbers, bools, None or tuples of those"
        )


def save(obj: Any, f: PathOrFile) -> None:
    """Save ``obj`` (a state dict, or any nesting of dicts, lists and tuples of tensors,
    NumPy arrays, numbers, strings, bools and None) to the file ``f``: a path, written as
    given (no suffix is added), or a binary file object. The file holds only data: see
    NOTE [ Saved file format ].

    Raises:
        TypeError: for anything else (a Module or Optimizer itself: save its
            ``state_dict()``), naming where in ``obj`` it is.

    Example:
        >>> import io, memgrad as mg
        >>> buf = io.BytesIO()
        >>> mg.save({"w": mg.ones(2), "step": 3}, buf)
        >>> _ = buf.seek(0)
        >>> mg.load(buf)
        {'w': tensor([1., 1.]), 'step': 3}
    """
    writer = _Writer()
    root = writer.node(obj, "obj")
    header = json.dumps({"format": FORMAT, "version": VERSION, "object": root})
    members = {_HEADER: np.frombuffer(header.encode("utf-8"), dtype=np.uint8), **writer.arrays}
    if hasattr(f, "write"):
        np.savez(f, **members)
        return
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(
            f"mg.save: f must be a path or a binary file object, got {type(f).__name__}"
        )
    with open(f, "wb") as out:
        np.savez(out, **members)


class _Corrupt(Exception):
    """What is wrong with a file that is not a memgrad file."""


class _Reader:
    """Turns a JSON node back into the object, taking its arrays from the archive."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def _array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise _Corrupt(f"the structure refers to an array {name!r} that is not in the file")
        return self.arrays[name]

    def node(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, dict) and len(node) == 1:
            ((tag, value),) = node.items()
            if tag in ("list", "tuple") and isinstance(value, list):
                items = [self.node(v) for v in value]
                return tuple(items) if tag == "tuple" else items
            if tag in ("dict", "ordered_dict") and isinstance(value, list):
                out: dict[Any, Any] = OrderedDict() if tag == "ordered_dict" else {}
                for pair in value:
                    if not isinstance(pair, list) or len(pair) != 2:
                        raise _Corrupt("a dict entry is not a [key, value] pair")
                    key, item = self.node(pair[0]), self.node(pair[1])
                    try:
                        out[key] = item
                    except TypeError:
                        raise _Corrupt(f"a dict key is a {type(key).__name__}") from None
                return out
            if tag == "ndarray":
                return self._array(value)
            if tag == "scalar":
                a = self._array(value)
                if a.shape != ():
                    raise _Corrupt(f"the scalar {value!r} has shape {a.shape}")
                return a[()]
        if isinstance(node, dict) and set(node) == {"tensor", "requires_grad"}:
            a, requires_grad = self._array(node["tensor"]), node["requires_grad"]
            if not isinstance(requires_grad, bool) or requires_grad and a.dtype.kind not in "fc":
                raise _Corrupt(f"the tensor {node['tensor']!r} has requires_grad={requires_grad!r}")
            t = Tensor(a)
            return t.requires_grad_() if requires_grad else t
        raise _Corrupt(f"the structure holds an unknown entry {str(node)[:60]!r}")


def _sniff(source: IO[bytes]) -> None:
    """Name what a file that is not a zip archive is, from its first bytes."""
    start = source.tell()
    head = source.read(8)
    source.seek(start)
    if head.startswith(b"PK"):
        return
    if not head:
        raise _Corrupt("it is empty")
    if head.startswith(b"\x93NUMPY"):
        raise _Corrupt("it holds one NumPy array (a .npy file); load it with numpy.load")
    if head[:1] == b"\x80":
        raise _Corrupt("it is a pickle; memgrad never loads pickle, which can run code")
    raise _Corrupt(f"it starts with {head!r}, not with the zip archive mg.save writes")


def _read_archive(source: IO[bytes]) -> dict[str, np.ndarray]:
    _sniff(source)
    try:
        archive = np.load(source, allow_pickle=False)
    except (ValueError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise _Corrupt(f"it is a damaged or truncated zip archive ({e})") from None
    with archive:
        if _HEADER not in archive.files:
            raw = archive.zip.namelist()
            if any(n.endswith(".pkl") for n in raw):
                raise _Corrupt("it is a PyTorch file (torch.save), which holds pickle; memgrad "
                               "never loads pickle, which can run code (see docs/saving.md to "
                               "convert one)")
            if raw and all(n.endswith(".npy") for n in raw):
                raise _Corrupt("it is a NumPy .npz archive without memgrad's header; load it "
                               "with numpy.load")
            raise _Corrupt("it is a zip archive that mg.save did not write")
        arrays = {}
        for name in archive.files:
            try:
                arrays[name] = archive[name]
            except ValueError as e:
                if "allow_pickle" in str(e):
                    raise _Corrupt(f"its array {name!r} has object dtype, which only pickle "
                                   "can read; memgrad never loads pickle") from None
                raise
    return arrays


def _decode(arrays: dict[str, np.ndarray]) -> Any:
    header_bytes = arrays.pop(_HEADER)
    if header_bytes.dtype != np.uint8 or header_bytes.ndim != 1:
        raise _Corrupt("its header is not text")
    header = json.loads(header_bytes.tobytes().decode("utf-8"))
    if not isinstance(header, dict) or header.get("format") != FORMAT or "object" not in header:
        raise _Corrupt("its header is not memgrad's")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise _Corrupt(f"it has format version {version!r}, this memgrad reads version "
                       f"{VERSION}; upgrade memgrad")
    for name, a in arrays.items():
        if a.dtype.kind not in _KINDS or a.dtype.fields is not None:
            raise _Corrupt(f"its array {name!r} has dtype {a.dtype}")
    return _Reader(arrays).node(header["object"])


def _check_location(map_location: Any) -> None:
    if map_location is None or str(map_location) == "cpu":
        return
    raise ValueError(
        f"mg.load: memgrad runs on the CPU, got map_location={map_location!r}; pass "
        "map_location='cpu' or leave it out"
    )


def load(f: PathOrFile, map_location: Any = None, *, weights_only: bool | None = None) -> Any:
    """Load what ``save`` wrote to ``f`` (a path or a binary file object with ``read`` and
    ``seek``). Tensors come back as tensors of the same dtype, shape and ``requires_grad``,
    NumPy arrays as arrays, tuples as tuples, dicts with their keys' types and order.

    Args:
        f: the file.
        map_location: ``None`` or ``"cpu"`` (memgrad's only device).
        weights_only: accepted for PyTorch's signature; a memgrad file holds only data, so
            ``True`` and ``False`` load the same.

    Raises:
        FileNotFoundError: when the path does not exist.
        RuntimeError: when the file is not one ``save`` wrote (another format, a pickle,
            truncated or damaged, arrays of object dtype), saying what it found.

    Example:
        >>> import io, memgrad as mg
        >>> buf = io.BytesIO()
        >>> mg.save(mg.nn.Linear(2, 1).state_dict(), buf)
        >>> _ = buf.seek(0)
        >>> list(mg.load(buf))
        ['weight', 'bias']
    """
    _check_location(map_location)
    if weights_only is not None and not isinstance(weights_only, bool):
        raise TypeError(f"mg.load: weights_only must be a bool, got {weights_only!r}")
    if isinstance(f, io.TextIOBase):
        raise TypeError(f"mg.load: {getattr(f, 'name', 'the file')!r} is open in text mode; "
                        "open it with mode 'rb'")
    if hasattr(f, "read"):
        return _load_from(f, str(getattr(f, "name", "the file object")))
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"mg.load: f must be a path or a binary file object, got "
                        f"{type(f).__name__}")
    with open(f, "rb") as source:
        return _load_from(source, os.fspath(f))


def _load_from(source: IO[bytes], name: str) -> Any:
    try:
        return _decode(_read_archive(source))
    except _Corrupt as e:
        raise RuntimeError(f"mg.load: {name} is not a file written by mg.save: {e}") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, RecursionError) as e:
        raise RuntimeError(
            f"mg.load: {name} is not a file written by mg.save, or it is truncated or "
            f"damaged ({type(e).__name__}: {e}); save it again with mg.save"
        ) from None
