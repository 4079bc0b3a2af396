"""docs/checkpointing.md's table of op handles is what tools/op_handles.py makes from the op
table: one row per primitive, naming the object a selective-checkpoint policy receives."""

import sys
from pathlib import Path

import memgrad as mg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import op_handles  # noqa: E402


def test_the_handle_table_is_current():
    text = op_handles.PAGE.read_text()
    assert op_handles.render(text) == text, "run python tools/op_handles.py"


def test_every_primitive_has_a_row_naming_its_handle():
    text = op_handles.PAGE.read_text()
    for name in mg.ops.REGISTRY:
        assert f"| `mg.ops.{name}`" in text
        assert getattr(mg.ops, name) is mg.ops.HANDLES[name]
