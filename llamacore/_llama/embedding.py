"""Embeddings for `Llama` (its `Embeddings` part): many inputs packed as separate sequences into few decodes."""

from __future__ import annotations

from typing import Any

import numpy as np

from llamacore._core import Batch
from llamacore._llama.host import LlamaHost
from llamacore.chat.openai import CreateEmbeddingResponse, embedding_response


def sequences_per_decode(n_batch: int) -> int:
    """Sequences an embedding context packs per decode (many short inputs in one call)."""
    return max(1, min(64, n_batch // 8))


def _token_lists(llm: LlamaHost, input: Any) -> tuple[bool, list[list[int]]]:
    """(single?, token lists) for a string, a token list, or a list of either."""
    if isinstance(input, str) or (isinstance(input, list) and input and isinstance(input[0], int)):
        items, single = [input], True
    else:
        items, single = list(input), False
    if not items:
        raise ValueError("input must not be empty")
    lists = []
    for item in items:
        if isinstance(item, str):
            tokens = llm.model.tokenize(item, add_special=True, parse_special=False)
        else:
            tokens = [int(t) for t in item]
            bad = [t for t in tokens if not 0 <= t < llm.model.n_vocab]
            if bad:
                raise ValueError(f"token {bad[0]} is outside the vocabulary (0..{llm.model.n_vocab - 1})")
        if not tokens:
            raise ValueError("an input produced no tokens")
        lists.append(tokens)
    return single, lists


def _normalized(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.maximum(norm, 1e-12)


def embed_all(llm: LlamaHost, input: Any, *, normalize: bool, truncate: bool) -> tuple[bool, list, int]:
    """(was the input a single item?, one embedding per item, tokens used)."""
    ctx, model = llm.ctx, llm.model
    single, lists = _token_lists(llm, input)
    limit = ctx.n_batch
    for i, tokens in enumerate(lists):
        if len(tokens) > limit:
            if not truncate:
                raise ValueError(f"input {i} ({len(tokens)} tokens) is too large to process: the limit is {limit} "
                                 "tokens (n_batch)")
            lists[i] = tokens[:limit]
    per_token = ctx.pooling == "none"
    run = ctx.encode if model.has_encoder and not model.has_decoder else ctx.decode
    results: list[Any] = [None] * len(lists)
    batch = Batch(limit)
    group: list[int] = []

    def flush() -> None:
        run(batch)
        llm.embed_decodes += 1
        row = 0
        for seq, index in enumerate(group):
            if per_token:
                n = len(lists[index])
                rows = np.stack([ctx.embedding(row + k) for k in range(n)])
                row += n
                results[index] = _normalized(rows) if normalize else rows.copy()
            else:
                v = ctx.sequence_embedding(seq)
                results[index] = _normalized(v) if normalize else v.copy()
        ctx.kv_clear()
        batch.clear()
        group.clear()

    for index, tokens in enumerate(lists):
        if group and (batch.n_tokens + len(tokens) > limit or len(group) == ctx.n_seq_max):
            flush()
        batch.add_sequence(tokens, 0, len(group), logits_last=True, logits_all=per_token)
        group.append(index)
    flush()
    return single, [r.tolist() for r in results], sum(map(len, lists))


class Embeddings(LlamaHost):
    """`Llama.create_embedding` and `Llama.embed` (for a model loaded with embedding=True)."""

    def create_embedding(self, input: str | list[str] | list[int] | list[list[int]], model: str | None = None,
                         normalize: bool = True, truncate: bool = True) -> CreateEmbeddingResponse:
        """OpenAI-shaped embeddings (normalized to unit length, as OpenAI's are). An input longer than
        n_batch is cut to it (as llama-cpp-python does), or refused with ValueError when `truncate`
        is False; usage counts the tokens embedded."""
        _, vectors, n_tokens = self._embed(input, normalize, truncate)
        return embedding_response(vectors, model or self.model_path, n_tokens)

    def embed(self, input, normalize: bool = False, truncate: bool = True, return_count: bool = False):
        """Embeddings of one input (a vector) or a list of inputs (a list of vectors)."""
        single, vectors, n_tokens = self._embed(input, normalize, truncate)
        value = vectors[0] if single else vectors
        return (value, n_tokens) if return_count else value

    def _embed(self, input, normalize: bool, truncate: bool) -> tuple[bool, list, int]:
        if not self.embedding:
            raise ValueError("Llama model must be created with embedding=True to call this method")
        self.reset()
        return embed_all(self, input, normalize=normalize, truncate=truncate)
