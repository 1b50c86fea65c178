"""The completions' token loop of a `Llama`: plain answers in the C token loop, and answers with
per-token hooks or drafts (speculative decoding) step by step.

`Generation` is a part of `Llama` (llamacore.llama), kept apart from `TokenLevel`
(llamacore._llama.tokens), whose context and tokens it generates into.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from llamacore._core import TokenLoop
from llamacore._llama.host import LlamaHost
from llamacore.generation.processors import LogitsProcessor, apply_processor
from llamacore.generation.sampling import SamplingParams
from llamacore.llama_speculative import LlamaDraftModel
from llamacore.vision.prompt import images_of

REST_CHUNK = 4          # tokens per C-loop call while drafting rests (a stream gets them together)


class Generation(LlamaHost):
    """`_generate` (step by step), `_token_chunks` (the C loop) and the drafts between them."""

    def _generate(self, tokens: list[int], sampling: SamplingParams, *, max_tokens: int,
                  ignore_eos: bool = False, logits_processor: LogitsProcessor | None = None,
                  reads_logits: bool = False) -> Iterator[int]:
        """Yield sampled tokens until EOS (unless ignored), `max_tokens` or a full context (the loop of
        the completions).

        The caller may stop iterating at any time; the cache then holds the prompt plus every
        token that was decoded. The last token is not decoded (as in llama-cpp-python): nothing
        is sampled after it, and a next prompt that continues the text decodes it then. A
        `logits_processor` sees the tokens so far and the logits before each token is sampled,
        and what it returns is sampled from (llamacore.generation.processors).

        With a `draft_model`, each step decodes the sampled token and the draft after it in one
        batch, then samples the logits after each in turn while they agree with the draft: the
        tokens are those of plain decoding (no drafts with a logits processor or logits_all, nor
        when the caller `reads_logits` of each token as it comes: logprobs, stopping criteria).
        """
        sampler = sampling.build(self.model)
        self._eval(tokens)
        ctx, batch, model, n_ctx = self.ctx, self._batch, self.model, self.ctx.n_ctx
        scores = self.scores if self.logits_all else None
        # no drafts with per-token hooks on the logits, or for image prompts (their rows are no token ids)
        hooked = logits_processor is not None or scores is not None or reads_logits
        drafter = self._drafter if not hooked and not images_of(tokens) else None
        if drafter is not None:
            self._pacing.begin()

        def stops(token: int) -> bool:
            return (not ignore_eos and model.is_eog(token)) or len(self._cached) >= n_ctx

        produced, row = 0, -1                   # row: the batch output the next token is sampled from
        step: tuple[int, int, int] | None = None        # the last step's tokens, drafted, accepted
        step_started = time.perf_counter()
        while produced < max_tokens:
            if step is not None and drafter is not None:    # each step's speed tells whether drafts pay
                now = time.perf_counter()
                self._pacing.record(*step, now - step_started)
                step_started = now
            if drafter is not None and row == -1 and step is not None and self._pacing.resting > 1:
                # a rest from drafting: plain steps, in the C loop (llamacore/core/token_loop.pyx)
                for token in self._rest_in_c(sampler, max_tokens - produced, ignore_eos):
                    produced += 1
                    yield token
                    if stops(token) or produced >= max_tokens:
                        return
                step, step_started = None, time.perf_counter()
                continue
            if logits_processor is not None:
                apply_processor(logits_processor, self._cached, ctx.logits(-1))
            token = sampler.sample(ctx, row)
            produced += 1
            yield token
            if stops(token) or produced >= max_tokens:
                return                          # the last token is not decoded: nothing samples after it
            pos = len(self._cached)
            # drafts stop before the last token: that one is sampled, not decoded (as without drafts)
            draft = self._draft(drafter, token, min(max_tokens - produced - 1, n_ctx - pos - 1, ctx.n_batch - 1))
            batch.clear()
            batch.add_sequence([token, *draft], pos, 0, logits_last=True, logits_all=bool(draft))
            ctx.decode(batch)
            self._cached.append(token)
            if scores is not None:
                scores[pos] = ctx.logits(-1)
            row = len(draft) if draft else -1
            for k, guess in enumerate(draft):  # the logits after the token, then after each draft in turn
                sampled = sampler.sample(ctx, k)
                produced += 1
                yield sampled
                if sampled == guess and not stops(sampled):
                    self._cached.append(guess)  # its KV is in place
                    continue
                ctx.kv_remove(0, len(self._cached), -1)     # the drafts from here on were not confirmed
                step = (k + 2, len(draft), k)
                if stops(sampled) or produced >= max_tokens:
                    self.n_accepted += k
                    return
                batch.clear()                   # the token sampled instead is decoded on its own
                batch.add(sampled, len(self._cached), 0, True)
                ctx.decode(batch)
                self._cached.append(sampled)
                row = -1
                break
            else:
                step = (1 + len(draft), len(draft), len(draft))
            self.n_accepted += step[2]

    def _rest_in_c(self, sampler: Any, room: int, ignore_eos: bool) -> Iterator[int]:
        """The plain steps of the pacing's rest (up to `room` tokens) by the C token loop, a few
        tokens per call (a stream sees them in small bursts). Every token is decoded but one that
        ends the answer (end of generation, the context full, `room` reached), as in `_generate`."""
        pacing = self._pacing
        loop = TokenLoop(self.ctx, sampler, len(self._cached), room, ignore_eos=ignore_eos)
        started = time.perf_counter()
        while pacing.resting > 0 and loop.finish is None:
            start = loop.pos
            out, _ = loop.run(min(REST_CHUNK, pacing.resting))
            self._cached.extend(out[:loop.pos - start])         # the tokens it decoded
            yield from out
            now = time.perf_counter()                            # the caller's work on them included,
            pacing.rested(loop.pos - start, now - started)       # as in a drafted step's time
            started = now

    def _token_chunks(self, tokens: list[int], sampling: SamplingParams, *, max_tokens: int, ignore_eos: bool,
                      stops: list[str], chunk: int) -> Iterator[tuple[list[int], bytes, str | None]]:
        """`_generate` in C (TokenLoop): (tokens, their text's bytes, finish) per `chunk` tokens, where
        finish is None until the last chunk, then "eog" (its last token is the end of generation; its
        text is not included), "stop" (the text holds a stop string) or "length". No per-token hooks."""
        sampler = sampling.build(self.model)
        self._eval(tokens)
        loop = TokenLoop(self.ctx, sampler, len(self._cached), max_tokens, ignore_eos=ignore_eos, stops=stops)
        while loop.finish is None:
            start = loop.pos
            out, text = loop.run(chunk)
            self._cached.extend(out[:loop.pos - start])     # the tokens it decoded
            yield out, text, loop.finish

    def _draft(self, drafter: Any, token: int, room: int) -> list[int]:
        """Draft tokens after the cached ones and `token` (up to `room`), counted in n_drafted; none
        while the pacing rests (where drafts have not paid for themselves)."""
        if drafter is None or room <= 0 or not self._pacing.may_draft():
            return []
        room = min(room, self._pacing.limit())
        ids = np.asarray([*self._cached, token], dtype=np.intc)
        # a LlamaDraftModel takes keywords (llama-cpp-python's base class); a plain callable the ids alone
        proposal = drafter(ids, max_tokens=room) if isinstance(drafter, LlamaDraftModel) else drafter(ids)
        draft = [int(t) for t in proposal[:room] if 0 <= int(t) < self.model.n_vocab]
        self.n_drafted += len(draft)
        return draft
