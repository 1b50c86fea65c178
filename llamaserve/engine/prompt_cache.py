"""Idle sequences' KV cells kept in host memory (llama-server's --cache-ram and cache of idle slots).

In a unified KV cache every decoded token attends over every occupied cell, masked or not (without
flash attention, what the mask hides is still computed), so the cells an idle slot keeps for a
later request with the same prompt slow every step of the others: on a 155M q4_0 model, 8 clients
on a 16-slot server whose other 8 slots held their last answers decoded each step in 23 ms instead
of 19. Once it has nothing to run, or when a new request starts, the engine moves each idle slot's cells here
(llama_state_seq_get_data) and frees them; a request whose prompt starts like a cached one gets
those cells back into its slot (llama_state_seq_set_data) instead of computing them again.

Entries are keyed by their tokens and adapter set (KV computed under other adapters differs) and
evicted least recently used first once their bytes pass the budget. A budget of gigabytes holds
thousands of entries, so they are found through an index on their first 4, 8 and 16 tokens (and
all of a shorter entry) rather than by comparing each: a lookup compares the most recently saved
SCAN_LIMIT of the entries sharing the longest of those keys with the prompt, and any shorter
entry the prompt starts with. (3000 entries after one 1500-token system prompt: comparing every
entry took 52 ms per save and 107 ms per lookup; this way 0.4 and 2.3 ms. Prompts sharing their
first 7 tokens: 0.6 and 1.7 ms against 33 and 6 µs.)
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from llamacore.generation.kv_reuse import AdapterKey, common_prefix

KEY_LENGTHS = (4, 8, 16)     # entries are indexed by their first 4, 8 and 16 tokens
SCAN_LIMIT = 64      # entries compared per lookup, most recently saved first


IndexKey = tuple[AdapterKey, tuple[int, ...], bool]


@dataclass(frozen=True, eq=False)
class CachedPrompt:
    """One saved sequence: its tokens, the adapter set they were computed with, and its KV state."""

    adapters: AdapterKey
    tokens: tuple[int, ...]
    state: bytes


class PromptCache:
    """Saved sequences within `budget` bytes, least recently used evicted first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0                       # bytes of the states held
        self._entries: OrderedDict[int, CachedPrompt] = OrderedDict()
        # (adapters, tokens, whole) -> entry ids, in saving order: an entry's first k tokens for each
        # k of KEY_LENGTHS it has (whole False), and all of an entry shorter than the longest (True)
        self._index: dict[IndexKey, dict[int, None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, adapters: AdapterKey, tokens: list[int], state: bytes) -> None:
        """Keep `state` for `tokens`; an entry it extends (or repeats) goes, as do the oldest past the budget."""
        if not tokens or len(state) > self.budget:
            return
        for old in self._candidates(adapters, tokens):
            if len(old.tokens) <= len(tokens) and old.tokens == tuple(tokens[:len(old.tokens)]):
                self._drop(id(old))
        entry = CachedPrompt(adapters, tuple(tokens), state)
        self._entries[id(entry)] = entry
        for key in _keys(entry):
            self._index.setdefault(key, {})[id(entry)] = None
        self.size += len(state)
        while self.size > self.budget:
            self._drop(next(iter(self._entries)))

    def best(self, adapters: AdapterKey, tokens: list[int]) -> tuple[CachedPrompt | None, int]:
        """The entry sharing the longest reusable prefix with `tokens` (same adapters), and its length."""
        found, found_n = None, 0
        limit = len(tokens) - 1                # a prompt keeps at least its last token to decode
        for entry in self._candidates(adapters, tokens):
            n = min(common_prefix(entry.tokens, tokens), limit)
            if n > found_n:
                found, found_n = entry, n
        return found, found_n

    def take(self, entry: CachedPrompt) -> None:
        """Remove `entry`: it is going back into a sequence (and comes back here when that one is idle)."""
        self._drop(id(entry))

    def forget_adapter(self, path: str) -> None:
        """An adapter was unloaded: what was computed with it must not come back, even for a reload of its file."""
        for key, entry in list(self._entries.items()):
            if any(p == path for p, _ in entry.adapters):
                self._drop(key)

    def _candidates(self, adapters: AdapterKey, tokens: Sequence[int]) -> list[CachedPrompt]:
        """The entries sharing the most key tokens with `tokens` (the SCAN_LIMIT most recently saved),
        and the short entries `tokens` starts with."""
        ids: list[int] = []
        for k in reversed(KEY_LENGTHS):
            if k <= len(tokens) and (bucket := self._index.get((adapters, tuple(tokens[:k]), False))):
                ids = list(itertools.islice(reversed(bucket), SCAN_LIMIT))     # buckets keep saving order
                break
        for n in range(1, min(len(tokens), KEY_LENGTHS[-1] - 1) + 1):
            ids.extend(self._index.get((adapters, tuple(tokens[:n]), True), ()))
        return [self._entries[i] for i in dict.fromkeys(ids)]

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self.size -= len(entry.state)
        for index_key in _keys(entry):
            ids = self._index[index_key]
            del ids[key]
            if not ids:
                del self._index[index_key]


def _keys(entry: CachedPrompt) -> list[IndexKey]:
    """Where `entry` is indexed: under its first k tokens for each key length it reaches, and, when
    shorter than the longest, under all of them."""
    keys = [(entry.adapters, entry.tokens[:k], False) for k in KEY_LENGTHS if k <= len(entry.tokens)]
    if len(entry.tokens) < KEY_LENGTHS[-1]:
        keys.append((entry.adapters, entry.tokens, True))
    return keys
