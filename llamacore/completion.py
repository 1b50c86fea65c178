"""OpenAI-shaped completion results and log-probabilities, shared by `Llama` and the server."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


@dataclass
class TokenLogprob:
    """Log-probability of one chosen token and of the `top` most likely alternatives."""

    token: int
    text: str
    logprob: float | None
    top: list[tuple[int, str, float]]

    @classmethod
    def from_logits(cls, logits: np.ndarray, token: int, n_top: int, piece) -> TokenLogprob:
        lp = log_softmax(logits.astype(np.float32, copy=False))
        top: list[tuple[int, str, float]] = []
        if n_top > 0:
            idx = np.argpartition(-lp, n_top - 1)[:n_top]
            idx = idx[np.argsort(-lp[idx])]
            top = [(int(i), piece(int(i)), float(lp[i])) for i in idx]
        return cls(token, piece(token), float(lp[token]), top)


@dataclass
class CompletionLogprobs:
    """Accumulates the legacy completions `logprobs` object (tokens, offsets, top_logprobs)."""

    entries: list[TokenLogprob] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)

    def add(self, entry: TokenLogprob, text_offset: int) -> None:
        self.entries.append(entry)
        self.offsets.append(text_offset)

    def as_completion(self) -> dict[str, Any]:
        return {
            "tokens": [e.text for e in self.entries],
            "text_offset": list(self.offsets),
            "token_logprobs": [e.logprob for e in self.entries],
            "top_logprobs": [{t: lp for _, t, lp in e.top} for e in self.entries],
        }

    def as_chat(self) -> dict[str, Any]:
        def item(text: str, lp: float) -> dict[str, Any]:
            return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
        return {"content": [{**item(e.text, e.logprob), "top_logprobs": [item(t, lp) for _, t, lp in e.top]}
                            for e in self.entries]}


def completion_response(cid: str, model: str, text: str, finish: str, logprobs: dict | None,
                        prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def completion_chunk(cid: str, model: str, text: str, finish: str | None,
                     logprobs: dict | None = None) -> dict[str, Any]:
    return {
        "id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}],
    }
