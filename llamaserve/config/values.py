"""Checkers of single config values: integers, numbers, booleans, choices, sizes, durations.

Each checker returns the clean value or raises Invalid with a message that names the expected
type and the bad value; config.py adds the file and key path, so every message reads the same.
config_keys.py puts them to each key.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from typing import Any

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(?:([kmgtp])(i)?)?(b)?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|m|h)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {None: 1, "s": 1, "m": 60, "h": 3600}


def parse_size(text: int | str) -> int:
    """Bytes from an int or "500MB" / "12GiB" / "2G".

    KB, MB, GB, TB are powers of 1000; KiB, MiB, ... and the bare K, M, G, T (as in Docker) of 1024.
    """
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    match = _SIZE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"invalid size {text!r} (use bytes or a number with a unit: 500MB, 12GiB, 2G)")
    number, prefix, binary, byte = match.groups()
    exponent = "kmgtp".index(prefix.lower()) + 1 if prefix else 0
    base = 1000 if prefix and byte and not binary else 1024
    size = float(number) * base**exponent
    if not math.isfinite(size):
        raise ValueError(f"size {str(text)[:40]!r} is too large")
    return round(size)


def parse_duration(value: float | str) -> float:
    """Seconds from a number or "90s" / "5m" / "1.5h"; "never" is infinity."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str) and value.strip().lower() == "never":
        return math.inf
    match = _DURATION.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"invalid duration {value!r} (use seconds, or a number with s, m or h, or 'never')")
    return float(match[1]) * _DURATION_UNITS[match[2] and match[2].lower()]


class Invalid(Exception):
    """A value's problem; the caller prefixes the file and key path."""


class EnvStr(str):
    """A string produced by ${VAR} interpolation: numeric and boolean keys may parse it."""


Check = Callable[[Any], Any]
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def integer(lo: int | None = None, hi: int | None = None) -> Check:
    def check(v: Any) -> int:
        if isinstance(v, EnvStr) and re.fullmatch(r"\s*-?\d+\s*", v):
            try:
                v = int(v)
            except ValueError:      # more digits than int() accepts
                raise Invalid(f"expected an integer, got {v[:40]!r}...") from None
        if not isinstance(v, int) or isinstance(v, bool):
            raise Invalid(f"expected an integer, got {v!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise Invalid(f"must be {bound}, got {v}")
        return v
    return check


def number(lo: float = 0.0) -> Check:
    def check(v: Any) -> float:
        if isinstance(v, EnvStr):
            try:
                v = float(v)
            except ValueError:
                pass
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise Invalid(f"expected a number, got {v!r}")
        try:
            v = float(v)
        except OverflowError:       # an integer with hundreds of digits
            raise Invalid("number is too large") from None
        if math.isnan(v):
            raise Invalid("expected a number, got nan")
        if v < lo:
            raise Invalid(f"must be at least {lo}, got {v}")
        return v
    return check


def boolean(v: Any) -> bool:
    if isinstance(v, EnvStr) and v.strip().lower() in _TRUE + _FALSE:
        return v.strip().lower() in _TRUE
    if not isinstance(v, bool):
        raise Invalid(f"expected true or false, got {v!r}")
    return v


def string(v: Any) -> str:
    """A non-empty string (also used for paths before they are resolved)."""
    if not isinstance(v, str) or not v:
        raise Invalid(f"expected a non-empty string, got {v!r}")
    return str(v)


def choice(options: tuple[str, ...]) -> Check:
    def check(v: Any) -> str:
        if v not in options:
            raise Invalid(f"expected one of {', '.join(options)}, got {v!r}{suggest(v, options)}")
        return str(v)
    return check


def optional(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def list_of(check: Check, what: str) -> Check:
    def list_check(v: Any) -> list:
        if not isinstance(v, list):
            raise Invalid(f"expected a list of {what}, got {v!r}")
        return [check(item) for item in v]
    return list_check


def via(parse: Callable[[Any], Any], positive: bool = False) -> Check:
    def check(v: Any) -> Any:
        try:
            result = parse(v)
        except (ValueError, TypeError, OverflowError) as e:
            raise Invalid(str(e)) from None
        if positive and not result > 0:
            raise Invalid(f"must be greater than zero, got {v!r}")
        return result
    return check


def at_most(check: Check, hi: float) -> Check:
    def bounded(v: Any) -> Any:
        value = check(v)
        if value > hi:
            raise Invalid(f"must be at most {hi:g}, got {value}")
        return value
    return bounded


def suggest(word: Any, options: Any) -> str:
    """A " (did you mean 'x'?)" hint for a misspelt key or value, or ""."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
