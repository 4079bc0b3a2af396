"""docs/design.md agrees with the code: the core's size table is current (made by
tools/design_tables.py) and the core stays within its stated budget."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import design_tables  # noqa: E402


def test_the_core_table_is_current():
    text = design_tables.DESIGN.read_text()
    assert design_tables.render(text) == text, "run python tools/design_tables.py"


def test_the_core_fits_its_budget():
    total = sum(design_tables.lines(p) for p in design_tables.core_files())
    text = design_tables.DESIGN.read_text()
    stated = int(re.search(r"budget: \*\*([\d,]+) lines\*\*", text).group(1).replace(",", ""))
    assert stated == design_tables.BUDGET
    assert total <= stated, f"the core has {total} lines, over its budget of {stated}"


def test_every_note_cited_in_design_exists_in_the_code():
    text = design_tables.DESIGN.read_text()
    code = "\n".join(p.read_text() for p in (ROOT / "memgrad").rglob("*.py"))
    for name in set(re.findall(r"NOTE \[ ([^\]]+) \]", text)):
        assert f"NOTE [ {name} ]" in code, name
