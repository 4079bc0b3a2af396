"""The ``memgrad`` command line. The entry point is ``memgrad.cli.__main__:main``; run it as
``memgrad`` or ``python -m memgrad``."""

__all__: list[str] = []
