"""Bounds on converting a JSON schema to a grammar, so a hostile schema costs a quick refusal.

The size counts what llama.cpp will hold, not only the text: it expands ``x{m,n}`` into up to n
copies of ``x``, so a short ``char{0,100000}`` weighs as much as a long grammar.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

# a literal, a class or a name, and the repetition after it (literals are skipped whole, so braces
# inside them never count)
_REPEAT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\[[^\]\\]*(?:\\.[^\]\\]*)*\]|[a-zA-Z0-9-]+|\{(\d+)(?:,(\d*))?\}')


class UnsupportedSchemaError(ValueError):
    """A valid schema uses a feature that a grammar cannot express (a lookaround, uniqueItems over
    open-ended items, an unknown format, ...). Within anyOf such a branch can be left out."""


class GrammarLimitError(ValueError):
    """A schema's grammar would exceed a limit (too large, too slow to build, nested too deeply)."""


@dataclass(frozen=True)
class GrammarLimits:
    max_size: int = 2 * 1024 * 1024   # bytes of grammar, repetitions counted as expanded
    max_depth: int = 64               # nested subschemas
    timeout: float = 2.0              # seconds of conversion


def cost(body: str) -> int:
    """Weight of a rule body: its length plus the copies llama.cpp makes for its repetitions."""
    if "{" not in body:
        return len(body)
    extra, atom = 0, 0
    for m in _REPEAT.finditer(body):
        if m[1] is None:
            atom = m.end() - m.start()
        else:
            extra += max(int(m[1]), int(m[2]) if m[2] else 0) * atom
    return len(body) + extra


MAX_RULES = 16_384      # rule definitions of a GBNF grammar given as text


def check_gbnf(text: str, limits: GrammarLimits) -> None:
    """Refuse a GBNF grammar given as text (a request's `grammar`, LlamaGrammar) that would exceed
    `limits.max_size` as llama.cpp expands it, or has more than MAX_RULES rules (GrammarLimitError)."""
    weight = cost(text)
    if weight > limits.max_size:
        raise GrammarLimitError(f"the grammar weighs {weight} bytes with its repetitions expanded, over the limit "
                                f"of {limits.max_size} (grammar_max_size)")
    rules = text.count("::=")
    if rules > MAX_RULES:
        raise GrammarLimitError(f"the grammar has {rules} rules, over the limit of {MAX_RULES}")


class Budget:
    """What one conversion may still spend; raises GrammarLimitError when it runs out."""

    def __init__(self, limits: GrammarLimits) -> None:
        self.limits = limits
        self.size = 0
        self.deadline = time.monotonic() + limits.timeout

    def spend(self, body: str) -> None:
        self.size += cost(body)
        if self.size > self.limits.max_size:
            raise GrammarLimitError(f"the JSON schema's grammar is larger than {self.limits.max_size} bytes")
        self.check()

    def check(self, pending: int = 0) -> None:
        """Raise if time is up, or if ``pending`` more bytes would not fit."""
        if self.size + pending > self.limits.max_size:
            raise GrammarLimitError(f"the JSON schema's grammar is larger than {self.limits.max_size} bytes")
        if time.monotonic() > self.deadline:
            raise GrammarLimitError(f"converting the JSON schema took longer than {self.limits.timeout:g} s")

    def depth(self, depth: int, path: str) -> None:
        if depth > self.limits.max_depth:
            raise GrammarLimitError(f"{path}: the JSON schema is nested deeper than {self.limits.max_depth} levels")
