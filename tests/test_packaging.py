"""The declared support floor is the one CI tests, and the package metadata agrees with itself."""

import io
import re
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import check_sdist  # noqa: E402

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


def _sdist(path: Path, files: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name in files:
            info = tarfile.TarInfo(f"memgrad-0.1.0/{name}")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    return path


def test_check_sdist_names_missing_files_and_build_debris(tmp_path):
    sdist = _sdist(tmp_path / "memgrad-0.1.0.tar.gz",
                   ["PKG-INFO", "memgrad/a.py", "tests/__pycache__/t.cpython-311.pyc", "k.nbi"])
    assert check_sdist.members(sdist) == {
        "PKG-INFO", "memgrad/a.py", "tests/__pycache__/t.cpython-311.pyc", "k.nbi"}
    tracked = {".gitignore", "memgrad/a.py", "docs/index.md", "tests/test_x.py"}
    assert check_sdist.problems(check_sdist.members(sdist), tracked) == [
        "missing: docs/index.md", "missing: tests/test_x.py",
        "build debris: k.nbi", "build debris: tests/__pycache__/t.cpython-311.pyc",
    ]
    assert check_sdist.problems({"memgrad/a.py", "PKG-INFO"}, {".gitignore", "memgrad/a.py"}) == []


def test_check_sdist_without_a_tarball_says_how_to_build_one(tmp_path, capsys):
    assert check_sdist.main([str(tmp_path / "nothing.tar.gz")]) == 2
    assert "python -m build --sdist" in capsys.readouterr().err


def test_manifest_grafts_what_the_tests_and_docs_need():
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    for folder in ("tests", "docs", "examples", "tools"):
        assert folder in manifest, f"MANIFEST.in should graft {folder}/"
