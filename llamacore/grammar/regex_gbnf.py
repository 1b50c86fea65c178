"""GBNF for regular-expression nodes (json_regex) inside a JSON string: characters are written as
JSON text (raw where JSON allows it, escaped otherwise), and lengths can be fitted to
minLength/maxLength when one repetition carries all the variable length.
"""

from __future__ import annotations

import re

from llamacore.grammar.gbnf import Rules, char_class, quote, repeat
from llamacore.grammar.regex import (
    MAX_CP,
    Alt,
    Chars,
    Node,
    Ranges,
    Rep,
    Seq,
    chars,
    complement,
    lengths,
    norm,
    parse,
    rep,
)

_ATOM = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[a-zA-Z0-9-]+')
_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_RAW = complement(norm([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F), (0xD800, 0xDFFF)]), MAX_CP)


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def json_text(cp: int) -> str:
    """How the code point ``cp`` is written inside a JSON string."""
    return _SHORT.get(cp) or (f"\\u{cp:04x}" if cp < 0x20 or cp == 0x7F else chr(cp))


def _hex_digits(values: list[int]) -> str:
    digits = "".join(f"{v:x}" + (f"{v:X}" if v > 9 else "") for v in values)
    return char_class(list(chars(digits)))


def _chars_alternatives(ranges: Ranges) -> list[str]:
    """A JSON string character in ``ranges``: raw where JSON allows it, else escaped."""
    raw = _intersect(ranges, _RAW)
    alts = [char_class(list(raw))] if raw else []
    specials = [cp for a, b in _intersect(ranges, ((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)))
                for cp in range(a, b + 1)]
    alts += [quote(_SHORT[cp]) for cp in specials if cp in _SHORT]
    for high in (0x00, 0x10, 0x70):          # the rest as \u00XX
        lows = [cp - high for cp in specials if cp not in _SHORT and high <= cp < high + 16]
        if lows:
            alts.append(f"{quote(f'{chr(92)}u00{high >> 4:x}')} {_hex_digits(lows)}")
    return alts


class Emitter:
    """Writes nodes as GBNF; repeated non-atoms become named rules (see gbnf.repeat)."""

    def __init__(self, rules: Rules, hint: str) -> None:
        self.rules, self.hint = rules, hint

    def emit(self, node: Node) -> str:
        if isinstance(node, Chars):
            if not node.ranges:
                raise ValueError("a character class in the pattern matches no character")
            if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
                return quote(json_text(node.ranges[0][0]))
            alts = _chars_alternatives(node.ranges)
            return alts[0] if len(alts) == 1 else self.rules.named(f"{self.hint}-char", " | ".join(alts))
        if isinstance(node, Alt):
            return "(" + " | ".join(self.emit(o) for o in node.options) + ")"
        if isinstance(node, Rep):
            body = self.emit(node.item)
            atom = body if _ATOM.fullmatch(body) else self.rules.named(self.hint, body)
            return repeat(atom, node.lo, node.hi, self.rules)
        parts, literal = [], ""
        for item in node.items:
            if isinstance(item, Chars) and len(item.ranges) == 1 and item.ranges[0][0] == item.ranges[0][1]:
                literal += json_text(item.ranges[0][0])
                continue
            if literal:
                parts.append(quote(literal))
                literal = ""
            text = self.emit(item)
            if text:
                parts.append(text)
        if literal:
            parts.append(quote(literal))
        return " ".join(parts)


def fit_length(node: Node, lo: int, hi: int | None, what: str) -> Node:
    """``node`` restricted to strings of lo..hi characters.

    Exact when the bounds are already implied, or when one repetition of a fixed-width item is the
    only part of variable length (``[a-z]+``, ``\\d{3}-\\d+``); otherwise ValueError naming ``what``.
    """
    nmin, nmax = lengths(node)
    if nmin >= lo and (hi is None or (nmax is not None and nmax <= hi)):
        return node
    if isinstance(node, Alt):
        fitted = []
        for option in node.options:
            try:
                fitted.append(fit_length(option, lo, hi, what))
            except _Empty:
                continue
        if not fitted:
            raise _Empty(f"no string matches {what} within the length bounds")
        return fitted[0] if len(fitted) == 1 else Alt(tuple(fitted))
    items: list[Node] = list(node.items) if isinstance(node, Seq) else [node]
    variable = [k for k, item in enumerate(items) if lengths(item)[0] != lengths(item)[1]]
    if len(variable) == 1 and isinstance(items[variable[0]], Rep):
        k = variable[0]
        item = items[k]
        assert isinstance(item, Rep)
        width, width_max = lengths(item.item)
        if width == width_max and width:
            fixed = sum(lengths(x)[0] for j, x in enumerate(items) if j != k)
            new_lo = max(item.lo, -(-(lo - fixed) // width))
            new_hi = (hi - fixed) // width if hi is not None else None
            if item.hi is not None:
                new_hi = item.hi if new_hi is None else min(item.hi, new_hi)
            if new_hi is not None and new_hi < new_lo:
                raise _Empty(f"no string matches {what} within the length bounds")
            items[k] = rep(item.item, new_lo, new_hi)
            return items[0] if len(items) == 1 else Seq(tuple(items))
    if hi is not None and nmin > hi or nmax is not None and nmax < lo:
        raise _Empty(f"no string matches {what} within the length bounds")
    raise ValueError(f"{what} together with minLength/maxLength is supported only when the lengths "
                     "follow from one repeated part of the pattern")


class _Empty(ValueError):
    """The length bounds leave no string."""


def pattern_content(pattern: str, rules: Rules, hint: str, any_char: str,
                    lo: int = 0, hi: int | None = None) -> str:
    """GBNF for the characters between a JSON string's quotes that match ``pattern`` (a search, as
    JSON Schema's ``pattern`` is), with lo..hi characters; ``any_char`` is the rule for one JSON char.

    The match is written first: a string that starts with a match contains one, and the model meets
    the pattern at once instead of after an unbounded prefix. An alternative not anchored at its
    end may continue with any characters.
    """
    emitter = Emitter(rules, hint)
    options = []
    for _, end, node in parse(pattern):
        if not end:
            if (lo, hi) != (0, None):
                raise ValueError(f"pattern {pattern!r} does not end with $; together with "
                                 "minLength/maxLength only patterns anchored at the end are supported")
            options.append(f"{emitter.emit(node)} {any_char}*".strip())
            continue
        options.append(emitter.emit(fit_length(node, lo, hi, f"pattern {pattern!r}")))
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"
