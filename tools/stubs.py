"""Make the type stubs that show static tools what memgrad binds at import.

``memgrad/tensor.pyi``: the Tensor class with every method, property and operator it has
once ``memgrad`` is imported (those defined in ``tensor.py`` and those the op table and the
engine bind onto it, NOTE [ Public names ]). ``memgrad/ops/__init__.pyi``: the public
functions of the op table. Both are made from the live objects, so they follow the op
table; ``tests/test_stubs.py`` fails when a checked-in stub differs from what this makes.

Usage:
    python tools/stubs.py          # write the stubs
    python tools/stubs.py --check  # exit 1 if a stub is out of date
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HEADER = "# Made by tools/stubs.py from the op table; do not edit by hand.\n"
# the names annotations may use, and what the stub imports for them
KNOWN = {
    "Any", "Callable", "Iterator", "Sequence", "np", "Tensor", "RemovableHandle", "RetainGrad",
    "VersionCounter", "None", "bool", "int", "float", "str", "tuple", "list", "dict", "object",
    "type", "weakref", "ref", "dtype", "ndarray", "Primitive",
}
# attributes of Tensor that are slots, with their types
SLOTS = {"grad": "Tensor | None", "grad_fn": "Any", "output_nr": "int"}
# generic types written bare in the code, as the stub must write them
GENERIC = {"list": "list[Any]", "dict": "dict[Any, Any]", "weakref.ref": "weakref.ref[Any]",
           "tuple": "tuple[Any, ...]"}
# builtins that Tensor's methods shadow inside its class body (Tensor.int, .float, .bool)
SHADOWED = ("int", "float", "bool")
# operators whose stub signature overrides object's differently typed one
OVERRIDES = {"__eq__", "__ne__"}


def _natural(name: str) -> list:
    """``name`` split into text and numbers, for isort's natural order."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _names(names: list[str]) -> str:
    """``__all__ = [...]`` wrapped at 100 columns."""
    items = [f"{n!r}," for n in sorted(names)]
    lines, line = [], "    "
    for item in items:
        if len(line) + len(item) + 1 > 100:
            lines.append(line.rstrip())
            line = "    "
        line += item + " "
    lines.append(line.rstrip())
    return "__all__ = [\n" + "\n".join(lines) + "\n]\n\n"


def _annotation(text: Any, default: str = "Any", in_class: bool = False) -> str:
    if text is inspect.Parameter.empty or text is inspect.Signature.empty:
        return default
    if not isinstance(text, str):
        text = inspect.formatannotation(text)
    names = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))
    if not names <= KNOWN:
        return default
    for bare, full in GENERIC.items():
        text = re.sub(rf"(?<![\w.\[]){re.escape(bare)}(?![\w\[.])", full, text)
    for name in SHADOWED if in_class else ():
        text = re.sub(rf"(?<![\w.]){name}(?![\w\[])", f"builtins.{name}", text)
    return text


def _params(sig: inspect.Signature, self_name: str | None, in_class: bool) -> list[str]:
    out = []
    star = False
    for i, p in enumerate(sig.parameters.values()):
        if i == 0 and self_name is not None:
            out.append(self_name)
            continue
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text = "*" + text
            star = True
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + text
        elif p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        text += ": " + _annotation(p.annotation, in_class=in_class)
        if p.default is not p.empty:
            text += " = ..."
        out.append(text)
    return out


def _def(name: str, fn: Any, self_name: str | None, indent: str, returns: str = "Any") -> str:
    sig = inspect.signature(fn)
    in_class = self_name is not None
    ret = _annotation(sig.return_annotation, returns, in_class)
    params = _params(sig, self_name, in_class)
    ignore = "  # type: ignore[override]" if name in OVERRIDES else ""
    line = f"{indent}def {name}({', '.join(params)}) -> {ret}: ...{ignore}"
    if len(line) <= 100:
        return line + "\n"
    inner = "".join(f"{indent}    {p},\n" for p in params)
    return f"{indent}def {name}(\n{inner}{indent}) -> {ret}: ...\n"


def _imports(body: str, candidates: dict[str, str]) -> str:
    """The import lines of ``candidates`` (name -> line) that ``body`` uses."""
    return "".join(line for name, line in candidates.items()
                   if re.search(rf"(?<![\w.]){re.escape(name)}\b", body))


def tensor_stub() -> str:
    import importlib

    import memgrad  # noqa: F401 (binds the methods)

    module = importlib.import_module("memgrad.tensor")  # mg.tensor is the factory

    Tensor = module.Tensor
    lines = [_names(module.__all__)]
    for name in module.__all__:  # the dtypes
        if type(getattr(module, name)).__module__.startswith("numpy"):
            lines.append(f"{name}: np.dtype[Any]\n")
    lines.append("\n")
    for cls in (module.RemovableHandle, module.RetainGrad, module.VersionCounter):
        lines.append(f"\nclass {cls.__name__}:\n")
        for slot in cls.__slots__:
            lines.append(f"    {slot}: Any\n")
        for attr, value in cls.__dict__.items():
            if inspect.isfunction(value):
                lines.append(_def(attr, value, "self", "    ", "None"))
    lines.append("\n\nclass Tensor:\n")
    for slot in Tensor.__slots__:
        if slot != "__weakref__":
            lines.append(f"    {slot}: {SLOTS.get(slot, 'Any')}\n")
    lines.append("    __array_ufunc__: None\n")
    for attr in sorted(Tensor.__dict__):
        value = Tensor.__dict__[attr]
        if isinstance(value, property):
            ret = _annotation(inspect.signature(value.fget).return_annotation, "Tensor", True)
            lines.append(f"    @property\n    def {attr}(self) -> {ret}: ...\n")
            if value.fset is not None:
                arg = list(inspect.signature(value.fset).parameters.values())[1]
                lines.append(
                    f"    @{attr}.setter\n    def {attr}(self, {arg.name}: "
                    f"{_annotation(arg.annotation, in_class=True)}) -> None: ...\n"
                )
        elif callable(value) and not isinstance(value, type) and attr != "__hash__":
            lines.append(_def(attr, value, "self", "    ", "Tensor"))
    lines.append("    def __hash__(self) -> builtins.int: ...\n")
    lines.append("\n\ndef wrap(data: np.ndarray) -> Tensor: ...\n")
    body = "".join(lines)
    stdlib = _imports(body, {"builtins": "import builtins\n", "weakref": "import weakref\n"})
    abc = [n for n in ("Callable", "Iterator", "Sequence") if re.search(rf"\b{n}\b", body)]
    head = HEADER + "from __future__ import annotations\n\n" + stdlib
    if abc:
        head += f"from collections.abc import {', '.join(abc)}\n"
    head += "from typing import Any\n\nimport numpy as np\n\n"
    return head + body


def ops_stub() -> str:
    import memgrad.ops as ops
    from memgrad.ops.registry import PUBLIC, Primitive

    lines = [
        HEADER,
        "from __future__ import annotations\n\n",
        "from typing import Any\n\n",
        "from memgrad.ops import conv as conv\n",
        "from memgrad.ops import elementwise as elementwise\n",
        "from memgrad.ops import indexing as indexing\n",
        "from memgrad.ops import inplace as inplace\n",
        "from memgrad.ops import linalg as linalg\n",
        "from memgrad.ops import movement as movement\n",
        "from memgrad.ops import nn as nn\n",
        "from memgrad.ops import reduce as reduce\n",
        "from memgrad.ops import registry as registry\n",
        "from memgrad.ops.registry import REGISTRY as REGISTRY\n",
        "from memgrad.ops.registry import Primitive as Primitive\n",
        "from memgrad.tensor import Tensor\n\n",
        _names(ops.__all__),
    ]
    here, imported = [], []
    for name in sorted(PUBLIC):
        fn = PUBLIC[name]
        module = fn.__module__ if not isinstance(fn, Primitive) else fn.forward.__module__
        if module == "memgrad.ops":
            here.append(_def(name, fn, None, ""))
        else:
            imported.append((module, name))
    # isort's order (ruff's I001): numbers inside names compare as numbers, log2 < log10
    lines.extend(f"from {m} import {n} as {n}\n"
                 for m, n in sorted(imported, key=lambda mn: (mn[0], _natural(mn[1]))))
    lines.append("\n")
    lines.append("HANDLES: dict[str, Any]\n")
    # the primitives that are their own handles (NOTE [ Op handles ] in ops/__init__.py)
    lines.extend(f"{n}: Primitive\n" for n in sorted(ops.HANDLES) if n not in PUBLIC)
    lines.append("\n")
    lines.extend(here)
    return "".join(lines)


def stubs() -> dict[Path, str]:
    """The stubs, by path."""
    return {
        ROOT / "memgrad" / "tensor.pyi": tensor_stub(),
        ROOT / "memgrad" / "ops" / "__init__.pyi": ops_stub(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in stubs().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"stale stubs: {names}; run python tools/stubs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
