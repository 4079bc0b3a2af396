"""Make the table of op handles in docs/checkpointing.md: every primitive of the op table,
the handle a selective-checkpoint policy receives for it (NOTE [ Op handles ] in
memgrad/ops/__init__.py), its kind and what it computes. Made from the live op table, so a
new primitive appears in it; ``tests/test_op_handles.py`` fails when the page is stale.

Usage:
    python tools/op_handles.py          # rewrite the table
    python tools/op_handles.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "checkpointing.md"
START, END = "<!-- op handles: made by tools/op_handles.py -->", "<!-- /op handles -->"


def _what(name: str) -> str:
    import memgrad as mg
    from memgrad.ops.registry import PUBLIC

    doc = mg.ops.REGISTRY[name].forward.__doc__ or getattr(PUBLIC.get(name), "__doc__", None)
    first = " ".join((doc or "").strip().split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".").replace("|", "\\|") or "-"


def table() -> str:
    import memgrad as mg
    from memgrad.ops.registry import PUBLIC

    rows = ["| handle | kind | what it computes |", "| --- | --- | --- |"]
    for name in sorted(mg.ops.HANDLES):
        prim = mg.ops.REGISTRY[name]
        spelled = f"`mg.ops.{name}`" + ("" if name in PUBLIC else " (the record)")
        rows.append(f"| {spelled} | {prim.kind} | {_what(name)} |")
    return "\n".join(rows)


def render(text: str) -> str:
    before, rest = text.split(START)
    _, after = rest.split(END)
    return f"{before}{START}\n{table()}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    text = PAGE.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print("docs/checkpointing.md's op handle table is stale; run "
                  "python tools/op_handles.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
