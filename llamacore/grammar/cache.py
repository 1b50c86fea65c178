"""Compiled schema grammars cached by schema hash, so repeated structured requests convert once.

The cache is an LRU bounded by the bytes of grammar text it holds; refusals are cached too (a
schema that failed once fails the same way again, without the work). Keys hash the schema's JSON
text in its own key order (property order shapes the grammar), the whitespace mode and the limits.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from llamacore.grammar.json_schema import schema_to_grammar
from llamacore.grammar.limits import GrammarLimitError, GrammarLimits

__all__ = ["GrammarCache", "default_cache"]


class GrammarCache:
    """Thread-safe LRU of schema -> GBNF (or the ValueError it raised), ``max_bytes`` of grammar text."""

    def __init__(self, max_bytes: int = 32 * 1024 * 1024, limits: GrammarLimits | None = None) -> None:
        self.max_bytes = max_bytes
        self.limits = limits or GrammarLimits()
        self.hits = self.misses = self.size = 0
        self._entries: OrderedDict[bytes, tuple[bool, str]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def _key(self, schema: Any, whitespace: str) -> bytes:
        try:
            text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the JSON schema is not JSON-serializable: {exc}") from None
        except RecursionError:
            raise GrammarLimitError("JSON schema is nested too deeply") from None
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
        digest.update(f"\0{whitespace}\0{self.limits}".encode())
        return digest.digest()

    def grammar(self, schema: Any, whitespace: str = "compact") -> str:
        """The GBNF grammar of ``schema``, converted on first use; ValueError if it is refused."""
        key = self._key(schema, whitespace)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        if found is None:
            try:
                found = (True, schema_to_grammar(schema, whitespace=whitespace, limits=self.limits))
            except GrammarLimitError:
                raise                      # a limit may pass another time (a timeout on a busy machine)
            except ValueError as exc:
                found = (False, str(exc))
            self._store(key, found)
        ok, text = found
        if not ok:
            raise ValueError(text)
        return text

    def _store(self, key: bytes, entry: tuple[bool, str]) -> None:
        cost = len(entry[1]) + 64
        with self._lock:
            self.misses += 1
            if cost > self.max_bytes or key in self._entries:
                return
            self._entries[key] = entry
            self.size += cost
            while self.size > self.max_bytes:
                _, (_, old) = self._entries.popitem(last=False)
                self.size -= len(old) + 64


_DEFAULT = GrammarCache()


def default_cache() -> GrammarCache:
    """The process-wide cache used when a caller passes none (default limits, 32 MiB)."""
    return _DEFAULT
