"""Check that the built API reference documents every public name of memgrad.

The public modules are ``memgrad`` and every module reachable through the ``__all__`` lists
from it (``memgrad.nn``, ``memgrad.nn.functional``, ...). Each must have an anchor in the built
site (a page that renders it with ``::: memgrad.<module>``), and so must each public name
in their ``__all__``: under any public path it is reachable by (``memgrad.tanh`` is documented
as ``memgrad.ops.tanh``) or under its defining module (for a name the reference cannot reach
through its package, such as a function named like the submodule it is defined in: render
it with ``::: <its module>.<name>``). Run after ``mkdocs build``; a new public module or name
without a place in the reference fails here with the line to add.

Usage:
    mkdocs build --strict && python tools/check_reference.py site
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import types
from pathlib import Path

_ANCHOR = re.compile(r'id="([A-Za-z_][\w.]*)"')


def public_modules(root: str = "memgrad") -> dict[str, types.ModuleType]:
    """``root`` and every module reachable from it through ``__all__``, by dotted name."""
    found: dict[str, types.ModuleType] = {}
    todo = [importlib.import_module(root)]
    while todo:
        mod = todo.pop()
        if mod.__name__ in found:
            continue
        found[mod.__name__] = mod
        todo += [v for n in getattr(mod, "__all__", ()) if isinstance(v := getattr(mod, n),
                                                                       types.ModuleType)]
    return found


def paths_by_object(modules: dict[str, types.ModuleType]) -> dict[int, tuple[object, set[str]]]:
    """Each public object (by id) and the dotted paths that reach it."""
    out: dict[int, tuple[object, set[str]]] = {}
    for name, mod in modules.items():
        for attr in mod.__all__:
            obj = getattr(mod, attr)
            if isinstance(obj, types.ModuleType) or attr.startswith("__"):
                continue
            paths = out.setdefault(id(obj), (obj, set()))[1]
            paths.add(f"{name}.{attr}")
            defined = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if all(isinstance(p, str) for p in defined):
                paths.add(".".join(defined))  # type: ignore[arg-type]
    return out


def missing(anchors: set[str], modules: dict[str, types.ModuleType]) -> list[str]:
    """The modules and names of the public API that no anchor in ``anchors`` documents."""
    out = [f"module {name}: add a page with '::: {name}' to docs/reference/ and mkdocs.yml"
           for name in sorted(modules) if name not in anchors]
    for _, paths in paths_by_object(modules).values():
        if not paths & anchors:
            best = min(paths, key=lambda p: (p.count("."), p))
            out.append(f"{best}: not in the reference (reached as {', '.join(sorted(paths))}); "
                       "give it a docstring, or render its defining module's path")
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the folder mkdocs build wrote (site_dir)")
    args = parser.parse_args(argv)
    pages = sorted((args.site / "reference").rglob("*.html"))
    if not pages:
        print(f"check_reference: no reference pages under {args.site}/reference; run "
              "mkdocs build --strict first", file=sys.stderr)
        return 2
    anchors = {a for page in pages for a in _ANCHOR.findall(page.read_text())}
    modules = public_modules()
    found = missing(anchors, modules)
    for line in found:
        print(f"check_reference: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"check_reference: {len(modules)} public modules and their names are all documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
