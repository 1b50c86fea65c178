"""What the parts of `Llama` share, declared once: the state its constructor sets and the methods one
part calls on another.

`Llama` is one class written in several files (tokens, generation, completion, chat, embedding,
state). Each part subclasses `LlamaHost`, so a type checker holds every part to this contract, and
the functions that take a `Llama` (`llm`) take a `LlamaHost` instead of importing the class they
are a part of.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from llamacore._core import Batch, Context, Model, Projector
    from llamacore.generation.draft_pacing import DraftPacing
    from llamacore.generation.events import TextEvent
    from llamacore.generation.kv_reuse import AdapterKey
    from llamacore.generation.processors import LogitsProcessor, StoppingCriteria
    from llamacore.generation.sampling import SamplingParams
    from llamacore.llama_cache import BaseLlamaCache
    from llamacore.llama_grammar import LlamaGrammar
    from llamacore.vision.media import MediaPolicy


class LlamaHost:
    """State set by `Llama.__init__` and methods that one part of `Llama` calls on another.

    A plain base class, not a `typing.Protocol`: mypy takes an assignment in an explicit subclass of
    a Protocol for a new declaration, so the parts could not assign the state declared here. The
    methods are declared for type checkers only, so none can shadow a part's at run time, and
    `isinstance(x, LlamaHost)` tells a Llama without importing the class.
    """

    model_path: str
    seed: int | None
    last_n_tokens_size: int
    logits_all: bool
    embedding: bool
    spm_infill: bool
    cache: BaseLlamaCache | None
    chat_handler: Any
    chat_template: str
    projector: Projector | None
    media_policy: MediaPolicy
    n_drafted: int
    n_accepted: int
    embed_decodes: int
    _custom_tokenizer: bool
    _cached: list[int]
    _cache_key: tuple
    _batch: Batch
    _embd_batch: Batch | None
    _scores: npt.NDArray[np.single] | None
    _drafter: Any
    _pacing: DraftPacing

    if TYPE_CHECKING:
        @property
        def ctx(self) -> Context: ...

        @property
        def model(self) -> Model: ...

        @property
        def n_tokens(self) -> int: ...

        @property
        def scores(self) -> npt.NDArray[np.single]: ...

        def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]: ...

        def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None,
                       special: bool = False) -> bytes: ...

        def reset(self) -> None: ...

        def n_vocab(self) -> int: ...

        def token_bos(self) -> int: ...

        def token_eos(self) -> int: ...

        def _append(self, tokens: list[int], all_logits: bool = False) -> None: ...

        def _piece_text(self, token: int) -> str: ...

        def _generate(self, tokens: list[int], sampling: SamplingParams, *, max_tokens: int,
                      ignore_eos: bool = False, logits_processor: LogitsProcessor | None = None,
                      reads_logits: bool = False) -> Iterator[int]: ...

        def _token_chunks(self, tokens: list[int], sampling: SamplingParams, *, max_tokens: int, ignore_eos: bool,
                          stops: list[str], chunk: int) -> Iterator[tuple[list[int], bytes, str | None]]: ...

        def _eval(self, tokens: list[int], logits_all: bool = False) -> list: ...

        def _adapter_key(self) -> AdapterKey: ...

        def _sampling_params(self, *, seed: int | None = None, logit_bias: dict[int, float] | None = None,
                             grammar: str | LlamaGrammar | None = None, response_format: dict | None = None,
                             **fields: Any) -> SamplingParams: ...

        def _cache_lookup(self, tokens: list[int]) -> None: ...

        def _cache_save(self) -> None: ...

        def _completion_events(self, prompt: str | list[int], sampling: SamplingParams, *, suffix: str | None = None,
                               max_tokens: int | None = 16, logprobs: int | None = None, echo: bool = False,
                               stop: str | list[str] | None = None, ignore_eos: bool = False,
                               logits_processor: LogitsProcessor | None = None,
                               stopping_criteria: StoppingCriteria | None = None,
                               stream: bool = False) -> tuple[Iterator[TextEvent], int]: ...
