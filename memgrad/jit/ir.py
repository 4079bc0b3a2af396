"""The let-binding IR: a closed program of primitive calls.

```
graph(%x: float32[4, 8], param %w: float32[8, 8]):
  %0 = matmul %x, %w                  # float32[4, 8]
  %1 = tanh %0                        # float32[4, 8]
  %2 = sum[dim=None, keepdim=False] %1  # float32[]
  return %2
```

Formal parameters are the inputs, the tensors the function closes over that require grad
(parameters, marked ``param``), by name, and the other tensors it uses (constants, marked
``const``; ``code`` carries their values). Each binding calls one primitive of the op table on
values, Python scalars (a NumPy scalar keeps its dtype: ``float32(0.5)``) or constants; keyword
parameters of the primitive go in brackets, written as literals (``format_literal``).
Bindings made inside a checkpoint region are printed inside a ``checkpoint NAME { ... }``
block. This module holds the values and bindings; ``memgrad.jit.graph`` the program.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Value", "Const", "Binding", "format_literal"]


@dataclass(frozen=True)
class Value:
    """A named value: a formal parameter (``kind`` "input" or "param") or a binding's
    result (``kind`` "local")."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str = "local"

    def __str__(self) -> str:
        return f"%{self.name}"

    @property
    def type_str(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, eq=False)
class Const:
    """A tensor the function uses that it did not compute and that does not require grad,
    named ``%c0``, ``%c1``... Captured by reference (no copy): an in-place change to it shows
    in later runs."""

    name: str
    data: np.ndarray

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Const)
            and self.name == other.name
            and self.data.dtype == other.data.dtype
            and self.data.shape == other.data.shape
            and np.array_equal(self.data, other.data, equal_nan=self.data.dtype.kind == "f")
        )

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return f"%{self.name}"

    @property
    def type_str(self) -> str:
        return f"{self.data.dtype.name}[{', '.join(map(str, self.data.shape))}]"

    def value_text(self) -> str:
        """The values as text: a list for up to 64 elements, else base64 of the bytes."""
        if self.data.size <= 64:
            return repr(self.data.tolist())
        raw = np.ascontiguousarray(self.data).astype(self.data.dtype.newbyteorder("<"))
        return "b64:" + base64.b64encode(raw.tobytes()).decode("ascii")


@dataclass(eq=False)
class Binding:
    """``%out = op[params] args``; ``region`` names the checkpoint region it ran in."""

    out: Value
    op: str
    args: list[Any]  # Value, Const or a Python scalar
    params: dict[str, Any]
    region: str | None = None

    def __eq__(self, other: object) -> bool:
        # parameters may hold arrays (an index): compare them by their text
        return (
            isinstance(other, Binding)
            and (self.out, self.op, self.args, self.region)
            == (other.out, other.op, other.args, other.region)
            and str(self) == str(other)
        )

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        params = ""
        if self.params:
            params = "[" + ", ".join(f"{k}={format_literal(v)}" for k, v in self.params.items())
            params += "]"
        args = ", ".join(_arg_text(a) for a in self.args)
        return f"{self.out} = {self.op}{params} {args}".rstrip()


def format_literal(v: Any) -> str:
    """A parameter value as text that ``parse`` reads back as an equal value (NumPy scalars
    as Python numbers).

    Example:
        >>> import numpy as np
        >>> format_literal((slice(np.int64(1), None, None), np.array([0, 2]), ...))
        '(slice(1, None, None), array([0, 2], int64), ...)'
    """
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, type) and issubclass(v, np.generic):  # np.float32 given for a dtype
        return np.dtype(v).name
    if isinstance(v, np.ndarray):
        return f"array({v.tolist()!r}, {v.dtype.name})"
    if isinstance(v, slice):
        return f"slice({', '.join(format_literal(x) for x in (v.start, v.stop, v.step))})"
    if v is Ellipsis:
        return "..."
    if isinstance(v, tuple):
        inner = ", ".join(format_literal(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(format_literal(x) for x in v) + "]"
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return repr(v.item())
    return repr(v)


def _arg_text(a: Any) -> str:
    """A binding's argument as text; a NumPy scalar keeps its dtype (``float32(0.5)``), which
    decides the result's dtype where a Python number would not."""
    if isinstance(a, (Value, Const)):
        return str(a)
    if isinstance(a, np.generic):
        return f"{a.dtype.name}({a.item()!r})"
    return format_literal(a)
