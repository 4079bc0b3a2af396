"""``python -m memgrad``: the same as the ``memgrad`` command."""

from memgrad.cli.__main__ import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
