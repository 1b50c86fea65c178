"""Idle sequences' KV cells kept in host memory (llama-server's --cache-ram and cache of idle slots).

In a unified KV cache every decoded token attends over every occupied cell, masked or not (without
flash attention, what the mask hides is still computed), so the cells an idle slot keeps for a
later request with the same prompt slow every step of the others: on a 155M q4_0 model, 8 clients
on a 16-slot server whose other 8 slots held their last answers decoded each step in 23 ms instead
of 19. When a new request starts, the engine moves each idle slot's cells here
(llama_state_seq_get_data) and frees them; a request whose prompt starts like a cached one gets
those cells back into its slot (llama_state_seq_set_data) instead of computing them again.

Entries are keyed by their tokens and adapter set (KV computed under other adapters differs) and
evicted least recently used first once their bytes pass the budget.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from llamacore.prefix import AdapterKey, common_prefix, reusable_prefix


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

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, adapters: AdapterKey, tokens: list[int], state: bytes) -> None:
        """Keep `state` for `tokens`; an entry it extends (or repeats) goes, as do the oldest past the budget."""
        if not tokens or len(state) > self.budget:
            return
        for key, old in list(self._entries.items()):
            if old.adapters == adapters and common_prefix(old.tokens, tokens) == len(old.tokens):
                self._drop(key)
        entry = CachedPrompt(adapters, tuple(tokens), state)
        self._entries[id(entry)] = entry
        self.size += len(state)
        while self.size > self.budget:
            self._drop(next(iter(self._entries)))

    def best(self, adapters: AdapterKey, tokens: list[int]) -> tuple[CachedPrompt | None, int]:
        """The entry sharing the longest reusable prefix with `tokens` (same adapters), and its length."""
        found, found_n = None, 0
        for entry in self._entries.values():
            if entry.adapters == adapters:
                n = reusable_prefix(entry.tokens, tokens)
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

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size -= len(entry.state)

