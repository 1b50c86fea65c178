"""Building blocks of llama.cpp's GBNF grammar text: literals, character classes, repetition,
integer ranges and prefix-factored alternations of literals.

llama.cpp's grammar parser has limits that shape what is written here: a repetition count above
2000 is silently taken as unbounded, a repeated group multiplies its inner rules by the count
(refused past 2000), and a flat alternation of thousands of literals is evaluated stack by stack
for every candidate token. So repetitions only ever apply to a single literal, class or rule name,
large counts are split into nested rules, and literal alternations are factored by shared prefix.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from typing import Protocol

MAX_INT_DIGITS = 16  # matches the integer part of json_grammar's number/integer rules
MAX_DIRECT_REPEAT = 1000  # below llama.cpp's 2000 threshold, with room for its own accounting
TRIE_NESTING = 24  # parenthesis depth of a factored alternation before it continues in a named rule
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CLASS_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%&'()*+,./:;<=>?@_`{|}~")


class Rules(Protocol):
    """Where helpers that need named rules put them (the schema converter)."""

    def reserve(self, hint: str) -> str:
        """A fresh rule name, defined later with `define`."""

    def define(self, name: str, body: str) -> None:
        """Set the body of a reserved rule."""

    def named(self, hint: str, body: str) -> str:
        """A rule name for `body` (an existing rule with the same body is reused)."""

    def check(self, pending: int = 0) -> None:
        """Raise (a ValueError) if time is up or ``pending`` more bytes of grammar would not fit."""


_QUOTE_TABLE = {**{c: f"\\x{c:02X}" for c in (*range(0x20), 0x7F)}, **{ord(k): v for k, v in _ESCAPES.items()}}


def quote(text: str) -> str:
    """GBNF string literal for ``text``."""
    return '"' + text.translate(_QUOTE_TABLE) + '"'


def _class_char(cp: int) -> str:
    c = chr(cp)
    if c in _CLASS_PLAIN:
        return c
    if cp < 0x100:
        return f"\\x{cp:02X}"
    return f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def char_class(ranges: list[tuple[int, int]]) -> str:
    """GBNF character class matching the code points of ``ranges`` (inclusive pairs)."""
    parts = [_class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


def group(alts: list[str]) -> str:
    """Alternatives (each a sequence) as one sequence element."""
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def repeat(atom: str, lo: int, hi: int | None, rules: Rules) -> str:
    """``atom`` (a literal, class or rule name) repeated lo..hi times (hi None = unbounded); '' for zero times.

    Counts above MAX_DIRECT_REPEAT become a chain of rules that llama.cpp parses unambiguously.
    """
    if hi == 0:
        return ""
    if max(lo, hi or 0) > MAX_DIRECT_REPEAT:     # llama.cpp will hold that many copies
        rules.check(max(lo, hi or 0) * len(atom))
    if lo > MAX_DIRECT_REPEAT:
        head = " ".join([f"{atom}{{{MAX_DIRECT_REPEAT}}}"] * (lo // MAX_DIRECT_REPEAT))
        tail = repeat(atom, lo % MAX_DIRECT_REPEAT, None if hi is None else hi - lo + lo % MAX_DIRECT_REPEAT, rules)
        return f"{head} {tail}".strip()
    if hi is not None and hi > MAX_DIRECT_REPEAT:
        return f"{repeat(atom, lo, lo, rules)} {_optional_chain(atom, hi - lo, rules)}".strip()
    if hi is None:
        return {0: f"{atom}*", 1: f"{atom}+"}.get(lo, f"{atom}{{{lo},}}")
    if lo == hi:
        return atom if lo == 1 else f"{atom}{{{lo}}}"
    return f"{atom}?" if (lo, hi) == (0, 1) else f"{atom}{{{lo},{hi}}}"


def _optional_chain(atom: str, n: int, rules: Rules) -> str:
    """Up to ``n`` copies of ``atom``: blocks of MAX_DIRECT_REPEAT, the next one only once the last is full."""
    block = MAX_DIRECT_REPEAT
    name = rules.named(f"{atom}-upto-{n % block}", repeat(atom, 0, n % block, rules)) if n % block else ""
    for _ in range(n // block):
        short = f"{atom}{{0,{block - 1}}}"
        name = rules.named(f"{atom}-upto", f"{short} | {atom}{{{block}}} {name}".rstrip())
    return name


def literal_alternation(texts: list[str], rules: Rules, hint: str) -> str:
    """Sequence element matching exactly one of ``texts``, factored by shared prefixes (a radix trie).

    Each literal is read once per branching point on its path, so a 90,000-value enum converts in
    well under a second; llama.cpp then tracks a few stacks per character instead of one per value.
    """
    strings = sorted(set(texts))
    if not strings:
        raise ValueError("no alternatives")
    pending: list[tuple[str, int, int, int]] = []
    written = [0]

    def node(lo: int, hi: int, off: int, depth: int) -> str:
        alts, optional, i = [], False, lo
        if len(strings[i]) == off:           # sorted: the string that ends here comes first
            optional, i = True, i + 1
        while i < hi:
            first = strings[i]
            j = bisect_right(strings, first[: off + 1] + "\U0010ffff", i, hi)
            end = len(first) if j - i == 1 else _common_end(first, strings[j - 1], off + 1)
            piece = quote(first[off:end])
            written[0] += len(piece) + 4
            if written[0] > 65536:
                rules.check(written[0])
            if j - i == 1 and end == len(first):
                alts.append(piece)
            elif depth >= TRIE_NESTING:
                name = rules.reserve(hint)
                pending.append((name, i, j, end))
                alts.append(f"{piece} {name}")
            else:
                alts.append(f"{piece} {node(i, j, end, depth + 1)}")
            i = j
        body = " | ".join(alts)
        if optional:
            return f"({body})?"
        return body if len(alts) == 1 and depth else f"({body})"

    top = node(0, len(strings), 0, 1)
    while pending:
        name, lo, hi, off = pending.pop()
        rules.define(name, node(lo, hi, off, 1))
    return top


def _common_end(a: str, b: str, start: int) -> int:
    """Where the common prefix of ``a`` and ``b`` ends (they agree before ``start``)."""
    n = min(len(a), len(b))
    while start < n and a[start] == b[start]:
        start += 1
    return start


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
        alts.append(f"{digit} {_digits(rest, rest)}")
    return alts + tail


def _digits(lo: int, hi: int) -> str:
    """lo..hi decimal digits (small counts only: no rules needed)."""
    if hi == 0:
        return ""
    if lo == hi:
        return "[0-9]" if lo == 1 else f"[0-9]{{{lo}}}"
    return "[0-9]?" if (lo, hi) == (0, 1) else f"[0-9]{{{lo},{hi}}}"


def _uint_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives matching non-negative integers in [lo, hi] without leading zeros (hi None = unbounded)."""
    alts = []
    lo_len = len(str(lo))
    max_len = max(MAX_INT_DIGITS, lo_len)
    for length in range(lo_len, (len(str(hi)) if hi is not None else max_len) + 1):
        if hi is None and length > lo_len:
            alts.append(f"[1-9] {_digits(length - 1, max_len - 1)}".strip())
            break
        start = max(lo, 10 ** (length - 1) if length > 1 else 0)
        end = 10**length - 1 if hi is None else min(hi, 10**length - 1)
        alts.extend(_digits_range(str(start), str(end)))
    return alts


def int_range(lo: int | None, hi: int | None) -> str:
    """Sequence element for integers in [lo, hi]; None means unbounded on that side."""
    alts = []
    if lo is None or lo < 0:
        smallest = 1 if hi is None or hi >= 0 else -hi
        alts.append(f'"-" {group(_uint_range(smallest, None if lo is None else -lo))}')
    if hi is None or hi >= 0:
        alts.extend(_uint_range(0 if lo is None else max(lo, 0), hi))
    return group(alts)


def uint_range(lo: int, hi: int | None) -> str:
    """Sequence element for non-negative integers in [lo, hi] (hi None = unbounded)."""
    return group(_uint_range(lo, hi))
