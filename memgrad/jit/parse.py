"""``parse``: read the text of ``Graph.code`` back into a Graph."""

from __future__ import annotations

import base64
import re
from typing import Any

import numpy as np

from memgrad.errors import TraceError
from memgrad.jit.ir import Binding, Const, Graph, Value
from memgrad.ops.registry import REGISTRY

__all__ = ["parse"]

_HEADER = re.compile(r"^graph\((?P<formals>.*)\):$")
_FORMAL = re.compile(
    r"^(?:(?P<kind>param|const)\s+)?%(?P<name>[\w.]+)\s*:\s*(?P<dtype>\w+)"
    r"\[(?P<shape>[\d,\s]*)\](?:\s*=\s*(?P<value>.+))?$"
)
_BINDING = re.compile(r"^%(?P<out>[\w.]+)\s*=\s*(?P<op>\w+)(?P<rest>.*)$")
_REGION = re.compile(r"^checkpoint\s+(?P<name>\w+)\s*\{$")
_VALUE = re.compile(r"^%(?P<name>[\w.]+)$")


def _literal_namespace() -> dict[str, Any]:
    names: dict[str, Any] = {
        "__builtins__": {},
        "slice": slice,
        "inf": float("inf"),
        "nan": float("nan"),
        "array": lambda data, dtype: np.array(data, dtype=dtype),
    }
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                 "bool"):
        names[name] = np.dtype(name)
    return names


def _split_top(text: str) -> list[str]:
    """Split at commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    tail = text[start:]
    if tail.strip():
        parts.append(tail)
    return [p.strip() for p in parts]


def _closing(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced brackets")


def parse(text: str) -> Graph:
    """Read a graph's ``code`` back into an equal Graph (its parameters are unbound: set
    ``graph.bound[name] = tensor`` before running it).

    Example:
        >>> import memgrad as mg
        >>> g = mg.jit.trace(lambda x: x.exp().sum(dim=0), mg.ones(2, 3))
        >>> mg.jit.parse(g.code) == g
        True
    """
    names = _literal_namespace()
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        raise TraceError("memgrad.jit.parse: empty text")

    def fail(n: int, why: str) -> TraceError:
        return TraceError(f"memgrad.jit.parse: line {n + 1}: {why}: {lines[n]!r}")

    # the header may be spread over lines, one formal a line
    end = next((i for i, ln in enumerate(lines) if ln.endswith("):")), 0)
    lines[: end + 1] = [" ".join(lines[: end + 1])]
    header = _HEADER.match(lines[0])
    if header is None:
        raise fail(0, "expected 'graph(%name: dtype[shape], ...):'")
    values: dict[str, Value | Const] = {}
    inputs, params, constants = [], [], []
    for formal in _split_top(header["formals"]):
        m = _FORMAL.match(formal)
        if m is None:
            raise fail(0, f"cannot read the formal parameter {formal!r}")
        shape = tuple(int(s) for s in m["shape"].split(",") if s.strip())
        if m["kind"] == "const":
            try:
                data = _const_data(m["value"], m["dtype"], shape)
            except ValueError as e:
                raise fail(0, str(e)) from None
            c = Const(m["name"], data)
            values[c.name] = c
            constants.append(c)
            continue
        kind = "param" if m["kind"] == "param" else "input"
        v = Value(m["name"], shape, m["dtype"], kind)
        values[v.name] = v
        (params if kind == "param" else inputs).append(v)
    bindings: list[Binding] = []
    outputs: list[Value] = []
    tuple_output = False
    region = None
    for n in range(1, len(lines)):
        line = lines[n]
        if line == "}":
            region = None
            continue
        m = _REGION.match(line)
        if m:
            region = m["name"]
            continue
        if line.startswith("return"):
            body = line[len("return"):].strip()
            tuple_output = body.endswith(",") or "," in body
            for part in _split_top(body):
                vm = _VALUE.match(part)
                if vm is None or vm["name"] not in values:
                    raise fail(n, f"unknown value {part!r} returned")
                outputs.append(values[vm["name"]])
            continue
        m = _BINDING.match(line)
        if m is None:
            raise fail(n, "expected '%name = op[params] args'")
        if m["op"] not in REGISTRY:
            raise fail(n, f"unknown primitive {m['op']!r}")
        rest = m["rest"]
        kwargs: dict[str, Any] = {}
        if rest.startswith("["):
            end = _closing(rest, 0)
            for item in _split_top(rest[1:end]):
                key, _, value = item.partition("=")
                try:
                    kwargs[key.strip()] = eval(value, names)  # noqa: S307 (a closed namespace)
                except Exception as e:
                    raise fail(n, f"cannot read parameter {item!r} ({e})") from None
            rest = rest[end + 1:]
        args: list[Any] = []
        for part in _split_top(rest):
            vm = _VALUE.match(part)
            if vm:
                if vm["name"] not in values:
                    raise fail(n, f"value %{vm['name']} is used before it is defined")
                args.append(values[vm["name"]])
            else:
                try:
                    args.append(eval(part, names))  # noqa: S307 (a closed namespace)
                except Exception as e:
                    raise fail(n, f"cannot read argument {part!r} ({e})") from None
        try:
            out = _infer(m["out"], m["op"], args, kwargs)
        except ValueError as e:
            raise fail(n, str(e)) from None
        values[out.name] = out
        bindings.append(Binding(out, m["op"], args, kwargs, region))
    if not outputs:
        raise TraceError("memgrad.jit.parse: no return line")
    return Graph(inputs, params, bindings, outputs, tuple_output=tuple_output,
                 constants=constants)


def _const_data(text: str | None, dtype: str, shape: tuple) -> np.ndarray:
    if text is None:
        raise ValueError("a const needs its values: '= [...]' or '= b64:...'")
    text = text.strip()
    if text.startswith("b64:"):
        raw = base64.b64decode(text[4:])
        data = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    else:
        data = np.array(eval(text, {"__builtins__": {}, "inf": float("inf"),  # noqa: S307
                                    "nan": float("nan")}), dtype=dtype)
    if data.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"the const has {data.size} values for shape {shape}")
    return data.reshape(shape)


def _infer(name: str, op: str, args: list, params: dict) -> Value:
    """The result type of a binding: its forward run on zeros of the argument types."""
    datas = []
    for a in args:
        if isinstance(a, Value):
            datas.append(np.zeros(a.shape, dtype=a.dtype))
        elif isinstance(a, Const):
            datas.append(a.data)
        else:
            datas.append(a)
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(REGISTRY[op].forward(*datas, **params))
    except Exception as e:
        raise ValueError(f"{op} does not accept these arguments ({e})") from None
    return Value(name, tuple(out.shape), out.dtype.name, "local")
