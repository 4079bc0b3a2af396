"""Sizes on the command line: ``64MB``, ``1.5GiB``, ``1048576`` (bytes), and ``25%`` (of a
reference such as the plain step's peak) where a percentage makes sense, read by
``memgrad.sizes.parse_size`` (the planner's ``budget_bytes`` reads the same text); lists of
them, and sizes printed short.

Example:
    >>> parse_size("64MB").resolve()
    64000000
    >>> parse_size("25%", percent_of="the plain peak").resolve(reference=1000)
    250
    >>> format_bytes(2_500_000)
    '2.50 MB'
"""

from __future__ import annotations

import math

from memgrad.sizes import UNITS, Size, SizeError, parse_size

__all__ = ["Size", "SizeError", "parse_size", "parse_sizes", "format_bytes", "size_at_least"]


def parse_sizes(text: str, percent_of: str | None = None) -> list[Size]:
    """A comma-separated list of sizes, e.g. ``25%,50%,64MB``.

    Example:
        >>> [str(s) for s in parse_sizes("25%, 64MB", percent_of="the plain peak")]
        ['25%', '64MB']
    """
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise SizeError(f"no sizes in {text!r}: give a comma-separated list such as 25%,50%,64MB")
    return [parse_size(p, percent_of) for p in parts]


def format_bytes(n: float) -> str:
    """Bytes as a short decimal size (``kB``, ``MB``, ``GB``), with three significant digits.

    Example:
        >>> format_bytes(999), format_bytes(123_456), format_bytes(-2_000_000)
        ('999 B', '123 kB', '-2.00 MB')
    """
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1000:
        return f"{sign}{n:.0f} B"
    units = (("kB", 10**3), ("MB", 10**6), ("GB", 10**9), ("TB", 10**12))
    unit, scale = next(((u, k) for u, k in units if n / k < 999.5), units[-1])
    value = n / scale
    digits = 2 if value < 9.995 else 1 if value < 99.95 else 0
    return f"{sign}{value:.{digits}f} {unit}"


def size_at_least(n: int) -> str:
    """A short size to type that is at least ``n`` bytes: ``n`` rounded up to three
    significant digits in the unit ``format_bytes`` would use.

    Example:
        >>> size_at_least(6_568_960), size_at_least(999), size_at_least(1_000_000)
        ('6.57MB', '999', '1.00MB')
    """
    if n < 1000:
        return str(n)
    text = format_bytes(n)
    value, unit = text.split()
    decimals = len(value.partition(".")[2])
    scale = UNITS[unit.lower()]
    rounded = math.ceil(n / scale * 10**decimals - 1e-9) / 10**decimals
    return f"{rounded:.{decimals}f}{unit}"
