"""``parse``: read the text of ``Graph.code`` back into a Graph.

NOTE [ Parse reads literals ]
``parse`` evaluates nothing: a tokenizer and a recursive-descent parser read the grammar
below, and every value in the text is built from literal tokens. Every malformed text raises
``TraceError`` naming the line and column (``memgrad.jit.parse: line 3, column 17: expected
...``), followed by the line with a caret under the column.

```
graph    := 'graph' '(' [formal (',' formal)*] ')' ':' NEWLINE stmt*
formal   := ['param' | 'const'] VALUE ':' DTYPE '[' [INT (',' INT)*] ']' ['=' constval]
constval := literal | 'b64:' BASE64          (only a const has one, and it must)
stmt     := VALUE '=' NAME ['[' [NAME '=' literal (',' NAME '=' literal)*] ']'] [arg (',' arg)*]
          | 'checkpoint' NAME '{' | '}' | 'return' VALUE (',' VALUE)* [',']
arg      := VALUE | literal
literal  := ['-'] (NUMBER | 'inf' | 'nan') | STRING | 'True' | 'False' | 'None' | '...'
          | DTYPE | DTYPE '(' literal ')' | 'slice' '(' literal (',' literal)* ')'
          | 'array' '(' literal ',' DTYPE ')' | '(' literal, ... ')' | '[' literal, ... ']'
```

A statement ends at the end of its line; inside ``(`` and ``[`` lines join (the header may
hold one formal a line). ``#`` starts a comment. The brackets of parameters touch the
primitive's name (``sum[dim=None]``). The result types come from ``memgrad.jit.shapes``
(NOTE [ Parse-time inference ]). The limits below bound the time and memory a text can cost.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, NamedTuple

import numpy as np

from memgrad.autograd.graph import Meta
from memgrad.errors import TraceError
from memgrad.jit.graph import Graph
from memgrad.jit.ir import Binding, Const, Value
from memgrad.jit.shapes import DTYPES, elements, result_type
from memgrad.ops.registry import REGISTRY

__all__ = [
    "parse",
    "MAX_LITERAL_CHARS",
    "MAX_NUMBER_CHARS",
    "MAX_DEPTH",
    "MAX_TOKENS",
    "MAX_ELEMENTS",
    "MAX_INFERRED_ELEMENTS",
]

MAX_LITERAL_CHARS = 1 << 24  # one parameter, argument or const list (not base64 data)
MAX_NUMBER_CHARS = 100  # one number, so that no literal is slow to convert
MAX_DEPTH = 32  # brackets open at once
MAX_TOKENS = 1 << 25  # tokens in the whole text
MAX_ELEMENTS = 1 << 28  # elements of any one shape (declared, a parameter, or inferred)
MAX_INFERRED_ELEMENTS = 1 << 32  # elements of all the bindings' results together

_TOKEN = re.compile(
    r"""
      (?P<space>[ \t\r\f\v]+|\#[^\n]*)
    | (?P<newline>\n)
    | (?P<value>%[\w.]+)
    | (?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    | (?P<name>[^\W\d]\w*)
    | (?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
    | (?P<punct>\.\.\.|[()\[\]{},:=\-])
    """,
    re.VERBOSE,
)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "0": "\0",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_NAMED = {"True": True, "False": False, "None": None, "inf": float("inf"), "nan": float("nan")}


class _Token(NamedTuple):
    kind: str  # space, newline, value, number, name, string, punct, or end
    text: str
    start: int
    end: int


def _where(text: str, pos: int) -> str:
    """``line L, column C`` of ``pos``, and that line with a caret under it."""
    line = text.count("\n", 0, pos) + 1
    start = text.rfind("\n", 0, pos) + 1
    stop = text.find("\n", pos)
    stop = len(text) if stop < 0 else stop
    lo = max(start, pos - 40)
    hi = min(stop, lo + 80)
    shown = "".join(c if c.isprintable() else " " for c in text[lo:hi])
    left = "..." if lo > start else ""
    right = "..." if hi < stop else ""
    caret = " " * (len(left) + pos - lo) + "^"
    return f"line {line}, column {pos - start + 1}", f"    {left}{shown}{right}\n    {caret}"


class _Scanner:
    """Tokens on demand (``b64:`` data is read raw where the parser asks for it)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0  # open ( and [: newlines inside them join lines
        self.count = 0
        self.ahead: _Token | None = None

    def fail(self, pos: int, message: str) -> TraceError:
        where, excerpt = _where(self.text, pos)
        return TraceError(f"memgrad.jit.parse: {where}: {message}\n{excerpt}")

    def peek(self) -> _Token:
        if self.ahead is None:
            self.ahead = self._scan()
        return self.ahead

    def next(self) -> _Token:
        tok = self.peek()
        self.ahead = None
        return tok

    def raw(self, pattern: re.Pattern) -> _Token:
        assert self.ahead is None, "raw data is read right after a consumed token"
        m = pattern.match(self.text, self.pos)
        self.pos = m.end()
        return _Token("raw", m.group(), m.start(), m.end())

    def _scan(self) -> _Token:
        text = self.text
        while True:
            if self.pos >= len(text):
                return _Token("end", "", len(text), len(text))
            m = _TOKEN.match(text, self.pos)
            if m is None:
                raise self.fail(self.pos, self._bad_character())
            kind = m.lastgroup
            self.pos = m.end()
            if kind == "space" or (kind == "newline" and self.depth):
                continue
            tok = _Token(kind, m.group(), m.start(), m.end())
            self.count += 1
            if self.count > MAX_TOKENS:
                raise self.fail(tok.start, f"the text has more than MAX_TOKENS={MAX_TOKENS} tokens")
            if kind == "number" and len(tok.text) > MAX_NUMBER_CHARS:
                raise self.fail(
                    tok.start,
                    f"a number of {len(tok.text)} digits; a number has at most "
                    f"MAX_NUMBER_CHARS={MAX_NUMBER_CHARS} characters",
                )
            if kind == "punct" and tok.text in "([":
                self.depth += 1
                if self.depth > MAX_DEPTH:
                    raise self.fail(
                        tok.start, f"brackets nested deeper than MAX_DEPTH={MAX_DEPTH}"
                    )
            elif kind == "punct" and tok.text in ")]":
                self.depth = max(self.depth - 1, 0)
            return tok

    def _bad_character(self) -> str:
        c = self.text[self.pos]
        if c in "'\"":
            return "a string that does not end on its line (a closing quote is missing)"
        if c == "%":
            return "expected a value name after '%' (such as %x or %3)"
        if c == "*":
            return (
                "unexpected '*': the text holds literals only (no arithmetic such as ** or *); "
                "write the number itself"
            )
        return f"unexpected character {c!r}; the text holds literals only"


def _describe(tok: _Token) -> str:
    if tok.kind == "end":
        return "the end of the text"
    if tok.kind == "newline":
        return "the end of the line"
    text = tok.text if len(tok.text) <= 30 else tok.text[:27] + "..."
    return repr(text)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.scan = _Scanner(text)
        self.values: dict[str, Value | Const] = {}
        self.lines: dict[str, int] = {}  # where each value was defined
        self.literal_end: int | None = None
        self.inferred = 0

    # ------------------------------------------------------------------------ tokens

    def fail(self, pos: int, message: str) -> TraceError:
        return self.scan.fail(pos, message)

    def next(self) -> _Token:
        tok = self.scan.next()
        if self.literal_end is not None and tok.end > self.literal_end:
            raise self.fail(
                tok.start,
                f"a literal longer than MAX_LITERAL_CHARS={MAX_LITERAL_CHARS} characters",
            )
        return tok

    def peek(self) -> _Token:
        return self.scan.peek()

    def is_(self, tok: _Token, kind: str, text: str | None = None) -> bool:
        return tok.kind == kind and (text is None or tok.text == text)

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        if self.is_(self.peek(), kind, text):
            return self.next()
        return None

    def expect(self, kind: str, text: str | None = None, what: str | None = None) -> _Token:
        tok = self.next()
        if not self.is_(tok, kind, text):
            raise self.fail(tok.start, f"expected {what or repr(text)}, got {_describe(tok)}")
        return tok

    def end_of_line(self) -> None:
        tok = self.next()
        if tok.kind not in ("newline", "end"):
            raise self.fail(tok.start, f"expected the end of the line, got {_describe(tok)}")

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def define(self, tok: _Token, value: Value | Const) -> None:
        name = tok.text[1:]
        if name in self.values:
            raise self.fail(
                tok.start, f"%{name} is already defined (line {self.lines[name]}); use a new name"
            )
        self.values[name] = value
        self.lines[name] = self.line_of(tok.start)

    def lookup(self, tok: _Token) -> Value | Const:
        value = self.values.get(tok.text[1:])
        if value is None:
            raise self.fail(tok.start, f"value {tok.text} is used before it is defined")
        return value

    # ------------------------------------------------------------------------ the graph

    def graph(self) -> Graph:
        while self.accept("newline"):
            pass
        self.expect("name", "graph", "'graph(' at the start of the text")
        self.expect("punct", "(", "'(' after 'graph'")
        formals: list[Value | Const] = []
        if not self.accept("punct", ")"):
            while True:
                formals.append(self.formal())
                tok = self.next()
                if self.is_(tok, "punct", ")"):
                    break
                if not self.is_(tok, "punct", ","):
                    raise self.fail(tok.start, f"expected ',' or ')', got {_describe(tok)}")
        self.expect("punct", ":", "':' after the formal parameters")
        self.end_of_line()
        bindings, outputs, tuple_output = self.body()
        return Graph(
            [v for v in formals if isinstance(v, Value) and v.kind == "input"],
            [v for v in formals if isinstance(v, Value) and v.kind == "param"],
            bindings,
            outputs,
            tuple_output=tuple_output,
            constants=[c for c in formals if isinstance(c, Const)],
        )

    def formal(self) -> Value | Const:
        tok = self.next()
        kind = "input"
        if tok.kind == "name" and tok.text in ("param", "const"):
            kind = tok.text
            tok = self.next()
        if tok.kind != "value":
            raise self.fail(
                tok.start,
                f"expected a formal parameter ('%name: dtype[shape]', 'param %name: ...' or "
                f"'const %name: ... = values'), got {_describe(tok)}",
            )
        self.expect("punct", ":", f"':' and a type after {tok.text}")
        dtype, shape = self.type_()
        if kind != "const":
            if self.is_(self.peek(), "punct", "="):
                raise self.fail(self.peek().start, f"only a const has values; {tok.text} is "
                                f"{'a param' if kind == 'param' else 'an input'}")
            value: Value | Const = Value(tok.text[1:], shape, dtype.name, kind)
        else:
            self.expect("punct", "=", f"'=' and the values of const {tok.text}")
            value = Const(tok.text[1:], self.const_data(tok.text, dtype, shape))
        self.define(tok, value)
        return value

    def type_(self) -> tuple[np.dtype, tuple[int, ...]]:
        tok = self.expect("name", what="a dtype such as float32")
        if tok.text not in DTYPES:
            raise self.fail(
                tok.start, f"unknown dtype {tok.text!r}; expected one of {sorted(DTYPES)}"
            )
        self.expect("punct", "[", f"'[' and the shape after {tok.text}")
        shape: list[int] = []
        if not self.accept("punct", "]"):
            while True:
                size = self.expect("number", what="a size (a non-negative integer)")
                if not size.text.isdigit():
                    raise self.fail(size.start, f"a size is an integer >= 0, not {size.text}")
                shape.append(int(size.text))
                if elements(shape) > MAX_ELEMENTS:
                    raise self.fail(
                        tok.start,
                        f"the shape {tuple(shape)}... has more than MAX_ELEMENTS={MAX_ELEMENTS} "
                        "elements",
                    )
                end = self.next()
                if self.is_(end, "punct", "]"):
                    break
                if not self.is_(end, "punct", ","):
                    raise self.fail(end.start, f"expected ',' or ']', got {_describe(end)}")
        return np.dtype(tok.text), tuple(shape)

    def const_data(self, name: str, dtype: np.dtype, shape: tuple) -> np.ndarray:
        tok = self.peek()
        if self.is_(tok, "name", "b64"):
            self.next()
            self.expect("punct", ":", "':' after b64")
            data = self.scan.raw(_BASE64)
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            want = 4 * ((size + 2) // 3)
            if len(data.text) != want:
                raise self.fail(
                    data.start,
                    f"the base64 data of {name} has {len(data.text)} characters; "
                    f"{dtype.name}{list(shape)} takes {want}",
                )
            try:
                raw = base64.b64decode(data.text, validate=True)
            except (binascii.Error, ValueError) as e:
                raise self.fail(data.start, f"malformed base64 data of {name} ({e})") from None
            if len(raw) != size:
                raise self.fail(data.start, f"the base64 data of {name} holds {len(raw)} bytes, "
                                f"{dtype.name}{list(shape)} takes {size}")
            if dtype.kind == "b":
                return (np.frombuffer(raw, np.uint8) != 0).reshape(shape)
            return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype).reshape(shape)
        data = self.to_array(self.literal_top(), dtype, tok.start)
        if data.size != int(np.prod(shape, dtype=np.int64)):
            raise self.fail(tok.start, f"const {name} has {data.size} values; "
                            f"{dtype.name}{list(shape)} takes {int(np.prod(shape))}")
        return data.reshape(shape)

    def body(self) -> tuple[list[Binding], list[Value], bool]:
        bindings: list[Binding] = []
        region: tuple[str, int] | None = None  # name, line
        seen: set[str] = set()
        while True:
            tok = self.peek()
            if tok.kind == "end":
                raise self.fail(tok.start, "the text ends without a 'return' line")
            if self.accept("newline"):
                continue
            if tok.kind == "value":
                bindings.append(self.binding(region[0] if region else None))
            elif self.is_(tok, "name", "checkpoint"):
                self.next()
                name = self.expect("name", what="the name of the checkpoint region")
                if region is not None:
                    raise self.fail(tok.start, f"a checkpoint block inside the block {region[0]} "
                                    f"(line {region[1]}); close that one with '}}' first")
                if name.text in seen:
                    raise self.fail(name.start, f"a second checkpoint block {name.text}; each "
                                    "region is one block")
                self.expect("punct", "{", f"'{{' after checkpoint {name.text}")
                self.end_of_line()
                region = (name.text, self.line_of(tok.start))
                seen.add(name.text)
            elif self.is_(tok, "punct", "}"):
                self.next()
                if region is None:
                    raise self.fail(tok.start, "'}' closes no checkpoint block")
                region = None
                self.end_of_line()
            elif self.is_(tok, "name", "return"):
                self.next()
                if region is not None:
                    raise self.fail(tok.start, f"return inside the checkpoint block {region[0]} "
                                    f"(line {region[1]}); close it with '}}' first")
                outputs, tuple_output = self.returned()
                while self.accept("newline"):
                    pass
                end = self.next()
                if end.kind != "end":
                    raise self.fail(end.start, "nothing may follow the return line")
                return bindings, outputs, tuple_output
            else:
                raise self.fail(
                    tok.start,
                    "expected a binding ('%name = op[params] args'), 'checkpoint NAME {', '}' "
                    f"or 'return', got {_describe(tok)}",
                )

    def returned(self) -> tuple[list[Value], bool]:
        outputs: list[Value] = []
        comma = False
        while True:
            tok = self.expect("value", what="a value to return (%name)")
            value = self.lookup(tok)
            if not isinstance(value, Value):
                raise self.fail(tok.start, f"{tok.text} is a const; a graph returns values it "
                                "takes or computes")
            outputs.append(value)
            comma = self.accept("punct", ",") is not None
            if not comma or self.peek().kind in ("newline", "end"):
                break
        self.end_of_line()
        return outputs, comma or len(outputs) > 1

    def binding(self, region: str | None) -> Binding:
        out = self.next()
        self.expect("punct", "=", f"'=' after {out.text}")
        op = self.expect("name", what="the name of a primitive")
        if op.text not in REGISTRY:
            raise self.fail(op.start, f"unknown primitive {op.text!r}")
        params: dict[str, Any] = {}
        tok = self.peek()
        if self.is_(tok, "punct", "[") and tok.start == op.end:
            self.next()
            params = self.params()
        args: list[Any] = []
        if self.peek().kind not in ("newline", "end"):
            while True:
                tok = self.peek()
                if tok.kind == "value":
                    args.append(self.lookup(self.next()))
                else:
                    args.append(self.literal_top())
                if not self.accept("punct", ","):
                    break
        self.end_of_line()
        metas = [Meta((a.shape, np.dtype(a.dtype))) if isinstance(a, Value)
                 else Meta((a.data.shape, a.data.dtype)) if isinstance(a, Const) else a
                 for a in args]
        try:
            shape, dtype = result_type(op.text, metas, params, MAX_ELEMENTS)
        except ValueError as e:
            raise self.fail(op.start, f"{op.text}: {e}") from None
        self.inferred += elements(shape)
        if self.inferred > MAX_INFERRED_ELEMENTS:
            raise self.fail(
                op.start,
                f"the results so far hold more than MAX_INFERRED_ELEMENTS={MAX_INFERRED_ELEMENTS}"
                " elements",
            )
        value = Value(out.text[1:], shape, dtype.name, "local")
        self.define(out, value)
        return Binding(value, op.text, args, params, region)

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.accept("punct", "]"):
            return params
        while True:
            key = self.expect("name", what="a parameter name")
            if key.text in params:
                raise self.fail(key.start, f"the parameter {key.text} is given twice")
            self.expect("punct", "=", f"'=' after the parameter {key.text}")
            params[key.text] = self.literal_top()
            tok = self.next()
            if self.is_(tok, "punct", "]"):
                return params
            if not self.is_(tok, "punct", ","):
                raise self.fail(tok.start, f"expected ',' or ']', got {_describe(tok)}")

    # ------------------------------------------------------------------------ literals

    def literal_top(self) -> Any:
        self.literal_end = self.peek().start + MAX_LITERAL_CHARS
        try:
            return self.literal()
        finally:
            self.literal_end = None

    def literal(self) -> Any:
        tok = self.next()
        kind, text = tok.kind, tok.text
        if kind == "number":
            return _number(text)
        if self.is_(tok, "punct", "-"):
            num = self.next()
            if num.kind == "number":
                return -_number(num.text)
            if self.is_(num, "name", "inf") or self.is_(num, "name", "nan"):
                return -_NAMED[num.text]
            raise self.fail(num.start, f"expected a number after '-', got {_describe(num)}")
        if kind == "string":
            return self.string(tok)
        if self.is_(tok, "punct", "..."):
            return Ellipsis
        if self.is_(tok, "punct", "("):
            items, comma = self.items(")")
            return items[0] if len(items) == 1 and not comma else tuple(items)
        if self.is_(tok, "punct", "["):
            return self.items("]")[0]
        if kind == "name":
            if text in _NAMED:
                return _NAMED[text]
            if text == "slice":
                return self.slice_(tok)
            if text == "array":
                self.expect("punct", "(", "'(' after array")
                at = self.peek().start
                data = self.literal()
                dtype = self.dtype_after(",")
                self.expect("punct", ")", "')' after the dtype of the array")
                return self.to_array(data, dtype, at)
            if text in DTYPES:
                nxt = self.peek()
                if self.is_(nxt, "punct", "(") and nxt.start == tok.end:
                    return self.scalar(tok)
                return np.dtype(text)
            raise self.fail(
                tok.start,
                f"unknown name {text!r}; a literal is a number, a string, True, False, None, "
                "..., a dtype, a tuple, a list, slice(start, stop, step) or array([...], dtype)",
            )
        raise self.fail(tok.start, f"expected a literal, got {_describe(tok)}")

    def items(self, close: str) -> tuple[list, bool]:
        """The items up to ``close`` and whether a comma came after the last."""
        items: list = []
        comma = False
        while not self.accept("punct", close):
            if items and not comma:
                tok = self.next()
                raise self.fail(tok.start, f"expected ',' or {close!r}, got {_describe(tok)}")
            items.append(self.literal())
            comma = self.accept("punct", ",") is not None
        return items, comma

    def slice_(self, tok: _Token) -> slice:
        self.expect("punct", "(", "'(' after slice")
        parts, _ = self.items(")")
        if not 1 <= len(parts) <= 3 or not all(
            p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts
        ):
            raise self.fail(tok.start, "slice(...) takes one to three ints or None")
        return slice(*parts)

    def dtype_after(self, punct: str) -> np.dtype:
        self.expect("punct", punct, f"{punct!r} and a dtype")
        tok = self.expect("name", what="a dtype such as int64")
        if tok.text not in DTYPES:
            raise self.fail(
                tok.start, f"unknown dtype {tok.text!r}; expected one of {sorted(DTYPES)}"
            )
        return np.dtype(tok.text)

    def scalar(self, tok: _Token) -> np.generic:
        """``float32(0.5)``: a NumPy scalar of a dtype."""
        dtype = np.dtype(tok.text)
        self.next()
        at = self.peek()
        v = self.literal()
        self.expect("punct", ")", f"')' after the value of {tok.text}(...)")
        if not isinstance(v, (bool, int, float)):
            raise self.fail(at.start, f"{tok.text}(...) takes a number, got {type(v).__name__}")
        return self.to_array(v, dtype, at.start)[()]

    def to_array(self, data: Any, dtype: np.dtype, at: int) -> np.ndarray:
        """The literal ``data`` (read at ``at``) as an array of ``dtype``: numbers of its
        kind in rectangular nested lists."""
        try:
            arr = np.array(data)
        except (ValueError, TypeError, OverflowError):
            raise self.fail(at, "expected numbers in rectangular nested lists") from None
        kind = arr.dtype.kind
        fits = {"b": kind == "b", "i": kind in "iu", "u": kind in "iu", "f": kind in "iuf"}
        if arr.size and not fits.get(dtype.kind, False):
            what = {"b": "True or False", "i": "ints", "u": "ints", "f": "numbers"}
            raise self.fail(
                at, f"{dtype.name} data must hold {what.get(dtype.kind, 'numbers')}, got "
                f"{'strings or other values' if kind in 'OUS' else np.dtype(arr.dtype).name}",
            )
        if dtype.kind in "iu" and arr.size:
            info = np.iinfo(dtype)
            if arr.min() < info.min or arr.max() > info.max:
                raise self.fail(at, f"a value does not fit {dtype.name} "
                                f"[{info.min}, {info.max}]")
        with np.errstate(all="ignore"):
            return arr.astype(dtype)

    def string(self, tok: _Token) -> str:
        body = tok.text[1:-1]
        if "\\" not in body:
            return body

        def unescape(m: re.Match) -> str:
            hex_code = m.group(1) or m.group(2) or m.group(3)
            if hex_code is not None:
                code = int(hex_code, 16)
                if code > 0x10FFFF:
                    raise self.fail(tok.start + 1 + m.start(), f"no character {m.group()!r}")
                return chr(code)
            if m.group(4) not in _ESCAPES:
                raise self.fail(tok.start + 1 + m.start(), f"unknown escape {m.group()!r}")
            return _ESCAPES[m.group(4)]

        return _ESCAPE.sub(unescape, body)


def _number(text: str) -> int | float:
    return int(text) if text.isdigit() else float(text)


def parse(text: str) -> Graph:
    """Read a graph's ``code`` back into an equal Graph (its parameters are unbound: set
    ``graph.bound[name] = tensor`` before running it). The text holds literals only;
    nothing in it is evaluated (NOTE [ Parse reads literals ]), and a malformed text raises
    ``TraceError`` naming the line and column.

    Example:
        >>> import memgrad as mg
        >>> g = mg.jit.trace(lambda x: x.exp().sum(dim=0), mg.ones(2, 3))
        >>> mg.jit.parse(g.code) == g
        True
    """
    if not isinstance(text, str):
        raise TypeError(
            f"memgrad.jit.parse: expected the text of a graph (a str, such as graph.code), got "
            f"{type(text).__name__}"
        )
    return _Parser(text).graph()
