"""Building blocks of llama.cpp's GBNF grammar text: literals, groups, repetition, integer ranges."""

from __future__ import annotations

import os
import re

MAX_INT_DIGITS = 16  # matches the integer part of json_grammar's number/integer rules
_ATOM = re.compile(r'([a-zA-Z0-9-]+|"([^"\\]|\\.)*"|\[([^\]\\]|\\.)*\])')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """GBNF string literal for ``text``."""
    escaped = (
        _ESCAPES.get(c) or (f"\\x{ord(c):02X}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in text
    )
    return '"' + "".join(escaped) + '"'


def group(alts: list[str]) -> str:
    """Alternatives (each a sequence) as one sequence element."""
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def repeat(expr: str, lo: int, hi: int | None) -> str:
    """``expr`` repeated lo..hi times (hi None = unbounded); '' when it can only occur zero times."""
    if hi == 0:
        return ""
    atom = expr if _ATOM.fullmatch(expr) else f"({expr})"
    if hi is None:
        return {0: f"{atom}*", 1: f"{atom}+"}.get(lo, f"{atom}{{{lo},}}")
    if lo == hi:
        return atom if lo == 1 else f"{atom}{{{lo}}}"
    return f"{atom}?" if (lo, hi) == (0, 1) else f"{atom}{{{lo},{hi}}}"


def _digits_range(a: str, b: str) -> list[str]:
    """Alternatives matching equal-length digit strings from ``a`` to ``b`` inclusive."""
    prefix = os.path.commonprefix([a, b])
    if prefix == a:
        return [quote(a)]
    if prefix:
        return [f"{quote(prefix)} {group(_digits_range(a[len(prefix):], b[len(prefix):]))}"]
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    rest = len(a) - 1
    alts, tail = [], []
    first, last = int(a[0]), int(b[0])
    if a[1:] != "0" * rest:
        alts.append(f"{quote(a[0])} {group(_digits_range(a[1:], '9' * rest))}")
        first += 1
    if b[1:] != "9" * rest:
        tail.append(f"{quote(b[0])} {group(_digits_range('0' * rest, b[1:]))}")
        last -= 1
    if first <= last:
        digit = f"[{first}]" if first == last else f"[{first}-{last}]"
        alts.append(f"{digit} {repeat('[0-9]', rest, rest)}")
    return alts + tail


def _uint_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives matching non-negative integers in [lo, hi] without leading zeros (hi None = unbounded)."""
    alts = []
    lo_len = len(str(lo))
    max_len = max(MAX_INT_DIGITS, lo_len)
    for length in range(lo_len, (len(str(hi)) if hi is not None else max_len) + 1):
        if hi is None and length > lo_len:
            alts.append(f"[1-9] {repeat('[0-9]', length - 1, max_len - 1)}")
            break
        start = max(lo, 10 ** (length - 1) if length > 1 else 0)
        end = 10**length - 1 if hi is None else min(hi, 10**length - 1)
        alts.extend(_digits_range(str(start), str(end)))
    return alts


def int_range(lo: int | None, hi: int | None) -> str:
    """Sequence element (without trailing ws) for integers in [lo, hi]; None means unbounded on that side."""
    alts = []
    if lo is None or lo < 0:
        smallest = 1 if hi is None or hi >= 0 else -hi
        alts.append(f'"-" {group(_uint_range(smallest, None if lo is None else -lo))}')
    if hi is None or hi >= 0:
        alts.extend(_uint_range(0 if lo is None else max(lo, 0), hi))
    return group(alts)
