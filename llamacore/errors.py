"""Exceptions raised by llamacore beyond the built-in ones (FileNotFoundError, ValueError, IndexError)."""


class DecodeError(RuntimeError):
    """llama_decode/llama_encode failed; the context's memory is as it was before the call."""


class ContextFullError(DecodeError):
    """No room is left in the KV cache for the batch (grow n_ctx or free sequences)."""


class GrammarBudgetError(ValueError):
    """A grammar took more work than its limit at one token (set_grammar_work_limit): it is too ambiguous
    to follow in bounded time, so the generation it constrained ends."""


class DecodeAbortedError(DecodeError):
    """The abort callback stopped a decode; processed micro-batches stay in the KV cache."""
