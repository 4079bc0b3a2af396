"""Make the table of docs/design.md that lists the core's files and their sizes.

The core is ``memgrad/tensor.py``, ``memgrad/autograd/`` (less ``functional.py``, written on
``autograd.grad`` alone), ``memgrad/ops/registry.py`` and ``memgrad/interpreters.py``;
``tests/test_design.py`` fails when the table differs from what this makes, or when the core
outgrows its budget.

Usage:
    python tools/design_tables.py          # rewrite the table
    python tools/design_tables.py --check  # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
BUDGET = 3600  # lines; stated in docs/design.md
# modules of autograd/ written on its public API alone (autograd.grad): libraries over the
# core, which nobody changing the core must read
LIBRARY = {"functional.py"}
START, END = "<!-- core table: made by tools/design_tables.py -->", "<!-- /core table -->"


def core_files() -> list[Path]:
    files = [ROOT / "memgrad" / "tensor.py", ROOT / "memgrad" / "interpreters.py",
             ROOT / "memgrad" / "ops" / "registry.py"]
    files += sorted(p for p in (ROOT / "memgrad" / "autograd").glob("*.py")
                    if p.name not in LIBRARY)
    return files


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _summary(path: Path) -> str:
    """The first sentence of the module's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".")


def table() -> str:
    rows = ["| file | lines | what it holds |", "| --- | ---: | --- |"]
    total = 0
    for path in core_files():
        n = lines(path)
        total += n
        rows.append(f"| `{path.relative_to(ROOT)}` | {n} | {_summary(path)} |")
    rows.append(f"| **core** | **{total}** | budget {BUDGET:,} |")
    return "\n".join(rows)


def render(text: str) -> str:
    before, rest = text.split(START)
    _, after = rest.split(END)
    return f"{before}{START}\n{table()}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    text = DESIGN.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print("docs/design.md's core table is stale; run python tools/design_tables.py",
                  file=sys.stderr)
            return 1
        return 0
    DESIGN.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
