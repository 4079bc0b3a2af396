"""The package's imports follow the layer table of docs/design.md: every import in
``memgrad/`` (at any depth, inside functions too) points to the same layer or a lower one,
and no modules import each other in a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memgrad"


def _layers() -> dict[str, int]:
    text = (ROOT / "docs" / "design.md").read_text()
    block = text.split("<!-- layers: top first -->")[1].split("<!-- /layers -->")[0]
    layers = {}
    for row in block.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            for name in re.findall(r"`([\w.]+)`", cells[1]):
                layers[name] = int(cells[0])
    return layers


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for m, path in mods.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            else:
                continue
            for n in names:
                target = resolve(n) if n.split(".")[0] == "memgrad" else None
                # an ancestor package runs first anyway: not an edge
                if target and target != m and not m.startswith(target + "."):
                    found.add(target)
        edges[m] = found
    return edges


def _layer_of(module: str, layers: dict[str, int]) -> int:
    best = max((p for p in layers if module == p or module.startswith(p + ".")),
               key=len, default=None)
    assert best is not None, f"{module} is in no row of the layer table in docs/design.md"
    return layers[best]


def test_every_module_has_a_layer():
    layers = _layers()
    assert len(set(layers.values())) >= 10
    for m in _modules():
        _layer_of(m, layers)


def test_imports_point_down():
    layers = _layers()
    edges = _imports(_modules())
    upward = [
        f"{m} (layer {_layer_of(m, layers)}) imports {t} (layer {_layer_of(t, layers)})"
        for m, targets in sorted(edges.items()) for t in sorted(targets)
        if _layer_of(t, layers) > _layer_of(m, layers)
    ]
    assert not upward, "imports against the layer table:\n" + "\n".join(upward)


def test_no_import_cycles():
    edges = _imports(_modules())
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_imports_inside_functions_and_orders_the_layers():
    edges = _imports(_modules())
    # imported inside a function (numba loads lazily): still an edge
    assert "memgrad._kernels.activation" in edges["memgrad.ops.elementwise"]
    layers = _layers()
    assert _layer_of("memgrad.cli.train", layers) > _layer_of("memgrad.ops.registry", layers)
    assert _layer_of("memgrad.autograd.engine", layers) > _layer_of("memgrad.ops", layers)
    assert _layer_of("memgrad.autograd.graph", layers) < _layer_of("memgrad.ops", layers)
