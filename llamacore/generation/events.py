"""Typed generation events, shared by `Llama`'s loop and the server's engine.

A generation starts with `Started` (it took a sequence; the engine's events only), produces
`Token`s (ids, from the engine's thread) or `Text` (detokenized, safe to send), and ends with
exactly one `Finished` or `Failed`. The finish reason is an enum, so a cancelled generation is
reported as cancelled and can never pass for "length".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llamacore.generation.logprobs import TokenLogprob


class FinishReason(enum.StrEnum):
    """Why a generation ended; the values are OpenAI's `finish_reason` strings where OpenAI has one."""

    STOP = "stop"                # end-of-generation token or a stop string
    LENGTH = "length"            # max_tokens or the context is full
    TOOL_CALLS = "tool_calls"    # the text parsed as tool calls
    CANCELLED = "cancelled"      # the listener asked to stop (client gone, stop string seen by the frontend)
    ERROR = "error"              # llama.cpp or the engine failed

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Started:
    """The request took a sequence and its prompt is being computed; `n_cached` of its tokens were in
    the KV cache already (a reused or shared prefix) and cost nothing."""

    n_cached: int
    at: float = 0.0         # time.monotonic() when it started (one clock for all processes on a machine)


@dataclass(frozen=True)
class Progress:
    """A batch of the prompt was decoded: `n_processed` of its tokens are in the KV cache now (those
    found there at the start included). Only for requests that ask for it (llama-server's return_progress)."""

    n_processed: int
    at: float = 0.0         # time.monotonic() after the batch


@dataclass(frozen=True)
class Token:
    """One sampled token id (and its log-probabilities when they were asked for)."""

    id: int
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class Text:
    """Newly releasable text, with the log-probability entry of the token that produced it."""

    text: str
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class Finished:
    reason: FinishReason
    n_generated: int
    stop_sequence: str | None = None     # the stop string that ended it, when one did


@dataclass(frozen=True)
class Failed:
    error: BaseException


EngineEvent = Started | Progress | Token | Finished | Failed
TextEvent = Text | Finished

__all__ = ["EngineEvent", "Failed", "FinishReason", "Finished", "Progress", "Started", "Text", "TextEvent", "Token"]
