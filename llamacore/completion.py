"""The token loop of `Llama`'s text completions: sampled tokens to Text events (text released as it
becomes safe, stop strings held back), with llama-cpp-python's per-token hooks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from llamacore.events import Finished, FinishReason, Text, TextEvent
from llamacore.logprobs import TokenLogprob
from llamacore.processors import LogitsProcessor, StoppingCriteria
from llamacore.sampling import SamplingParams
from llamacore.text_stream import TextStream

if TYPE_CHECKING:
    from llamacore.llama import Llama


def text_events(llm: Llama, tokens: list[int], sampling: SamplingParams, max_tokens: int | None, stops: list[str],
                n_logprobs: int | None, echo_text: str | None, ignore_eos: bool,
                logits_processor: LogitsProcessor | None = None,
                stopping_criteria: StoppingCriteria | None = None) -> Iterator[TextEvent]:
    """Text events as text becomes safe to release, then one Finished."""
    room = llm.ctx.n_ctx - len(tokens)
    limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
    want_lp = n_logprobs is not None
    stream = TextStream(stops)
    if echo_text is not None:
        yield from _echo(llm, tokens, echo_text, n_logprobs)
    n_out, finish = 0, FinishReason.LENGTH
    piece = llm._piece_text
    tokens_out = llm.generate(tokens, sampling, max_tokens=limit, ignore_eos=ignore_eos,
                              logits_processor=logits_processor) if limit > 0 else iter(())
    for token in tokens_out:
        if not ignore_eos and llm.model.is_eog(token):
            finish = FinishReason.STOP
            break
        n_out += 1
        entry = TokenLogprob.from_logits(llm.ctx.logits(-1), token, n_logprobs or 0, piece) if want_lp else None
        delta = stream.push(llm.model.token_to_piece(token))
        if delta or entry is not None:
            yield Text(delta, entry)
        # (the context holds the tokens before this one: llama-cpp-python's input_ids at this point)
        if stream.stopped or (stopping_criteria is not None and stopping_criteria(
                np.asarray(llm._cached, dtype=np.intc), llm.ctx.logits(-1))):
            finish = FinishReason.STOP
            break
    tail = stream.finish()
    if tail:
        yield Text(tail)
    yield Finished(finish, n_out)


def _echo(llm: Llama, tokens: list[int], text: str, n_logprobs: int | None) -> Iterator[Text]:
    """The prompt as output text; with logprobs, one event per prompt token (first has none)."""
    if n_logprobs is None:
        yield Text(text)
        return
    rows = llm.eval(tokens, logits_all=True)
    for i, token in enumerate(tokens):
        if i == 0:
            entry = TokenLogprob(token, llm._piece_text(token), None, [])
        else:
            entry = TokenLogprob.from_logits(rows[i - 1], token, n_logprobs, llm._piece_text)
        yield Text(llm._piece_text(token), entry)


__all__ = ["text_events"]
