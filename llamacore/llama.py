"""`Llama`: the high-level API, method-compatible with llama-cpp-python's `Llama`.

One model, one context, one sequence. Sampling runs in llama.cpp's C sampler chain; Python
only moves token ids, so per-token overhead stays small. The KV cache of the previous call is
reused for the longest common token prefix, but only when the LoRA adapters and scales it was
computed with are the ones active now.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from llamacore import chat, completion, embedding
from llamacore._core import Batch, Context, LoraAdapter, Model, Projector, set_verbose
from llamacore.embedding import sequences_per_decode
from llamacore.events import Finished, TextEvent
from llamacore.llama_grammar import LlamaGrammar, grammar_text
from llamacore.media import MediaPolicy
from llamacore.multimodal import MediaTokens, decode_image, image_boundary, images_of
from llamacore.prefix import AdapterKey, adapter_key, reusable_prefix
from llamacore.processors import LogitsProcessor, StoppingCriteria, apply_processor
from llamacore.responses import (
    ChoiceOutput,
    CreateCompletionResponse,
    CreateEmbeddingResponse,
    Envelope,
    completion_logprobs,
    embedding_response,
    usage,
)
from llamacore.sampling import SamplingParams, check_tfs_z


class Llama:
    """Load a GGUF model (plus any LoRA adapters) and run completions, chat and embeddings."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_gpu_layers: int | None = None,
        split_mode: str = "layer",
        main_gpu: int = 0,
        tensor_split: list[float] | None = None,
        vocab_only: bool = False,
        use_mmap: bool = True,
        use_mlock: bool = False,
        kv_overrides: dict[str, bool | int | float | str] | None = None,
        seed: int | None = None,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        rope_freq_base: float = 0.0,
        rope_freq_scale: float = 0.0,
        embedding: bool = False,
        pooling_type: int | str = "unspecified",
        flash_attn: bool | str = "auto",
        type_k: str = "f16",
        type_v: str = "f16",
        offload_kqv: bool = True,
        lora_adapters: dict[str, float] | None = None,
        lora_path: str | None = None,
        lora_scale: float = 1.0,
        chat_format: str | None = None,
        chat_template: str | None = None,
        verbose: bool = False,
        rpc_servers: list[str] | str | None = None,
        clip_model_path: str | os.PathLike | None = None,
        chat_handler: Any = None,
        media_policy: MediaPolicy | None = None,
    ) -> None:
        """`rpc_servers` ("host:port", ... or llama-server's comma-separated string): offload to
        those ggml RPC workers (`llamaserve rpc-worker`); `n_gpu_layers` None is 0, or every layer
        with `rpc_servers`.

        `clip_model_path` (or llama-cpp-python's `chat_handler=Llava15ChatHandler(clip_model_path=...)`)
        loads a vision projector: chat messages may then hold `image_url` parts. `media_policy` says
        where images may come from: data: URIs always; http(s) and local files only as it allows.
        """
        set_verbose(verbose)
        self.model_path = os.fspath(model_path)
        self.verbose = verbose
        self.seed = seed
        self.model = Model(self.model_path, n_gpu_layers=n_gpu_layers, use_mmap=use_mmap, use_mlock=use_mlock,
                           vocab_only=vocab_only, main_gpu=main_gpu, tensor_split=tensor_split,
                           kv_overrides=kv_overrides, split_mode=split_mode, rpc_servers=rpc_servers)
        self.embedding = embedding
        if n_ctx == 0:
            n_ctx = self.model.n_ctx_train
        if embedding:
            n_ubatch = n_batch = max(n_batch, n_ubatch)   # non-causal models need a whole input per ubatch
        self.ctx = Context(
            self.model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
            n_seq_max=sequences_per_decode(n_batch) if embedding else 1, kv_unified=embedding,
            n_threads=n_threads, n_threads_batch=n_threads_batch, embeddings=embedding,
            pooling=pooling_type, flash_attn=flash_attn, type_k=type_k, type_v=type_v,
            offload_kqv=offload_kqv, rope_freq_base=rope_freq_base, rope_freq_scale=rope_freq_scale,
        )
        self._batch = Batch(self.ctx.n_batch)
        self.embed_decodes = 0                   # decode (or encode) calls embeddings made, for metrics
        self._cached: list[int] = []             # tokens whose KV entries sit in sequence 0
        self._cache_key: tuple = ()             # adapter set those entries were computed with
        self._adapters: dict[str, LoraAdapter] = {}
        self._scales: dict[str, float] = {}
        adapters = dict(lora_adapters or {})
        if lora_path:
            adapters[lora_path] = lora_scale
        for path, scale in adapters.items():
            self._adapters[os.fspath(path)] = LoraAdapter(self.model, path)
            self._scales[os.fspath(path)] = float(scale)
        self._apply_adapters()
        handler_template = getattr(chat_handler, "chat_template", None)
        self.chat_template = chat.resolve(self.model, chat_format, chat_template or handler_template)
        clip_model_path = clip_model_path or getattr(chat_handler, "clip_model_path", None)
        self.projector = Projector(self.model, clip_model_path, n_threads=n_threads) if clip_model_path else None
        if self.projector is not None and self.projector.uses_mrope:
            raise ValueError(f"{clip_model_path}: projectors with M-RoPE image positions (Qwen-VL) are not supported yet")
        self.media_policy = media_policy or MediaPolicy()
        self._embd_batch: Batch | None = None

    # -- model facts (methods, as in llama-cpp-python) ---------------------------------------

    def n_ctx(self) -> int:
        return self.ctx.n_ctx

    def n_vocab(self) -> int:
        return self.model.n_vocab

    def n_embd(self) -> int:
        return self.model.n_embd

    def token_bos(self) -> int:
        return self.model.token_bos

    def token_eos(self) -> int:
        return self.model.token_eos

    @property
    def metadata(self) -> dict[str, str]:
        return self.model.metadata

    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self.model.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        """Bytes of `tokens`; with `prev_tokens`, only the bytes the new tokens add."""
        if prev_tokens:
            whole = self.model.detokenize(list(prev_tokens) + list(tokens), False, special)
            return whole[len(self.model.detokenize(list(prev_tokens), False, special)):]
        return self.model.detokenize(list(tokens), False, special)

    # -- LoRA --------------------------------------------------------------------------------

    @property
    def lora_adapters(self) -> dict[str, float]:
        """Loaded adapters and their current scales (0 = loaded but inactive)."""
        return dict(self._scales)

    def set_lora_adapter_scale(self, path: str | os.PathLike, scale: float) -> None:
        """Change one adapter's scale in place; nothing is reloaded. Unknown paths raise KeyError."""
        key = os.fspath(path)
        if key not in self._adapters:
            raise KeyError(f"LoRA adapter {key} is not loaded; loaded: {sorted(self._adapters)}")
        self._scales[key] = float(scale)
        self._apply_adapters()

    def _apply_adapters(self) -> None:
        active = {self._adapters[p]: s for p, s in self._scales.items() if s != 0.0}
        self.ctx.set_adapters(active)

    def _adapter_key(self) -> AdapterKey:
        return adapter_key(self._scales)

    # -- state -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the cached prompt (the next call evaluates from scratch)."""
        self.ctx.kv_clear()
        self._cached = []

    def save_state(self) -> dict[str, Any]:
        return {"state": self.ctx.save_state(), "tokens": list(self._cached), "key": self._cache_key}

    def load_state(self, state: dict[str, Any]) -> None:
        self.ctx.load_state(state["state"])
        self._cached = list(state["tokens"])
        self._cache_key = tuple(state["key"])

    # -- evaluation --------------------------------------------------------------------------

    def eval(self, tokens: list[int], logits_all: bool = False) -> list:
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
        if images and logits_all:
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
        batch, step = self._batch, self.ctx.n_batch
        for start in range(keep, len(tokens), step):
            chunk = tokens[start:start + step]
            batch.clear()
            batch.add_sequence(chunk, start, 0, True, logits_all)
            self.ctx.decode(batch)
            self._cached.extend(chunk)
            if logits_all:
                rows.extend(self.ctx.all_logits().copy())
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

    def generate(self, tokens: list[int], sampling: SamplingParams, *, max_tokens: int,
                 ignore_eos: bool = False, logits_processor: LogitsProcessor | None = None) -> Iterator[int]:
        """Yield sampled tokens until EOS (unless ignored), `max_tokens` or a full context.

        The caller may stop iterating at any time; the cache then holds the prompt plus every
        token that was decoded. A `logits_processor` sees the tokens so far and the logits before
        each token is sampled, and what it returns is sampled from (llamacore.processors).
        """
        sampler = sampling.build(self.model)
        self.eval(tokens)
        ctx, batch, model, n_ctx = self.ctx, self._batch, self.model, self.ctx.n_ctx
        pos = len(tokens)
        for _ in range(max_tokens):
            if logits_processor is not None:
                apply_processor(logits_processor, self._cached, ctx.logits(-1))
            token = sampler.sample(ctx)
            yield token
            if (not ignore_eos and model.is_eog(token)) or pos >= n_ctx:
                return
            batch.clear()
            batch.add(token, pos, 0, True)
            ctx.decode(batch)
            self._cached.append(token)
            pos += 1

    # -- completions -------------------------------------------------------------------------

    def create_completion(self, prompt: str | list[int], suffix: str | None = None, max_tokens: int | None = 16,
                          temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                          typical_p: float = 1.0, logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0, top_k: int = 40,
                          stream: bool = False, seed: int | None = None, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: str | None = None,
                          logit_bias: dict[int, float] | None = None, grammar: str | LlamaGrammar | None = None,
                          response_format: dict | None = None, ignore_eos: bool = False, tfs_z: float = 1.0,
                          logits_processor: LogitsProcessor | None = None,
                          stopping_criteria: StoppingCriteria | None = None,
                          ) -> CreateCompletionResponse | Iterator[CreateCompletionResponse]:
        """OpenAI-style text completion; `stream=True` returns an iterator of chunks. `logits_processor`
        and `stopping_criteria` are llama-cpp-python's hooks (llamacore.processors)."""
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
                                                   stopping_criteria=stopping_criteria)
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
        """Checked sampling parameters; the model's seed when the call sets none."""
        sampling = SamplingParams(
            seed=self.seed if seed is None else seed,
            logit_bias={int(k): float(v) for k, v in (logit_bias or {}).items()},
            grammar=grammar_text(grammar) or chat.grammar_for(response_format), **fields)
        sampling.validate()
        return sampling

    def _completion_events(self, prompt: str | list[int], sampling: SamplingParams, *, suffix: str | None = None,
                           max_tokens: int | None = 16, logprobs: int | None = None, echo: bool = False,
                           stop: str | list[str] | None = None, ignore_eos: bool = False,
                           logits_processor: LogitsProcessor | None = None,
                           stopping_criteria: StoppingCriteria | None = None) -> tuple[Iterator[TextEvent], int]:
        """Checked request -> (its Text events then one Finished, number of prompt tokens).

        The prompt is checked before this returns, so a bad request raises even when the caller streams.
        """
        tokens = self._prompt_tokens(prompt, suffix)
        if len(tokens) > self.ctx.n_ctx:
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {self.ctx.n_ctx}")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        echo_text = None
        if echo:
            echo_text = prompt if isinstance(prompt, str) else self.model.detokenize(tokens, True).decode("utf-8", "replace")
        events = completion.text_events(self, tokens, sampling, max_tokens, stops, logprobs, echo_text, ignore_eos,
                                        logits_processor, stopping_criteria)
        return events, len(tokens)

    __call__ = create_completion

    def _prompt_tokens(self, prompt: str | list[int], suffix: str | None) -> list[int]:
        if suffix:
            raise ValueError("suffix (fill-in-the-middle) is not supported by this model")
        if isinstance(prompt, MediaTokens):       # a chat prompt with images, checked when built
            return prompt
        if isinstance(prompt, (list, tuple)):
            tokens = [int(t) for t in prompt]
            for t in tokens:
                if not 0 <= t < self.model.n_vocab:
                    raise ValueError(f"prompt token {t} is outside the vocabulary (0..{self.model.n_vocab - 1})")
            return tokens or [self.model.token_bos]
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

    # -- chat and embeddings -----------------------------------------------------------------

    def create_chat_completion(self, messages: list[dict[str, Any]], **kwargs: Any):
        """OpenAI-style chat completion rendered through the model's chat template."""
        return chat.create_chat_completion(self, messages, **kwargs)

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
        return embedding.embed_all(self, input, normalize=normalize, truncate=truncate)


__all__ = ["Llama"]
