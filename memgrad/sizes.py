"""Sizes as people write them: ``64MB``, ``1.5GiB``, ``1048576`` (bytes), and ``25%`` (of a
reference such as the plain step's peak) where a percentage makes sense; and the memory of
this machine, the most that any one allocation can hope to get.

Units are case-insensitive: ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000, ``KiB``,
``MiB``, ``GiB``, ``TiB`` powers of 1024, ``B`` is one byte.

This module imports nothing from memgrad, so that every layer can read sizes: the planner's
``budget_bytes`` and the command line's ``--budget`` take the same text.

Example:
    >>> parse_size("64MB").resolve()
    64000000
    >>> parse_size("25%", percent_of="the plain peak").resolve(reference=1000)
    250
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

__all__ = ["UNITS", "Size", "SizeError", "parse_size", "physical_memory"]

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


def physical_memory() -> int | None:
    """The bytes of physical memory of this machine, or ``None`` where the operating system
    does not say (``os.sysconf`` has no ``SC_PHYS_PAGES``). No one allocation larger than
    this can be filled.

    Example:
        >>> physical_memory() is None or physical_memory() > 0
        True
    """
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return pages * page_size
