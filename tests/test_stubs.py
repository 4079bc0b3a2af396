"""The checked-in type stubs are what tools/stubs.py makes from the op table now: a method
or public function added without regenerating them fails here."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import stubs  # noqa: E402


def test_stubs_are_up_to_date():
    for path, text in stubs.stubs().items():
        assert path.exists(), f"{path} is missing; run python tools/stubs.py"
        assert path.read_text() == text, f"{path} is stale; run python tools/stubs.py"


def test_the_tensor_stub_lists_every_bound_method_and_public_function():
    import memgrad as mg
    from memgrad.ops.registry import METHODS, PUBLIC

    tensor = (ROOT / "memgrad" / "tensor.pyi").read_text()
    for name in list(METHODS) + ["backward", "__mul__", "__getitem__", "add_", "float", "T"]:
        assert f"def {name}(" in tensor, name
    ops = (ROOT / "memgrad" / "ops" / "__init__.pyi").read_text()
    for name in PUBLIC:
        assert f" {name}" in ops and name in mg.__all__, name
    assert (ROOT / "memgrad" / "py.typed").exists()
