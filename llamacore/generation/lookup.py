"""Prompt lookup: draft tokens that followed the latest earlier occurrence of the context's last n-gram.

Text that repeats its context (code edits, quoting, summaries) is drafted well by the tokens that
followed the same n-gram before, with no model. The index is kept as the context grows, so a
lookup after a few new tokens costs a few dict updates and lookups rather than a scan. Both
`LlamaPromptLookupDecoding` (Llama's drafts) and the server's prompt lookup use it.
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    """For every n-gram of the context (`min_n` to `max_n` tokens) that has a token after it, where
    the tokens after its latest occurrence start."""

    def __init__(self, max_n: int, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= max_n, got {min_n} and {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._after: dict[tuple[int, ...], int] = {}

    def reset(self) -> None:
        self.tokens, self._after = [], {}

    def sync(self, context: Sequence[int]) -> None:
        """Index `context`, incrementally when it extends the context indexed last. Only the last token
        indexed is compared (a context that grows by appending is the case worth being cheap for); a
        caller whose contexts may change otherwise compares them itself and calls `reset`."""
        known = len(self.tokens)
        if len(context) < known or (known and context[known - 1] != self.tokens[-1]):
            self.reset()
            known = 0
        self.tokens.extend(context[known:])
        tokens, after = self.tokens, self._after
        for p in range(max(known, 1), len(tokens)):          # the n-grams that end just before token p
            for n in range(self.min_n, min(self.max_n, p) + 1):
                after[tuple(tokens[p - n:p])] = p

    def continuation(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the longest n-gram that
        ends the context (none when no n-gram of it occurred before)."""
        tokens = self.tokens
        for n in range(min(self.max_n, len(tokens) - 1), self.min_n - 1, -1):
            start = self._after.get(tuple(tokens[-n:]))
            if start is not None:
                return tokens[start:start + limit]
        return []


__all__ = ["NgramIndex"]
