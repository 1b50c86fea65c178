"""JSON Schema ``pattern`` (an ECMA-262 regular expression) parsed into nodes that json_regex_gbnf
writes as GBNF for the content of a JSON string.

The grammar generates a subset of what the pattern matches, chosen so that both ECMA-262 and
Python's ``re`` (which validators such as jsonschema use) agree the output matches: ``\\d``, ``\\w``
and ``\\s`` are their ASCII forms, their negations and negated classes that use them stay within
ASCII, ``.`` never produces a line terminator, and control characters other than the JSON short
escapes are written as ``\\u00XX``. Features a context-free grammar cannot express (backreferences,
lookaround, word boundaries, anchors in the middle) raise ValueError naming the feature.
A pattern is a search, as JSON Schema says: anchors ``^`` and ``$`` are honoured where they stand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llamacore.grammar.limits import UnsupportedSchemaError

MAX_DEPTH = 48         # nested groups
MAX_COUNT = 100_000    # largest {m,n} bound
MAX_CP = 0x10FFFF

Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Chars:
    ranges: Ranges


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    item: Node
    lo: int
    hi: int | None


Node = Chars | Seq | Alt | Rep
EMPTY = Seq(())


def norm(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return tuple(out)


def complement(ranges: Ranges, top: int) -> Ranges:
    out, start = [], 0
    for a, b in ranges:
        if a > start:
            out.append((start, min(a - 1, top)))
        start = b + 1
    if start <= top:
        out.append((start, top))
    return tuple((a, b) for a, b in out if a <= top)


def chars(text: str) -> Ranges:
    return norm([(ord(c), ord(c)) for c in text])


DIGIT = ((0x30, 0x39),)
WORD = norm([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE = chars(" \t\n\v\f\r")
DOT = complement(chars("\n\r\u2028\u2029"), MAX_CP)
_SHORTHANDS = {"d": DIGIT, "w": WORD, "s": SPACE}
_CONTROL_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v", "0": "\0"}
_UNSUPPORTED_ESCAPES = {
    "b": "word boundaries (\\b)", "B": "word boundaries (\\B)", "p": "Unicode property escapes (\\p{...})",
    "P": "Unicode property escapes (\\P{...})", "k": "backreferences (\\k<name>)",
    "c": "control escapes (\\cX)", "A": "\\A", "Z": "\\Z", "z": "\\z", "G": "\\G",
}


class _Parser:
    """Recursive descent over one pattern: alternation > sequence > quantified atom."""

    def __init__(self, pattern: str) -> None:
        self.p, self.i = pattern, 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"pattern {self.p!r}: {what}")

    def unsupported(self, feature: str) -> ValueError:
        return UnsupportedSchemaError(f"pattern {self.p!r}: uses {feature}, which a grammar cannot express")

    def peek(self, k: int = 0) -> str:
        return self.p[self.i + k] if self.i + k < len(self.p) else ""

    def top(self) -> list[tuple[bool, bool, Node]]:
        """(anchored at start, anchored at end, node) for each top-level alternative."""
        out = []
        while True:
            start = self.peek() == "^"
            self.i += start
            node = self.sequence(0)
            end = self.p.endswith("$", 0, self.i) and not self._escaped(self.i - 1)
            out.append((start, end, node))
            if self.i == len(self.p):
                return out
            if self.peek() == ")":
                raise self.error("unbalanced ')'")
            self.i += 1  # '|'

    def _escaped(self, pos: int) -> bool:
        n = 0
        while pos - 1 - n >= 0 and self.p[pos - 1 - n] == "\\":
            n += 1
        return n % 2 == 1

    def alternation(self, depth: int) -> Node:
        options = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence(depth))
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self, depth: int) -> Node:
        items: list[Node] = []
        while self.i < len(self.p) and self.peek() not in "|)":
            c = self.peek()
            if c == "$":
                self.i += 1
                if depth and self.i == len(self.p):
                    raise self.error("unbalanced '('")
                if depth or self.i < len(self.p) and self.peek() != "|":
                    raise self.unsupported("an anchor ('$') inside the pattern")
                continue
            if c == "^":
                raise self.unsupported("an anchor ('^') inside the pattern")
            if c in "*+?" or (c == "{" and self.quantifier_ahead()):
                raise self.error("nothing to repeat")
            atom = self.atom(depth)
            items.append(self.quantified(atom))
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantifier_ahead(self) -> bool:
        return re.match(r"\{\d+(,\d*)?\}", self.p[self.i:]) is not None

    def quantified(self, atom: Node) -> Node:
        c = self.peek()
        if c and c in "*+?":
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and self.quantifier_ahead():
            m = re.match(r"\{(\d+)(?:(,)(\d*))?\}", self.p[self.i:])
            assert m is not None
            self.i += m.end()
            lo = int(m[1])
            hi = lo if not m[2] else (int(m[3]) if m[3] else None)
            if max(lo, hi or 0) > MAX_COUNT:
                raise self.error(f"repetition count above {MAX_COUNT}")
            if hi is not None and hi < lo:
                raise self.error(f"repetition {{{lo},{hi}}} has its bounds in the wrong order")
        else:
            return atom
        if self.peek() == "?":          # lazy: the same strings match
            self.i += 1
        elif self.peek() == "+":
            raise self.unsupported("a possessive quantifier")
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self.quantifier_ahead()):
            raise self.error("multiple repeat")
        return rep(atom, lo, hi)

    def atom(self, depth: int) -> Node:
        c = self.peek()
        self.i += 1
        if c == ".":
            return Chars(DOT)
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.escape(in_class=False)
        if c == "(":
            return self.group(depth)
        return Chars(chars(c))

    def group(self, depth: int) -> Node:
        if depth + 1 > MAX_DEPTH:
            raise self.error(f"groups nested deeper than {MAX_DEPTH}")
        if self.peek() == "?":
            rest = self.p[self.i + 1:]
            if rest.startswith(":"):
                self.i += 2
            elif re.match(r"P?<[A-Za-z_]\w*>", rest):
                self.i = self.p.index(">", self.i) + 1
            elif rest[:1] in ("=", "!") or rest[:2] in ("<=", "<!"):
                raise self.unsupported("lookaround ((?=, (?!, (?<=, (?<!)")
            elif rest.startswith("P="):
                raise self.unsupported("backreferences ((?P=name))")
            else:
                raise self.unsupported("inline flags or other (?...) group syntax")
        node = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.error("unbalanced '('")
        self.i += 1
        return node

    def escape(self, in_class: bool) -> Node:
        c = self.peek()
        if not c:
            raise self.error("trailing backslash")
        self.i += 1
        if c.lower() in _SHORTHANDS:
            base = _SHORTHANDS[c.lower()]
            return Chars(base if c.islower() else complement(base, 0x7F))
        if c == "b" and in_class:
            return Chars(chars("\b"))
        if c.isdigit() and c != "0":
            raise self.unsupported("backreferences (\\1 ...)")
        if c in _UNSUPPORTED_ESCAPES:
            raise self.unsupported(_UNSUPPORTED_ESCAPES[c])
        if c in _CONTROL_ESCAPES:
            if c == "0" and self.peek().isdigit():
                raise self.unsupported("octal escapes")
            return Chars(chars(_CONTROL_ESCAPES[c]))
        if c in "xu":
            m = re.match("[0-9a-fA-F]{2}" if c == "x" else "[0-9a-fA-F]{4}", self.p[self.i:])
            if not m:
                raise self.error(f"malformed \\{c} escape")
            self.i += m.end()
            cp = int(m[0], 16)
            if 0xD800 <= cp <= 0xDFFF:
                raise self.unsupported(f"the code point U+{cp:04X}")
            return Chars(((cp, cp),))
        if c.isalnum():
            raise self.error(f"unknown escape \\{c}")
        return Chars(chars(c))

    def char_class(self) -> Node:
        negate = self.peek() == "^"
        self.i += negate
        ranges: list[tuple[int, int]] = []
        ascii_only = False
        first = True
        while True:
            c = self.peek()
            if not c:
                raise self.error("unterminated character class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self.class_atom()
            if len(lo) != 1 or lo[0][0] != lo[0][1]:          # a shorthand such as \d
                ranges.extend(lo)
                ascii_only = True
                continue
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if len(hi) != 1 or hi[0][0] != hi[0][1]:
                    raise self.error("a range ends in a shorthand class")
                if hi[0][0] < lo[0][0]:
                    raise self.error("character range out of order")
                ranges.append((lo[0][0], hi[0][0]))
            else:
                ranges.extend(lo)
        found = norm(ranges)
        if negate:
            found = complement(found, 0x7F if ascii_only else MAX_CP)
        return Chars(found)

    def class_atom(self) -> Ranges:
        c = self.peek()
        self.i += 1
        if c == "\\":
            node = self.escape(in_class=True)
            assert isinstance(node, Chars)
            return node.ranges
        return chars(c)


def rep(item: Node, lo: int, hi: int | None) -> Node:
    """``item`` repeated lo..hi times, normalized so that no nullable item repeats (llama.cpp would
    see left recursion in ``(x?)*``): a nullable item repeats as its non-empty part, from zero."""
    if lengths(item)[0] == 0:
        item_ne = non_empty(item)
        if item_ne is None:
            return EMPTY
        item, lo = item_ne, 0
    if hi == 0:
        return EMPTY
    return item if (lo, hi) == (1, 1) else Rep(item, lo, hi)


def lengths(node: Node) -> tuple[int, int | None]:
    """Fewest and most characters ``node`` matches (None: unbounded)."""
    if isinstance(node, Chars):
        return 1, 1
    if isinstance(node, Rep):
        lo, hi = lengths(node.item)
        return lo * node.lo, None if hi is None or node.hi is None else hi * node.hi
    parts = [lengths(n) for n in (node.items if isinstance(node, Seq) else node.options)]
    if isinstance(node, Seq):
        highs = [h for _, h in parts]
        return sum(lo for lo, _ in parts), None if None in highs else sum(h for h in highs if h is not None)
    highs = [h for _, h in parts]
    return min(lo for lo, _ in parts), None if None in highs else max(h for h in highs if h is not None)


def non_empty(node: Node) -> Node | None:
    """``node`` without the empty string (None if that leaves nothing)."""
    if lengths(node)[0] > 0:
        return node
    if isinstance(node, Alt):
        options = tuple(o for o in map(non_empty, node.options) if o is not None)
        return None if not options else options[0] if len(options) == 1 else Alt(options)
    if isinstance(node, Rep):        # items are never nullable (see rep)
        return Rep(node.item, 1, node.hi) if node.hi != 1 else node.item
    assert isinstance(node, Seq)
    result: Node | None = None       # AB minus "" = (A minus "") B | (B minus "") when A is nullable
    for k in range(len(node.items) - 1, -1, -1):
        head = non_empty(node.items[k])
        if head is not None:
            branch = Seq((head, *node.items[k + 1:]))
            result = branch if result is None else Alt((branch, result))
    return result


def parse(pattern: str) -> list[tuple[bool, bool, Node]]:
    """Top-level alternatives of ``pattern`` with their anchors; ValueError if invalid or unsupported."""
    return _Parser(pattern).top()


def parse_anchored(pattern: str) -> Node:
    """The node of a pattern that is matched as a whole (the formats' expressions)."""
    options = [node for _, _, node in parse(pattern)]
    return options[0] if len(options) == 1 else Alt(tuple(options))
