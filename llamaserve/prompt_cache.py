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
thousands of entries, so they are found through an index on their first KEY_TOKENS tokens (all of a
shorter entry) rather than by comparing each: a lookup finds entries sharing at least that many
tokens with the prompt, or a shorter entry the prompt starts with, and compares the most recently
saved SCAN_LIMIT of them. (3000 entries after one 1500-token system prompt: comparing every entry
took 52 ms per save and 107 ms per lookup; this way 0.5 and 2.4 ms. With distinct prompts, 0.6 and
1.7 ms against 7 µs each.)
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from llamacore.prefix import AdapterKey, common_prefix

KEY_TOKENS = 16      # entries are indexed by this many first tokens
SCAN_LIMIT = 64      # entries compared per lookup, most recently saved first


@dataclass(frozen=True, eq=False)
class CachedPrompt:
    """One saved sequence: its tokens, the adapter set they were computed with, and its KV state."""

    adapters: AdapterKey
    tokens: tuple[int, ...]
    state: bytes
    serial: int = 0                 # the order entries were saved in


class PromptCache:
    """Saved sequences within `budget` bytes, least recently used evicted first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0                       # bytes of the states held
        self._entries: OrderedDict[int, CachedPrompt] = OrderedDict()
        # (adapters, first KEY_TOKENS tokens) -> the ids of its entries
        self._index: dict[tuple[AdapterKey, tuple[int, ...]], dict[int, None]] = {}
        self._serials = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, adapters: AdapterKey, tokens: list[int], state: bytes) -> None:
        """Keep `state` for `tokens`; an entry it extends (or repeats) goes, as do the oldest past the budget."""
        if not tokens or len(state) > self.budget:
            return
        for old in self._candidates(adapters, tokens):
            if len(old.tokens) <= len(tokens) and old.tokens == tuple(tokens[:len(old.tokens)]):
                self._drop(id(old))
        entry = CachedPrompt(adapters, tuple(tokens), state, next(self._serials))
        self._entries[id(entry)] = entry
        self._index.setdefault(_key(adapters, entry.tokens), {})[id(entry)] = None
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
        """Entries sharing KEY_TOKENS tokens with `tokens`, or shorter ones `tokens` starts with:
        the SCAN_LIMIT most recently saved."""
        keys = {tuple(tokens[:n]) for n in range(1, min(len(tokens), KEY_TOKENS) + 1)}
        ids = [i for key in keys for i in self._index.get((adapters, key), ())]
        return [self._entries[i] for i in sorted(ids, key=self._age)[-SCAN_LIMIT:]]

    def _age(self, key: int) -> int:
        return self._entries[key].serial

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size -= len(entry.state)
            ids = self._index[_key(entry.adapters, entry.tokens)]
            del ids[key]
            if not ids:
                del self._index[_key(entry.adapters, entry.tokens)]


def _key(adapters: AdapterKey, tokens: tuple[int, ...]) -> tuple[AdapterKey, tuple[int, ...]]:
    return adapters, tokens[:KEY_TOKENS]
