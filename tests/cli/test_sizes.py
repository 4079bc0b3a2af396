"""Sizes on the command line: units, percentages, errors, and formatting."""

from __future__ import annotations

import pytest

from memgrad.cli.sizes import SizeError, format_bytes, parse_size, parse_sizes, size_at_least


@pytest.mark.parametrize("text, expected", [
    ("1048576", 1048576),
    ("64MB", 64_000_000),
    ("64mb", 64_000_000),
    ("64 MB", 64_000_000),
    ("1.5GiB", 1_610_612_736),
    ("1.5gib", 1_610_612_736),
    ("2MiB", 2 * 2**20),
    ("10kB", 10_000),
    ("10KiB", 10_240),
    ("3B", 3),
    (".5KB", 500),
    ("1TB", 10**12),
    ("1.0000001B", 1),
])
def test_absolute_sizes(text: str, expected: int):
    size = parse_size(text)
    assert not size.percent
    assert size.resolve() == expected
    assert size.resolve(reference=123) == expected  # a reference changes nothing


@pytest.mark.parametrize("text, reference, expected", [
    ("25%", 1000, 250),
    ("50 %", 999, 499),
    ("150%", 100, 150),
    ("12.5%", 800, 100),
])
def test_percentages(text: str, reference: int, expected: int):
    size = parse_size(text, percent_of="the plain peak")
    assert size.percent
    assert size.resolve(reference) == expected


@pytest.mark.parametrize("text, message", [
    ("", "cannot read the size"),
    ("abc", "cannot read the size"),
    ("-5MB", "cannot read the size"),
    ("1e6", "cannot read the size"),
    ("1.2.3", "cannot read the size"),
    ("64XB", "unknown unit 'XB'"),
    ("64 megabytes", "unknown unit"),
    ("0", "at least 1 byte"),
    ("0.5B", "at least 1 byte"),
    ("0%", "above 0%"),
])
def test_bad_sizes(text: str, message: str):
    with pytest.raises(SizeError, match=message) as e:
        parse_size(text, percent_of="the plain peak")
    assert "\n" not in str(e.value)
    assert "64MB" in str(e.value) or "above 0%" in str(e.value)  # the fix is shown


def test_percentage_where_none_makes_sense():
    with pytest.raises(SizeError, match="makes no sense here"):
        parse_size("25%")
    with pytest.raises(SizeError, match="nothing to take it of"):
        parse_size("25%", percent_of="x").resolve()


def test_lists():
    sizes = parse_sizes("25%, 64MB,1GiB", percent_of="the plain peak")
    assert [s.resolve(1000) for s in sizes] == [250, 64_000_000, 2**30]
    assert [str(s) for s in sizes] == ["25%", "64MB", "1GiB"]
    with pytest.raises(SizeError, match="no sizes"):
        parse_sizes(" , ")


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (999, "999 B"), (1000, "1.00 kB"), (12_345, "12.3 kB"), (999_499, "999 kB"),
    (999_500, "1.00 MB"), (2_500_000, "2.50 MB"), (1.5e9, "1.50 GB"), (-2_000_000, "-2.00 MB"),
])
def test_format_bytes(n: float, text: str):
    assert format_bytes(n) == text


@pytest.mark.parametrize("n", [1, 999, 1000, 1001, 9_999, 99_951, 6_568_960, 123_456_789, 10**13])
def test_size_at_least_reads_back_at_least_n(n: int):
    text = size_at_least(n)
    value = parse_size(text).resolve()
    assert n <= value <= n * 1.01 + 1
