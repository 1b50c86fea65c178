"""`Llama`: the high-level API, method-compatible with llama-cpp-python's `Llama`.

One model, one context, one sequence. Sampling runs in llama.cpp's C sampler chain; Python
only moves token ids, so per-token overhead stays small. The KV cache of the previous call is
reused for the longest common token prefix, but only when the LoRA adapters and scales it was
computed with are the ones active now.

The constructor and the public methods take llama-cpp-python 0.3.36's parameters, by the same
names, order and defaults (tests/llamacore/llama/test_llama_signature.py lists and justifies every difference);
a parameter is honoured or refused with ValueError, never silently dropped.
"""

from __future__ import annotations

import difflib
import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from llamacore import llama_cpp as lc
from llamacore._core import Batch, Context, LoraAdapter, Model, set_verbose
from llamacore._llama.chat import ChatMethods
from llamacore._llama.completion import Completions
from llamacore._llama.drafts import draft_source
from llamacore._llama.embedding import Embeddings, sequences_per_decode
from llamacore._llama.generation import Generation
from llamacore._llama.options import check_unsupported, context_options, numa_strategy, option_name
from llamacore._llama.state import CacheAndState
from llamacore._llama.tokens import TokenLevel
from llamacore._llama.vision_handler import is_vision_handler
from llamacore.chat import prompt as chat
from llamacore.generation.draft_pacing import DraftPacing
from llamacore.generation.kv_reuse import AdapterKey, adapter_key
from llamacore.gguf.hub import download
from llamacore.llama_cache import BaseLlamaCache, longest_token_prefix
from llamacore.llama_tokenizer import LlamaTokenizer
from llamacore.vision.media import MediaPolicy
from llamacore.vision.prompt import load_projector

log = logging.getLogger(__name__)


class Llama(TokenLevel, Generation, CacheAndState, Completions, ChatMethods, Embeddings):
    """Load a GGUF model (plus any LoRA adapters) and run completions, chat and embeddings.

    Its parts by concept: TokenLevel (llamacore._llama.tokens: the context's tokens, eval/sample/
    generate), Generation (llamacore._llama.generation: the completions' token loop and its drafts),
    CacheAndState (llamacore._llama.state: states and the prompt cache), Completions
    (llamacore._llama.completion), ChatMethods (llamacore._llama.chat), Embeddings
    (llamacore._llama.embedding). What they share is declared once, in llamacore._llama.host.
    """

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        # Model params
        n_gpu_layers: int | None = None,
        split_mode: int | str = lc.LLAMA_SPLIT_MODE_LAYER,
        main_gpu: int = 0,
        tensor_split: list[float] | None = None,
        vocab_only: bool = False,
        use_mmap: bool = True,
        use_mlock: bool = False,
        kv_overrides: dict[str, bool | int | float | str] | None = None,
        # Context params
        seed: int | None = lc.LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        rope_scaling_type: int | None = lc.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
        pooling_type: int | str = lc.LLAMA_POOLING_TYPE_UNSPECIFIED,
        attention_type: int | str = lc.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
        rope_freq_base: float = 0.0,
        rope_freq_scale: float = 0.0,
        yarn_ext_factor: float = -1.0,
        yarn_attn_factor: float = 1.0,
        yarn_beta_fast: float = 32.0,
        yarn_beta_slow: float = 1.0,
        yarn_orig_ctx: int = 0,
        logits_all: bool = False,
        embedding: bool = False,
        offload_kqv: bool = True,
        flash_attn: bool | str = "auto",
        op_offload: bool | None = None,
        swa_full: bool | None = None,
        # Sampling params
        no_perf: bool = False,
        last_n_tokens_size: int = 64,
        # LoRA params
        lora_base: str | None = None,
        lora_scale: float = 1.0,
        lora_path: str | None = None,
        # Backend params
        numa: bool | int = False,
        # Chat format params
        chat_format: str | None = None,
        chat_handler: Any = None,
        # Speculative decoding
        draft_model: Any = None,
        # Tokenizer override
        tokenizer: Any = None,
        # KV cache quantization
        type_k: int | str | None = None,
        type_v: int | str | None = None,
        # Misc
        spm_infill: bool = False,
        verbose: bool = False,
        # llamacore's additions
        lora_adapters: dict[str, float] | None = None,
        chat_template: str | None = None,
        rpc_servers: list[str] | str | None = None,
        clip_model_path: str | os.PathLike | None = None,
        media_policy: MediaPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        """llama-cpp-python's parameters, honoured or refused with ValueError: integer options
        (`split_mode`, `pooling_type`, `attention_type`, `type_k`/`type_v`) take llama.cpp's values
        (llamacore.LLAMA_SPLIT_MODE_LAYER, GGML_TYPE_Q8_0, ...) or llamacore's names ("layer", "q8_0").
        RoPE scaling, YaRN (llama-cpp-python's values by default), `op_offload`, `swa_full` and `numa`
        are passed to llama.cpp; `lora_base` accepts only None; an unknown keyword
        is accepted with a UserWarning that names it (and a close match), as llama-cpp-python's `**kwargs` accepts it.

        `lora_adapters` ({path: scale}) loads several adapters (scale 0 = loaded, inactive; see
        `set_lora_adapter_scale`), besides llama-cpp-python's `lora_path`/`lora_scale`.

        `rpc_servers` ("host:port", ... or llama-server's comma-separated string): offload to
        those ggml RPC workers (`llamaserve rpc-worker`); `n_gpu_layers` None is 0, or every layer
        with `rpc_servers`.

        `clip_model_path` (or llama-cpp-python's `chat_handler=Llava15ChatHandler(clip_model_path=...)`)
        loads a vision projector: chat messages may then hold `image_url` parts. `media_policy` says
        where images may come from: data: URIs always; http(s) and local files only as it allows.
        Any other `chat_handler` is llama-cpp-python's callable `(llama=, messages=, ...) -> response`
        that `create_chat_completion` hands the request to.
        """
        init_args = dict(locals())
        self._init_args = {k: v for k, v in init_args.items() if k not in ("self", "kwargs")}
        for name in sorted(kwargs):   # llama-cpp-python's Llama takes **kwargs too; a typo must still show
            close = difflib.get_close_matches(name, self._init_args, n=1)
            warnings.warn(f"Llama(): unknown keyword argument {name!r} ignored"
                          + (f" (did you mean {close[0]!r}?)" if close else ""), UserWarning, stacklevel=2)
        check_unsupported(lora_base=lora_base)
        split_name = option_name("split_mode", split_mode, lc.SPLIT_MODE_NAMES)
        pooling_name = option_name("pooling_type", pooling_type, lc.POOLING_TYPE_NAMES)
        attention_name = option_name("attention_type", attention_type, lc.ATTENTION_TYPE_NAMES)
        kv_types = [option_name(name, "f16" if t is None else t, lc.KV_CACHE_TYPE_NAMES)
                    for name, t in (("type_k", type_k), ("type_v", type_v))]
        if isinstance(last_n_tokens_size, bool) or not isinstance(last_n_tokens_size, int) or last_n_tokens_size < -1:
            raise ValueError(f"last_n_tokens_size={last_n_tokens_size!r} must be an int >= -1 "
                             "(-1 = the whole context, 0 = no repetition penalties)")
        if tokenizer is not None and not (callable(getattr(tokenizer, "tokenize", None))
                                          and callable(getattr(tokenizer, "detokenize", None))):
            raise ValueError("tokenizer must have tokenize(text, add_bos, special) and "
                             "detokenize(tokens, prev_tokens, special) (llama-cpp-python's BaseLlamaTokenizer)")
        vision_handler = chat_handler is not None and is_vision_handler(chat_handler)
        if chat_handler is not None and not vision_handler and not callable(chat_handler):
            raise ValueError("chat_handler must be callable (llama=, messages=, ...) -> response, "
                             "or a vision handler (Llava15ChatHandler, MTMDChatHandler)")
        self.numa = numa_strategy(numa)
        set_verbose(verbose)
        self.model_path = os.fspath(model_path)
        self.verbose = verbose
        self.seed = seed
        self.tensor_split = tensor_split
        self.kv_overrides = kv_overrides
        self._ctx: Context | None = None
        self._model: Model | None = Model(
            self.model_path, n_gpu_layers=n_gpu_layers, use_mmap=use_mmap, use_mlock=use_mlock,
            vocab_only=vocab_only, main_gpu=main_gpu, tensor_split=tensor_split, kv_overrides=kv_overrides,
            split_mode=split_name, rpc_servers=rpc_servers)
        self.embedding = embedding
        if n_ctx == 0:
            n_ctx = self.model.n_ctx_train
        if embedding:
            n_ubatch = n_batch = max(n_batch, n_ubatch)   # non-causal models need a whole input per ubatch
        self._ctx = Context(
            self.model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
            n_seq_max=sequences_per_decode(n_batch) if embedding else 1, kv_unified=embedding,
            n_threads=n_threads, n_threads_batch=n_threads_batch, embeddings=embedding,
            pooling=pooling_name, attention=attention_name, flash_attn=flash_attn, type_k=kv_types[0],
            type_v=kv_types[1], offload_kqv=offload_kqv, rope_freq_base=rope_freq_base,
            rope_freq_scale=rope_freq_scale, no_perf=no_perf,
            **context_options(rope_scaling_type=rope_scaling_type, yarn_ext_factor=yarn_ext_factor,
                              yarn_attn_factor=yarn_attn_factor, yarn_beta_fast=yarn_beta_fast,
                              yarn_beta_slow=yarn_beta_slow, yarn_orig_ctx=yarn_orig_ctx, op_offload=op_offload,
                              swa_full=swa_full),
        )
        self._is_recurrent = self.model.is_recurrent        # llama-cpp-python's names for the model's kind
        self._is_hybrid = self.model.is_hybrid
        self.n_batch = self.ctx.n_batch
        self.n_threads = self.ctx.n_threads
        self.n_threads_batch = self.ctx.n_threads_batch
        self._batch = Batch(self.ctx.n_batch)
        self.embed_decodes = 0                   # decode (or encode) calls embeddings made, for metrics
        self._cached = []             # tokens whose KV entries sit in sequence 0
        self._cache_key: tuple = ()             # adapter set those entries were computed with
        self.logits_all = logits_all
        self._scores = (
            np.zeros((self.ctx.n_ctx, self.model.n_vocab), dtype=np.single) if logits_all else None)
        self.last_n_tokens_size = last_n_tokens_size
        self.cache: BaseLlamaCache | None = None
        self.lora_base = lora_base
        self.lora_scale = lora_scale
        self.lora_path = lora_path
        self.spm_infill = spm_infill             # only shapes fill-in-the-middle prompts, which are refused
        self.draft_model = draft_model
        self._drafter = draft_source(draft_model, self)
        self.n_drafted = 0                       # draft tokens decoded, and how many of them were kept
        self.n_accepted = 0
        self._pacing = DraftPacing(most=64)      # draft lengths, and rests where drafting does not pay
        self._adapters: dict[str, LoraAdapter] = {}
        self._scales: dict[str, float] = {}
        adapters = dict(lora_adapters or {})
        if lora_path:
            adapters[lora_path] = lora_scale
        for path, scale in adapters.items():
            self._adapters[os.fspath(path)] = LoraAdapter(self.model, path)
            self._scales[os.fspath(path)] = float(scale)
        self._apply_adapters()
        self.tokenizer_: Any = tokenizer if tokenizer is not None else LlamaTokenizer(self)
        self._custom_tokenizer = tokenizer is not None
        self.chat_format = chat_format
        self.chat_handler = chat_handler
        handler_template = getattr(chat_handler, "chat_template", None) if vision_handler else None
        self.chat_template = chat.resolve(self.model, chat_format, chat_template or handler_template)
        clip_model_path = clip_model_path or (getattr(chat_handler, "clip_model_path", None)
                                              if vision_handler else None)
        self.projector = load_projector(self.model, clip_model_path, n_threads) if clip_model_path else None
        self.media_policy = media_policy or MediaPolicy()
        self._embd_batch = None

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def ctx(self) -> Context:
        """The llama.cpp context (llamacore.Context); RuntimeError once `close()` freed it."""
        if self._ctx is None:
            raise RuntimeError("this Llama was closed")
        return self._ctx

    @property
    def model(self) -> Model:
        """The loaded model (llamacore.Model); RuntimeError once `close()` freed it."""
        if self._model is None:
            raise RuntimeError("this Llama was closed")
        return self._model

    def close(self) -> None:
        """Free the context, adapters, projector and model now (they are freed with the object otherwise).
        Calling it again does nothing; using the Llama afterwards raises RuntimeError."""
        self._ctx = None
        self._embd_batch = None
        self.projector = None
        self._adapters = {}
        self.tokenizer_ = None
        self._model = None
        self._cached = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        """llama-cpp-python's pickling: the constructor's arguments (a copy loads the model again)."""
        return {**self._init_args, "seed": self.seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

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

    def token_nl(self) -> int:
        return self.model.token_nl

    def pooling_type(self) -> int:
        """The context's pooling, as llama.cpp's LLAMA_POOLING_TYPE_* value (as llama-cpp-python)."""
        pooling = self.ctx.pooling
        return next(code for code, name in lc.POOLING_TYPE_NAMES.items() if name == pooling)

    @property
    def metadata(self) -> dict[str, str]:
        return self.model.metadata

    def tokenizer(self) -> LlamaTokenizer:
        """llama-cpp-python's tokenizer object for this model's vocabulary."""
        return LlamaTokenizer(self)

    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of `text`, by the constructor's `tokenizer` (the model's vocabulary by default)."""
        if self.tokenizer_ is None:
            raise RuntimeError("this Llama was closed")
        return list(self.tokenizer_.tokenize(text.encode("utf-8") if isinstance(text, str) else text,
                                             add_bos, special))

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        """Bytes of `tokens`, by the constructor's `tokenizer` (as llama-cpp-python's: the model's own
        vocabulary ignores `prev_tokens`; a LlamaHFTokenizer gives the bytes added after them)."""
        if self.tokenizer_ is None:
            raise RuntimeError("this Llama was closed")
        return self.tokenizer_.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    @staticmethod
    def logits_to_logprobs(logits: npt.NDArray[np.single] | list, axis: int = -1) -> npt.NDArray[np.single]:
        """log_softmax along `axis` (llama-cpp-python's; infinite maxima are treated as 0)."""
        logits_maxs: Any = np.amax(logits, axis=axis, keepdims=True)
        if logits_maxs.ndim > 0:
            logits_maxs[~np.isfinite(logits_maxs)] = 0
        elif not np.isfinite(logits_maxs):
            logits_maxs = 0
        subtract_maxs = np.subtract(logits, logits_maxs, dtype=np.single)
        exp = np.exp(subtract_maxs)
        with np.errstate(divide="ignore"):        # log of zero
            out = np.log(np.sum(exp, axis=axis, keepdims=True))
        return subtract_maxs - out

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        """How many leading tokens `a` and `b` share."""
        return longest_token_prefix(a, b)

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

    # -- Hugging Face Hub --------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None, additional_files: list | None = None,
                        local_dir: str | os.PathLike[str] | None = None, local_dir_use_symlinks: bool | str = "auto",
                        cache_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> Llama:
        """Load a GGUF file of a Hugging Face Hub repository, downloaded into huggingface_hub's cache
        (or `local_dir`) unless there already. `filename` and each of `additional_files` (a
        projector, say) is a name or glob matching exactly one file, or the shards of one split
        model, which are all fetched (the first loads the rest). With HF_HUB_OFFLINE=1 the globs
        match the cached snapshot and nothing touches the network. `kwargs` go to the constructor.
        Needs `huggingface-hub`."""
        return cls(model_path=download(repo_id, filename, additional_files, local_dir, local_dir_use_symlinks,
                                       cache_dir), **kwargs)


__all__ = ["Llama"]
