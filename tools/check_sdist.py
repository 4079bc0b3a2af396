"""Check that a source distribution holds every file of the repository a user needs.

An sdist is what a packager or a user without git gets: it must hold the tests, the docs, the
examples and the tools the tests run, not only the package. This compares the tarball with
``git ls-files``: every tracked file must be in it (but for a few that only git uses), and no
build debris (``__pycache__``, ``*.pyc``, numba's ``*.nbi``/``*.nbc`` caches) may be.

Usage:
    python -m build --sdist -o dist && python tools/check_sdist.py dist/memgrad-*.tar.gz
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONLY_FOR_GIT = {".gitignore"}
DEBRIS = re.compile(r"(^|/)__pycache__/|\.py[cod]$|\.nb[ic]$")


def members(sdist: Path) -> set[str]:
    """The files in ``sdist``, relative to its top folder (``memgrad-X.Y.Z/``)."""
    with tarfile.open(sdist) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() and "/" in m.name}


def problems(in_sdist: set[str], tracked: set[str]) -> list[str]:
    """What is wrong with an sdist holding ``in_sdist``, for a repository tracking ``tracked``."""
    missing = sorted(tracked - ONLY_FOR_GIT - in_sdist)
    debris = sorted(f for f in in_sdist if DEBRIS.search(f))
    return [f"missing: {f}" for f in missing] + [f"build debris: {f}" for f in debris]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path, help="the .tar.gz that python -m build --sdist made")
    args = parser.parse_args(argv)
    if not args.sdist.is_file():
        print(f"check_sdist: no file {args.sdist}; build one with python -m build --sdist",
              file=sys.stderr)
        return 2
    tracked = set(subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, text=True,
                                 capture_output=True).stdout.split("\0")) - {""}
    found = problems(members(args.sdist), tracked)
    for line in found:
        print(f"{args.sdist.name}: {line}", file=sys.stderr)
    if found:
        print("check_sdist: add what is missing to MANIFEST.in (graft/include) or exclude the "
              "debris there", file=sys.stderr)
        return 1
    print(f"check_sdist: {args.sdist.name} holds all {len(tracked - ONLY_FOR_GIT)} tracked files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
