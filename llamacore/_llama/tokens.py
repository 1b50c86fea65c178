"""What a `Llama`'s context holds and llama-cpp-python's token-level API on it: `n_tokens`,
`input_ids`, `scores`, `eval`, `sample`, `generate`, states and the prompt cache.

`TokenLevel` is a part of `Llama` (llamacore.llama), kept apart because it is a concept of its
own: sequence 0 of the context and the tokens whose KV entries it holds (`_cached`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from llamacore._core import Batch
from llamacore._llama.host import LlamaHost
from llamacore.generation.kv_reuse import AdapterKey, reusable_prefix
from llamacore.generation.processors import LogitsProcessor, StoppingCriteria, apply_processor
from llamacore.generation.sampling import SamplingParams, check_tfs_z
from llamacore.llama_grammar import LlamaGrammar
from llamacore.vision.prompt import MediaTokens, decode_image, image_boundary, images_of

_MIXED: AdapterKey = (("<entries computed under different adapter sets>", 0.0),)   # matches no adapter set


class TokenLevel(LlamaHost):
    """Sequence 0 of the context, the tokens it holds, and the token-level methods on it."""

    # -- what the context holds (llama-cpp-python's view) -------------------------------------

    @property
    def n_tokens(self) -> int:
        """Tokens evaluated into the context (sequence 0). Setting a smaller value forgets the rest
        (their KV entries are removed before the next evaluation)."""
        return len(self._cached)

    @n_tokens.setter
    def n_tokens(self, value: int) -> None:
        if not 0 <= value <= len(self._cached):
            raise ValueError(f"n_tokens={value}: the context holds {len(self._cached)} tokens")
        del self._cached[value:]

    @property
    def input_ids(self) -> npt.NDArray[np.intc]:
        """An intc array of n_ctx entries whose first `n_tokens` are the evaluated tokens (a copy; an
        image's positions hold -1, llama.cpp's LLAMA_TOKEN_NULL)."""
        ids = np.zeros(self.ctx.n_ctx, dtype=np.intc)
        ids[:len(self._cached)] = [t if t >= 0 else -1 for t in self._cached]   # image rows: LLAMA_TOKEN_NULL
        return ids

    @property
    def scores(self) -> npt.NDArray[np.single]:
        """float32 (n_ctx, n_vocab): with `logits_all=True`, row i holds the logits after token i of
        `input_ids` (the first `n_tokens` rows are current). Without it, llama-cpp-python's unused
        (n_batch, n_vocab) buffer of zeros: logits stay in llama.cpp (`ctx.logits()`)."""
        if self._scores is None:
            self._scores = np.zeros((self.ctx.n_batch, self.model.n_vocab), dtype=np.single)
        return self._scores

    @property
    def eval_tokens(self) -> deque[int]:
        return deque(self._cached, maxlen=self.ctx.n_ctx)

    @property
    def eval_logits(self) -> deque[list[float]]:
        return deque(self.scores[:self.n_tokens, :].tolist(), maxlen=self.ctx.n_ctx if self.logits_all else 1)

    # -- evaluation (llama-cpp-python's token-level API) -------------------------------------

    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate `tokens` after the `n_tokens` the context holds (llama-cpp-python's `eval`: no
        prefix matching; `reset()` or setting `n_tokens` starts over). With `logits_all`, each
        token's logits row lands in `scores`."""
        tokens = [int(t) for t in tokens]
        if len(self._cached) + len(tokens) > self.ctx.n_ctx:
            raise ValueError(f"Requested tokens ({len(self._cached) + len(tokens)}) exceed context window "
                             f"of {self.ctx.n_ctx}")
        self._append(tokens)

    def _append(self, tokens: list[int], all_logits: bool = False) -> None:
        """Decode `tokens` after the cached ones (in n_batch pieces); logits for the last token, or for
        every token with `all_logits` or `logits_all` (the last piece's rows stay readable)."""
        if not tokens:
            return
        key = self._adapter_key()
        if not self._cached:
            self._cache_key = key
        elif key != self._cache_key:
            self._cache_key = _MIXED            # the next prefix match starts over
        ctx, batch, step = self.ctx, self._batch, self.ctx.n_batch
        if not ctx.kv_remove(0, len(self._cached), -1):     # entries past n_tokens (n_tokens was lowered)
            ctx.kv_clear()
            tokens, self._cached = self._cached + tokens, []
        rows = all_logits or self.logits_all
        for start in range(0, len(tokens), step):
            chunk = tokens[start:start + step]
            pos = len(self._cached)
            batch.clear()
            batch.add_sequence(chunk, pos, 0, True, rows)
            ctx.decode(batch)
            if self.logits_all:
                self.scores[pos:pos + len(chunk)] = ctx.all_logits()
            self._cached.extend(chunk)

    def _eval(self, tokens: list[int], logits_all: bool = False) -> list:
        """Bring sequence 0 to exactly `tokens`, reusing the cached prefix when valid.

        Returns the logits of every token evaluated when `logits_all`, else [].
        """
        if not tokens:
            raise ValueError("prompt is empty")
        if len(tokens) > self.ctx.n_ctx:
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {self.ctx.n_ctx}")
        key = self._adapter_key()
        if key != self._cache_key:
            self.ctx.kv_clear()
            self._cached = []
            self._cache_key = key
        images = images_of(tokens)
        if images and (logits_all or self.logits_all):
            raise ValueError("logits_all is not available for prompts with images")
        keep = 0 if logits_all else image_boundary(tokens, reusable_prefix(self._cached, tokens))
        if keep < len(self._cached) and not self.ctx.kv_remove(0, keep, -1):
            self.ctx.kv_clear()
            keep = 0
        del self._cached[keep:]
        if images:
            self._eval_with_images(tokens, keep, images)
            return []
        rows: list = []
        batch, step, want_rows = self._batch, self.ctx.n_batch, logits_all or self.logits_all
        for start in range(keep, len(tokens), step):
            chunk = tokens[start:start + step]
            batch.clear()
            batch.add_sequence(chunk, start, 0, True, want_rows)
            self.ctx.decode(batch)
            self._cached.extend(chunk)
            if want_rows:
                block = self.ctx.all_logits()
                if self.logits_all:
                    self.scores[start:start + len(chunk)] = block
                if logits_all:
                    rows.extend(block.copy())
        return rows

    def _eval_with_images(self, tokens: list[int], start: int, images: dict[int, Any]) -> None:
        """Decode tokens[start:]: text in n_batch pieces, each image from its encoding."""
        assert self.projector is not None
        if self._embd_batch is None:
            self._embd_batch = Batch(self.ctx.n_batch, embd=self.projector.n_embd)
        batch, step, pos = self._batch, self.ctx.n_batch, start
        while pos < len(tokens):
            chunk = images.get(pos)
            if chunk is not None:
                decode_image(self.ctx, self._embd_batch, self.projector, chunk, pos, 0,
                             logits_last=pos + chunk.n_tokens == len(tokens))
                end = pos + chunk.n_tokens
            else:
                end = min(len(tokens), pos + step, min((i for i in images if i > pos), default=len(tokens)))
                batch.clear()
                batch.add_sequence(tokens[pos:end], pos, 0, True)
                self.ctx.decode(batch)
            self._cached.extend(tokens[pos:end])
            pos = end

    def _refresh_logits(self) -> None:
        """Make the last token's logits current: a loaded state holds none, so decode it again."""
        if self.ctx.n_outputs == 0 and self._cached:
            last = self._cached.pop()
            self._append([last])

    def _lcp_sampling(self, *, top_k: int, top_p: float, min_p: float, typical_p: float, temp: float,
                      repeat_penalty: float, frequency_penalty: float, presence_penalty: float, tfs_z: float,
                      mirostat_mode: int, mirostat_tau: float, mirostat_eta: float, penalize_nl: bool,
                      grammar: str | LlamaGrammar | None) -> SamplingParams:
        """llama-cpp-python's sampling arguments (of `sample` and `generate`) as checked SamplingParams."""
        check_tfs_z(tfs_z)
        if not penalize_nl:
            raise ValueError("penalize_nl=False is not supported: llama.cpp's penalties sampler no longer exempts "
                             "the newline token (llama-cpp-python ignores it); only True is accepted")
        if temp < 0:       # llama-cpp-python: sample from the whole distribution, untruncated
            temp, top_k, top_p, min_p, typical_p = 1.0, 0, 1.0, 0.0, 1.0
        return self._sampling_params(
            temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
            repeat_penalty=repeat_penalty, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, grammar=grammar)

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
               temp: float = 0.80, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
               presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
               mirostat_eta: float = 0.1, mirostat_tau: float = 5.0, penalize_nl: bool = True,
               logits_processor: LogitsProcessor | None = None, grammar: LlamaGrammar | None = None,
               idx: int | None = None) -> int:
        """A token sampled from the logits after token `idx` of `input_ids` (default: the last one
        evaluated), with the model's seed (`set_seed`). temp 0 is greedy; temp < 0 samples from the
        whole distribution. The sampler (and any grammar) starts fresh on every call."""
        if not self._cached:
            raise ValueError("nothing has been evaluated yet: call eval() first")
        if idx is None or idx == len(self._cached) - 1:
            self._refresh_logits()
        sampler = self._lcp_sampling(
            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp, repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, tfs_z=tfs_z,
            mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            penalize_nl=penalize_nl, grammar=grammar).build(self.model)
        ridx = -1 if idx is None else idx - len(self._cached)
        if logits_processor is not None:
            apply_processor(logits_processor, self._cached[:len(self._cached) + ridx + 1], self.ctx.logits(ridx))
        return sampler.sample(self.ctx, ridx)

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor: LogitsProcessor | None = None,
                 stopping_criteria: StoppingCriteria | None = None, grammar: LlamaGrammar | None = None,
                 ) -> Generator[int, Sequence[int] | None, None]:
        """llama-cpp-python's token generator: yields sampled tokens for as long as the caller
        iterates (EOS included: stopping is the caller's choice), ending only when `stopping_criteria`
        says so (before yielding that token) or the context is full.

        With `reset` (the default) the context first holds exactly `tokens`, reusing the longest
        prefix it already holds; with `reset=False`, `tokens` are evaluated after what it holds.
        Each token is decoded before the next is sampled. The value sent into the generator (if
        any) is a list of tokens to evaluate after the yielded one: the tokens sampled next are
        compared with them, and from the first that differs they are dropped (llama-cpp-python's
        draft-verification protocol; they must fit n_batch).
        """
        sampler = self._lcp_sampling(
            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp, repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, tfs_z=tfs_z,
            mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            penalize_nl=penalize_nl, grammar=grammar).build(self.model)
        prompt = tokens if isinstance(tokens, MediaTokens) else [int(t) for t in tokens]
        if reset:
            self._eval(prompt)             # checks the prompt (empty, too long) before the first token
        else:
            self.eval(prompt)
            if not self._cached:
                raise ValueError("nothing to sample from: give tokens, or evaluate some first")
            self._refresh_logits()
        return self._token_stream(sampler, logits_processor, stopping_criteria)

    def _token_stream(self, sampler: Any, logits_processor: LogitsProcessor | None,
                      stopping_criteria: StoppingCriteria | None) -> Generator[int, Sequence[int] | None, None]:
        ctx, n_ctx = self.ctx, self.ctx.n_ctx
        sample_idx = len(self._cached) - 1              # the position whose logits the next token comes from
        while True:
            pending: list[int] = []
            while sample_idx < len(self._cached):
                ridx = sample_idx - len(self._cached)
                logits = ctx.logits(ridx)
                if logits_processor is not None:
                    apply_processor(logits_processor, self._cached[:sample_idx + 1], logits)
                token = sampler.sample(ctx, ridx)
                sample_idx += 1
                if stopping_criteria is not None and stopping_criteria(
                        np.asarray(self._cached[:sample_idx], dtype=np.intc), logits):
                    return
                sent = yield token
                pending = [token, *(int(t) for t in sent or ())]
                if sample_idx < len(self._cached) and token != self._cached[sample_idx]:
                    self.n_tokens = sample_idx      # a sent token was not confirmed: drop it and the rest
                    break
            if len(pending) > ctx.n_batch:
                raise ValueError(f"{len(pending) - 1} tokens were sent to the generator; at most "
                                 f"{ctx.n_batch - 1} (n_batch - 1) fit")
            if len(self._cached) + len(pending) > n_ctx:
                return
            self._append(pending, all_logits=len(pending) > 1)
