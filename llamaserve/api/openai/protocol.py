"""Request bodies of the OpenAI routes (pydantic). Unknown fields are accepted and ignored, as OpenAI does."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StringConstraints, field_validator

from llamacore.generation.sampling import SamplingParams, sampler_order
from llamaserve.config.checks import UNSAFE_NAME_CHARS
from llamaserve.config.keys import MAX_SCALE


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False


def _scale(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not -MAX_SCALE <= value <= MAX_SCALE:
        raise ValueError(f"a scale must be a finite number between {-MAX_SCALE:g} and {MAX_SCALE:g}, "
                         f"got {str(value)[:40]}")
    return float(value)


Scale = Annotated[float, BeforeValidator(_scale)]
# no control characters or line separators: names are logged (a forged log line otherwise)
_NAME = Field(min_length=1, max_length=256, pattern=f"^[^{UNSAFE_NAME_CHARS}]+$")
Name = Annotated[str, _NAME]


class LoraScale(_Request):
    """One entry of llama.cpp's per-request ``lora`` list: an adapter id from GET /lora-adapters."""

    id: StrictInt
    scale: Scale


class AdapterFields(_Request):
    """The per-request adapter set, in our form or llama.cpp's; either replaces the alias's own set."""

    lora_adapters: dict[str, Scale] | None = None
    lora: list[LoraScale] | None = None


class SamplingFields(AdapterFields):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=0)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, ge=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    typical_p: float = Field(1.0, gt=0.0, le=1.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repeat_penalty: float = Field(1.0, gt=0.0)
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: dict[str, Any] | None = None
    grammar: str | None = None          # llama.cpp's field: a GBNF grammar the output must match
    json_whitespace: Literal["none", "compact", "pretty"] | None = None   # extension: whitespace in JSON output
    ignore_eos: bool = False
    user: str | None = None
    # llama-server's samplers beyond OpenAI's, by its names and defaults (0, or -1, is off)
    mirostat: Literal[0, 1, 2] = 0
    mirostat_tau: float = Field(5.0, ge=0.0)
    mirostat_eta: float = Field(0.1, ge=0.0)
    dry_multiplier: float = Field(0.0, ge=0.0)
    dry_base: float = Field(1.75, ge=1.0)
    dry_allowed_length: int = Field(2, ge=0)
    dry_penalty_last_n: int = Field(64, ge=0)
    dry_sequence_breakers: list[Annotated[str, StringConstraints(min_length=1, max_length=40)]] = Field(
        default_factory=lambda: ["\n", ":", "\"", "*"], max_length=64)
    xtc_probability: float = Field(0.0, ge=0.0, le=1.0)
    xtc_threshold: float = Field(0.1, ge=0.0)
    top_n_sigma: float = -1.0
    dynatemp_range: float = Field(0.0, ge=0.0)
    dynatemp_exponent: float = Field(1.0, gt=0.0)
    min_keep: int = Field(0, ge=0)
    samplers: str | list[str] | None = Field(None, max_length=32)   # llama-server's order of the samplers

    @field_validator("samplers")
    @classmethod
    def _known_samplers(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is not None:
            sampler_order(value)
        return value

    @field_validator("logit_bias")
    @classmethod
    def _token_id_keys(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for key, value in (bias or {}).items():
            try:
                token = int(key)
            except ValueError:
                raise ValueError(f"key {key[:40]!r} is not a token id") from None
            if not 0 <= token < 2**31:
                raise ValueError(f"key {key[:40]!r} is not a token id (0 to 2**31 - 1)")
            if math.isnan(value):
                raise ValueError(f"bias for token {key} is NaN")
        return bias

    def stop_list(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 16:
            raise ValueError("stop: at most 16 stop sequences")
        return stops

    def sampling(self, grammar: str | None, choice: int = 0) -> SamplingParams:
        """Sampling for choice `choice` (seeds differ per choice so n > 1 gives distinct samples)."""
        return SamplingParams(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
            typical_p=self.typical_p, repeat_penalty=self.repeat_penalty,
            presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
            seed=None if self.seed is None else self.seed + choice,
            logit_bias={int(k): v for k, v in (self.logit_bias or {}).items()}, grammar=grammar,
            mirostat_mode=self.mirostat, mirostat_tau=self.mirostat_tau, mirostat_eta=self.mirostat_eta,
            dry_multiplier=self.dry_multiplier, dry_base=self.dry_base, dry_allowed_length=self.dry_allowed_length,
            dry_penalty_last_n=self.dry_penalty_last_n, dry_sequence_breakers=tuple(self.dry_sequence_breakers),
            xtc_probability=self.xtc_probability, xtc_threshold=self.xtc_threshold, top_n_sigma=self.top_n_sigma,
            dynatemp_range=self.dynatemp_range, dynatemp_exponent=self.dynatemp_exponent, min_keep=self.min_keep,
            samplers=None if self.samplers is None else sampler_order(self.samplers),
        )


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]] = ""
    max_tokens: int | None = Field(16, ge=0)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None


class ThinkingFields(_Request):
    """llama-server's fields for thinking models (llamacore.chat.reasoning): how reasoning comes back, and the
    template's extra variables (enable_thinking, ...); unset ones take the model's configured values."""

    reasoning_format: Literal["none", "auto", "deepseek", "deepseek-legacy"] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None     # OpenAI's; "none" turns thinking off, others reach the template


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    reasoning_content: str | None = None        # an earlier answer's reasoning, for templates that show it
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatRequest(SamplingFields, ThinkingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    timings_per_token: bool = False     # llama-server's field: llama.cpp `timings` on every streamed chunk
    add_generation_prompt: bool | None = None       # vLLM's pair; unset, a final assistant message is continued
    continue_final_message: bool | None = None
    return_progress: bool = False       # llama-server's field: streamed prompt_progress while the prompt decodes
    verbose: bool = False               # llama-server's field: the answer carries `__verbose` (the rendered prompt)
    json_schema: dict[str, Any] | None = None       # llama-server's field: as response_format json_schema


# one embedding input: a string, token ids mixed with strings, {"prompt_string": ...} or
# {"content": [{"type": "text", "text": ...}, ...]} (llama-server's forms beside OpenAI's)
EmbeddingItem = str | dict[str, Any] | list[StrictInt | str]


class EmbeddingRequest(AdapterFields):      # adapter fields only to refuse them clearly
    model: str | None = None
    input: EmbeddingItem | list[EmbeddingItem]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    truncate: bool = False      # llama.cpp's and TEI's field: cut inputs longer than the model takes
    user: str | None = None


class NativeEmbeddingRequest(EmbeddingRequest):
    """llama-server's /embedding and /embeddings: `content` may stand for `input`."""

    input: EmbeddingItem | list[EmbeddingItem] | None = None      # type: ignore[assignment]
    content: EmbeddingItem | list[EmbeddingItem] | None = None


# -- llama.cpp server's utility routes ---------------------------------------------------------


class TokenizeRequest(_Request):
    model: str | None = None
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(_Request):
    model: str | None = None
    tokens: list[Annotated[StrictInt, Field(ge=0, lt=2**31)]] = []


class ApplyTemplateRequest(ThinkingFields):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True


# -- admin -------------------------------------------------------------------------------------


class AddAdapterRequest(_Request):
    """POST /admin/adapters: serve the adapter at `path` (inside adapters_dir) on `base` as `alias`."""

    path: str = Field(min_length=1)
    alias: Name
    base: Name | None = None          # default: the server's default model
    scale: Scale = 1.0


class LoadLoraAdapterRequest(_Request):
    """vLLM's POST /v1/load_lora_adapter (the adapter goes onto `base_model_name`, else the default model)."""

    lora_name: Name
    lora_path: str = Field(min_length=1)
    base_model_name: Name | None = None


class UnloadLoraAdapterRequest(_Request):
    """vLLM's POST /v1/unload_lora_adapter."""

    lora_name: Name
