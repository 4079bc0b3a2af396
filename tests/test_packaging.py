"""The declared support floor is the one CI tests, and the package metadata agrees with itself."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _release(version: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


def _minimums(requirements: list[str]) -> dict[str, str]:
    out = {}
    for req in requirements:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", req)
        assert m, f"pyproject.toml: {req!r} should be 'name>=minimum', a floor CI can test"
        out[m[1].lower()] = m[2]
    return out


def _floor_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "floor.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def _requires_python() -> tuple[int, int]:
    m = re.fullmatch(r">=(\d+)\.(\d+)", PROJECT["requires-python"])
    assert m, f"requires-python {PROJECT['requires-python']!r} should be '>=X.Y'"
    return int(m[1]), int(m[2])


def test_floor_pins_are_exactly_the_declared_minimums():
    declared = _minimums(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["test"])
    pins = _floor_pins()
    assert sorted(pins) == sorted(declared)
    for name, minimum in declared.items():
        assert _release(pins[name]) == _release(minimum), (
            f".ci/floor.txt pins {name}=={pins[name]}, pyproject.toml declares {name}>={minimum}"
        )


def test_python_floor_agrees_with_ruff_target_and_classifiers():
    major, minor = _requires_python()
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["target-version"] == f"py{major}{minor}"
    listed = sorted(
        int(c.rsplit(".", 1)[1]) for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert listed and listed[0] == minor, (listed, PROJECT["requires-python"])
    assert listed == list(range(listed[0], listed[-1] + 1)), "a Python version is skipped"


def test_license_file_matches_the_declared_license():
    text = (ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == "MIT"
    assert text.startswith("MIT License") and "Permission is hereby granted" in text
    assert "License :: OSI Approved :: MIT License" not in PROJECT["classifiers"]  # PEP 639
