"""`Llama`'s state (the `CacheAndState` part of Llama): reset, seed, `save_state` / `load_state`,
and the prompt cache of `set_cache` (llamacore.llama_cache), consulted before each completion and
filled after it."""

from __future__ import annotations

from typing import Any

from llamacore._llama.host import LlamaHost
from llamacore.llama_cache import (
    BaseLlamaCache,
    LlamaState,
    capture_state,
    longest_token_prefix,
    restore_state,
)
from llamacore.vision.prompt import MediaTokens


class CacheAndState(LlamaHost):
    """`Llama`'s state methods: reset, seed, `save_state` / `load_state` and the prompt cache
    (`set_cache`, consulted before each completion and filled after it)."""

    def reset(self) -> None:
        """Forget the cached prompt (the next call evaluates from scratch)."""
        self.ctx.kv_clear()
        self._cached = []

    def set_seed(self, seed: int) -> None:
        """The seed of the sampling that sets none itself (as the constructor's `seed`; -1 or
        LLAMA_DEFAULT_SEED = a random one)."""
        self.seed = seed

    def set_cache(self, cache: BaseLlamaCache | None) -> None:
        """A prompt cache (llamacore.llama_cache.LlamaRAMCache or LlamaDiskCache), None for none: each
        completion first loads the cached state sharing more of its prompt than the context does,
        and stores its final state in the cache."""
        self.cache = cache

    def save_state(self) -> LlamaState:
        """The context's state and the tokens it holds (with `logits_all`, every token's logits row)."""
        state = capture_state(self)
        if self.logits_all and self._scores is not None:
            state.scores = self._scores[:state.n_tokens].copy()
        return state

    def load_state(self, state: LlamaState | dict[str, Any]) -> None:
        """Restore a `save_state()` (or the dict form older llamacore versions returned)."""
        restore_state(self, state)
        scores = getattr(state, "scores", None)
        if self.logits_all and scores is not None and 0 < len(scores) == self.n_tokens:
            self.scores[:self.n_tokens] = scores

    def _cache_lookup(self, tokens: list[int]) -> None:
        """Before a completion: load the cached state that shares more of `tokens` than the context does
        (only one computed with the adapters active now)."""
        if self.cache is None or isinstance(tokens, MediaTokens):
            return
        try:
            item = self.cache[tokens]
        except KeyError:
            return
        key = self._adapter_key()
        if tuple(getattr(item, "adapter_key", ())) != key:
            return
        held = item.input_ids[:item.n_tokens].tolist()
        own = longest_token_prefix(self._cached, tokens) if self._cache_key == key else 0
        if longest_token_prefix(held, tokens) > own:
            self.load_state(item)

    def _cache_save(self) -> None:
        """After a completion: store the context's state in the cache, under the tokens it holds (not
        for prompts with images: their rows are placeholder ids, negative)."""
        if self.cache is not None and self._cached and min(self._cached) >= 0:
            self.cache[list(self._cached)] = self.save_state()
