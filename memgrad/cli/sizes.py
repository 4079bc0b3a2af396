"""Sizes on the command line: ``64MB``, ``1.5GiB``, ``1048576`` (bytes), and ``25%`` (of a
reference such as the plain step's peak) where a percentage makes sense.

Units are case-insensitive: ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000, ``KiB``,
``MiB``, ``GiB``, ``TiB`` powers of 1024, ``B`` is one byte.

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
import re
from dataclasses import dataclass

__all__ = ["Size", "SizeError", "parse_size", "parse_sizes", "format_bytes", "size_at_least"]

UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*|%)\s*$", re.IGNORECASE)
_HELP = "write a number with an optional unit, e.g. 64MB, 1.5GiB or 1048576 (bytes)"


class SizeError(ValueError):
    """A size that cannot be read, or a percentage where none makes sense."""


@dataclass(frozen=True)
class Size:
    """A parsed size: ``amount`` bytes, or ``amount`` percent of a reference when
    ``percent`` is true. ``text`` is what was written."""

    amount: float
    percent: bool
    text: str

    def resolve(self, reference: int | None = None) -> int:
        """The size in bytes; a percentage is taken of ``reference`` (rounded down).

        Example:
            >>> parse_size("1.5KiB").resolve()
            1536
        """
        if not self.percent:
            return int(self.amount)
        if reference is None:
            raise SizeError(f"the size {self.text!r} is a percentage, but there is nothing "
                            f"to take it of here; {_HELP}")
        return int(reference * self.amount / 100)

    def __str__(self) -> str:
        return self.text


def parse_size(text: str, percent_of: str | None = None) -> Size:
    """Read a size such as ``64MB``, ``1.5GiB``, ``1048576`` or, when ``percent_of`` names
    what a percentage refers to, ``25%``.

    Args:
        text: the size as written.
        percent_of: what a percentage is of (used in messages); ``None`` rejects percentages.

    Returns:
        A ``Size``; call ``.resolve(reference)`` for bytes.

    Raises:
        SizeError: a one-line message that says what went wrong and how to write it.

    Example:
        >>> parse_size("2 mib").resolve()
        2097152
        >>> parse_size("50%", percent_of="the plain peak").percent
        True
    """
    examples = _HELP + (f", or a percentage of {percent_of} such as 25%" if percent_of else "")
    m = _SIZE.match(text)
    if m is None:
        raise SizeError(f"cannot read the size {text!r}: {examples}")
    number, unit = float(m.group(1)), m.group(2).lower()
    if unit == "%":
        if percent_of is None:
            raise SizeError(f"a percentage ({text!r}) makes no sense here: {_HELP}")
        if number <= 0:
            raise SizeError(f"the size {text!r} must be above 0%, e.g. 25%")
        return Size(number, True, text.strip())
    if unit not in UNITS:
        raise SizeError(f"unknown unit {m.group(2)!r} in {text!r}: {examples}")
    amount = number * UNITS[unit]
    if amount < 1 or not math.isfinite(amount):
        raise SizeError(f"the size {text!r} must be at least 1 byte: {examples}")
    return Size(float(math.floor(amount)), False, text.strip())


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
