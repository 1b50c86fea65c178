"""Exceptions raised by llamacore beyond the built-in ones (FileNotFoundError, ValueError, IndexError)."""


class DecodeError(RuntimeError):
    """llama_decode/llama_encode failed; the context's memory is as it was before the call."""


class ContextFullError(DecodeError):
    """No room is left in the KV cache for the batch (grow n_ctx or free sequences)."""


class DecodeAbortedError(DecodeError):
    """The abort callback stopped a decode; processed micro-batches stay in the KV cache."""
