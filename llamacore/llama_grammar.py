"""llama-cpp-python's `LlamaGrammar`: a GBNF grammar made from text, a file or a JSON schema, passed as
`grammar=` to `Llama`'s calls (which also take the GBNF text itself).

The grammar is parsed by llama.cpp when a call uses it, against that model's vocabulary; a grammar
that does not parse raises ValueError there.
"""

from __future__ import annotations

import json
import os
from typing import Any

from llamacore.grammar.json_schema import schema_to_grammar
from llamacore.grammar.limits import GrammarLimits, check_gbnf


class LlamaGrammar:
    """A GBNF grammar (root rule `root`). Build it with the `from_*` constructors."""

    def __init__(self, *, _grammar: str) -> None:
        if not isinstance(_grammar, str) or not _grammar.strip():
            raise ValueError("a grammar needs GBNF text")
        self._grammar = _grammar

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> LlamaGrammar:
        """A GBNF grammar; GrammarLimitError when it would be too large for llama.cpp to hold (limits.check_gbnf)."""
        check_gbnf(grammar, GrammarLimits())
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: str | os.PathLike[str], verbose: bool = True) -> LlamaGrammar:
        with open(file, encoding="utf-8") as f:
            return cls.from_string(f.read())

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> LlamaGrammar:
        """The grammar of JSON documents valid under `json_schema` (a JSON string, as llama-cpp-python takes it)."""
        return cls(_grammar=schema_to_grammar(json.loads(json_schema)))

    def __str__(self) -> str:
        return self._grammar

    def __repr__(self) -> str:
        return f"LlamaGrammar({len(self._grammar)} characters of GBNF)"


def grammar_text(grammar: Any) -> str | None:
    """A call's `grammar` argument as GBNF text (a LlamaGrammar, text, or None)."""
    return grammar._grammar if isinstance(grammar, LlamaGrammar) else grammar


__all__ = ["LlamaGrammar", "grammar_text"]
