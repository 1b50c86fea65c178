"""`Llama`'s text completions: `create_completion` (the `Completions` part of Llama) and its token
loop, sampled tokens to Text events (text released as it becomes safe, stop strings held back),
with llama-cpp-python's per-token hooks."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from llamacore._llama.host import LlamaHost
from llamacore.chat.openai import ChoiceOutput, CreateCompletionResponse, Envelope, completion_logprobs, usage
from llamacore.chat.prompt import grammar_for
from llamacore.generation.events import Finished, FinishReason, Text, TextEvent
from llamacore.generation.logprobs import TokenLogprob
from llamacore.generation.processors import LogitsProcessor, StoppingCriteria
from llamacore.generation.sampling import SamplingParams, check_tfs_z
from llamacore.generation.text_stream import TextStream
from llamacore.llama_grammar import LlamaGrammar, grammar_text
from llamacore.vision.prompt import MediaTokens

# Tokens the C loop generates between returns to Python when nobody reads them one at a time.
CHUNK = 64


def text_events(llm: LlamaHost, tokens: list[int], sampling: SamplingParams, max_tokens: int | None, stops: list[str],
                n_logprobs: int | None, echo_text: str | None, ignore_eos: bool,
                logits_processor: LogitsProcessor | None = None,
                stopping_criteria: StoppingCriteria | None = None, stream: bool = False) -> Iterator[TextEvent]:
    """Text events as text becomes safe to release, then one Finished.

    Tokens come from the C loop (llamacore/core/token_loop.pyx), in chunks or one at a time for a
    stream, unless a caller's hook must see each token: logprobs, a logits processor, stopping
    criteria, `logits_all`, a draft model, or a stop string that only matches decoded text (one
    holding U+FFFD, the replacement character)."""
    room = llm.ctx.n_ctx - len(tokens)
    limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
    text = TextStream(stops)
    if echo_text is not None:
        yield from _echo(llm, tokens, echo_text, n_logprobs)
    per_token = (n_logprobs is not None or logits_processor is not None or stopping_criteria is not None
                 or llm.logits_all or llm._drafter is not None or any("\ufffd" in s for s in stops))
    if limit <= 0:
        n_out, finish = 0, FinishReason.LENGTH
    elif per_token:
        # logprobs and stopping criteria read the logits after each token: from the last row, which
        # is that token's only without drafts
        n_out, finish = yield from _token_events(llm, llm._generate(
            tokens, sampling, max_tokens=limit, ignore_eos=ignore_eos, logits_processor=logits_processor,
            reads_logits=n_logprobs is not None or stopping_criteria is not None),
            text, n_logprobs, ignore_eos, stopping_criteria)
    else:
        n_out, finish = yield from _chunk_events(llm._token_chunks(
            tokens, sampling, max_tokens=limit, ignore_eos=ignore_eos, stops=stops, chunk=1 if stream else CHUNK),
            text)
    tail = text.finish()
    if tail:
        yield Text(tail)
    yield Finished(finish, n_out)


def _chunk_events(chunks: Iterator[tuple[list[int], bytes, str | None]],
                  text: TextStream) -> Generator[Text, None, tuple[int, FinishReason]]:
    """Text events of the C loop's chunks: (tokens generated, finish reason)."""
    n_out, finish = 0, None
    for out, data, finish in chunks:
        n_out += len(out) - (finish == "eog")   # an end-of-generation token is no output
        delta = text.push(data)
        if delta:
            yield Text(delta)
    return n_out, FinishReason.STOP if finish in ("eog", "stop") or text.stopped else FinishReason.LENGTH


def _token_events(llm: LlamaHost, tokens_out: Iterator[int], text: TextStream, n_logprobs: int | None,
                  ignore_eos: bool, stopping_criteria: StoppingCriteria | None,
                  ) -> Generator[Text, None, tuple[int, FinishReason]]:
    """Text events of tokens generated one at a time, with the per-token hooks: (tokens generated,
    finish reason)."""
    n_out, piece = 0, llm._piece_text
    for token in tokens_out:
        if not ignore_eos and llm.model.is_eog(token):
            return n_out, FinishReason.STOP
        n_out += 1
        entry = (TokenLogprob.from_logits(llm.ctx.logits(-1), token, n_logprobs, piece)
                 if n_logprobs is not None else None)
        delta = text.push(llm.model.token_to_piece(token))
        if delta or entry is not None:
            yield Text(delta, entry)
        # (the context holds the tokens before this one: llama-cpp-python's input_ids at this point)
        if text.stopped or (stopping_criteria is not None and stopping_criteria(
                np.asarray(llm._cached, dtype=np.intc), llm.ctx.logits(-1))):
            return n_out, FinishReason.STOP
    return n_out, FinishReason.LENGTH


def _echo(llm: LlamaHost, tokens: list[int], text: str, n_logprobs: int | None) -> Iterator[Text]:
    """The prompt as output text; with logprobs, one event per prompt token (first has none)."""
    if n_logprobs is None:
        yield Text(text)
        return
    rows = llm._eval(tokens, logits_all=True)
    for i, token in enumerate(tokens):
        if i == 0:
            entry = TokenLogprob(token, llm._piece_text(token), None, [])
        else:
            entry = TokenLogprob.from_logits(rows[i - 1], token, n_logprobs, llm._piece_text)
        yield Text(llm._piece_text(token), entry)


__all__ = ["text_events"]


class Completions(LlamaHost):
    """`Llama.create_completion` (also `Llama.__call__`) and what it shares with chat."""

    def create_completion(self, prompt: str | list[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                          typical_p: float = 1.0, logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0, top_k: int = 40,
                          stream: bool = False, seed: int | None = None, tfs_z: float = 1.0, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: str | None = None,
                          stopping_criteria: StoppingCriteria | None = None,
                          logits_processor: LogitsProcessor | None = None,
                          grammar: str | LlamaGrammar | None = None, logit_bias: dict[int, float] | None = None,
                          *, response_format: dict | None = None, ignore_eos: bool = False,
                          ) -> CreateCompletionResponse | Iterator[CreateCompletionResponse]:
        """OpenAI-style text completion; `stream=True` returns an iterator of chunks. `logits_processor`
        and `stopping_criteria` are llama-cpp-python's hooks (llamacore.generation.processors). With a cache
        (`set_cache`), the prompt starts from the cached state sharing most of it."""
        check_tfs_z(tfs_z)
        sampling = self._sampling_params(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
            repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta, seed=seed, logit_bias=logit_bias, grammar=grammar,
            response_format=response_format)
        events, n_prompt = self._completion_events(prompt, sampling, suffix=suffix, max_tokens=max_tokens,
                                                   logprobs=logprobs, echo=echo, stop=stop, ignore_eos=ignore_eos,
                                                   logits_processor=logits_processor,
                                                   stopping_criteria=stopping_criteria, stream=stream)
        envelope = Envelope.new("cmpl", model or self.model_path)
        if stream:
            return self._stream_chunks(events, envelope)
        output = ChoiceOutput()
        for event in events:
            output.add(event)
        return envelope.completion([output.completion_choice()], usage(n_prompt, output.n_generated))

    def _sampling_params(self, *, seed: int | None = None, logit_bias: dict[int, float] | None = None,
                         grammar: str | LlamaGrammar | None = None, response_format: dict | None = None,
                         **fields: Any) -> SamplingParams:
        """Checked sampling parameters; the model's seed when the call sets none, and its
        `last_n_tokens_size` as the repetition penalties' window."""
        fields.setdefault("penalty_last_n", self.last_n_tokens_size)
        sampling = SamplingParams(
            seed=self.seed if seed is None else seed,
            logit_bias={int(k): float(v) for k, v in (logit_bias or {}).items()},
            grammar=grammar_text(grammar) or grammar_for(response_format), **fields)
        sampling.validate()
        return sampling

    def _completion_events(self, prompt: str | list[int], sampling: SamplingParams, *, suffix: str | None = None,
                           max_tokens: int | None = 16, logprobs: int | None = None, echo: bool = False,
                           stop: str | list[str] | None = None, ignore_eos: bool = False,
                           logits_processor: LogitsProcessor | None = None,
                           stopping_criteria: StoppingCriteria | None = None,
                           stream: bool = False) -> tuple[Iterator[TextEvent], int]:
        """Checked request -> (its Text events then one Finished, number of prompt tokens). With
        `stream`, text comes a token at a time; else in chunks.

        The prompt is checked before this returns, so a bad request raises even when the caller streams.
        """
        tokens = self._prompt_tokens(prompt, suffix)
        if len(tokens) > self.ctx.n_ctx:
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {self.ctx.n_ctx}")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        echo_text = None
        if echo:
            echo_text = (prompt if isinstance(prompt, str)
                         else self.model.detokenize(tokens, True).decode("utf-8", "replace"))
        self._cache_lookup(tokens)
        events = text_events(self, tokens, sampling, max_tokens, stops, logprobs, echo_text,
                             ignore_eos, logits_processor, stopping_criteria, stream)
        if self.cache is not None:
            events = self._saving_to_cache(events)
        return events, len(tokens)

    def _saving_to_cache(self, events: Iterator[TextEvent]) -> Iterator[TextEvent]:
        """`events`, the context's state stored in the cache when the completion finishes (before its
        Finished event goes out: a stream's reader stops there)."""
        for event in events:
            if isinstance(event, Finished):
                self._cache_save()
            yield event

    __call__ = create_completion

    def _prompt_tokens(self, prompt: str | list[int], suffix: str | None) -> list[int]:
        if suffix:
            raise ValueError("suffix (fill-in-the-middle) is not supported by this model"
                             + (" (spm_infill only orders such prompts)" if self.spm_infill else ""))
        if isinstance(prompt, MediaTokens):       # a chat prompt with images, checked when built
            return prompt
        if isinstance(prompt, (list, tuple)):
            tokens = [int(t) for t in prompt]
            for t in tokens:
                if not 0 <= t < self.model.n_vocab:
                    raise ValueError(f"prompt token {t} is outside the vocabulary (0..{self.model.n_vocab - 1})")
            return tokens or [self.model.token_bos]
        if self._custom_tokenizer:
            return self.tokenize(prompt.encode("utf-8"), add_bos=True, special=False) or [self.model.token_bos]
        return self.model.tokenize(prompt, add_special=True, parse_special=False) or [self.model.token_bos]

    def _piece_text(self, token: int) -> str:
        return self.model.token_to_piece(token).decode("utf-8", "replace")

    def _stream_chunks(self, events: Iterator[TextEvent], envelope: Envelope) -> Iterator[CreateCompletionResponse]:
        output = ChoiceOutput()
        for event in events:
            start = output.add(event)
            if isinstance(event, Finished):
                yield envelope.completion_chunk(0, "", event.reason)
                return
            lp = completion_logprobs([event.logprob], [start]) if event.logprob is not None else None
            yield envelope.completion_chunk(0, event.text, None, lp)
