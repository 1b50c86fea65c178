"""llamaserve.config.parse value parsers: sizes (memory_budget, max_body_bytes) and durations (idle_unload)."""

from __future__ import annotations

import math

import pytest

from llamaserve.config.parse import parse_duration, parse_size


@pytest.mark.parametrize("text, expected", [
    (1024, 1024), ("1024", 1024), ("500MB", 500_000_000), ("12GiB", 12 * 2**30), ("2G", 2 * 2**30),
    ("64 kb", 64_000), ("1.5KiB", 1536), ("1TB", 10**12), ("3m", 3 * 2**20), ("7 B", 7), (0, 0),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1", "12XB", "", "GB", -5, True, 1.5, None])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize("value, expected", [
    (300, 300.0), (0.5, 0.5), ("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0),
    ("never", math.inf),
])
def test_parse_duration(value, expected):
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", ["5d", "-1", -1, "", True])
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(value)
