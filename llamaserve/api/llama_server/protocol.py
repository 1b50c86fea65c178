"""llama.cpp's native completion API (POST /completion): its request fields, prompt forms and answer shape.

Scripts and UIs written for llama-server call this route rather than OpenAI's /v1/completions;
the generation is the same (llamaserve.api.llama_server.completion), only the shapes differ.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, field_validator

from llamacore.generation.events import Finished, FinishReason
from llamacore.generation.logprobs import TokenLogprob
from llamaserve.api.openai.protocol import SamplingFields
from llamaserve.serving.generation import Timings

RANDOM_SEED = 0xFFFFFFFF    # llama.cpp's LLAMA_DEFAULT_SEED: "a random seed", as its settings report it

# llama.cpp sampling fields this server does not implement, with the value that means "off":
# a request that turns one on is refused rather than answered without it
_UNSUPPORTED_SAMPLING = {"n_indent": 0, "t_max_predict_ms": 0, "post_sampling_probs": False, "n_cmpl": 1}


class NativeCompletionRequest(SamplingFields):
    """llama-server's /completion body (its names: n_predict, n_probs, return_tokens...), with its sampling
    defaults (the OpenAI routes keep OpenAI's), so a seeded request samples what llama-server samples."""

    temperature: float = Field(0.8, ge=0.0, le=2.0)
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    prompt: Any = ""
    n_predict: int | None = Field(None, ge=-1)
    n_probs: int = Field(0, ge=0, le=20)
    stop: list[str] | None = None
    return_tokens: bool = False
    return_progress: bool = False       # streamed: prompt_progress when the prompt starts and after each batch
    timings_per_token: bool = False     # streamed: timings on every chunk
    response_fields: list[str] | None = None
    json_schema: dict[str, Any] | None = None
    cache_prompt: bool = True           # the KV cache is reused exactly, so the answer is the same either way
    id_slot: int = -1
    n_indent: int = 0
    t_max_predict_ms: int = 0
    post_sampling_probs: bool = False
    n_cmpl: int = 1

    logit_bias: Any = None      # llama.cpp's forms; resolved against the model by token_bias()

    @field_validator("logit_bias")
    @classmethod
    def _token_id_keys(cls, bias: Any) -> Any:      # replaces SamplingFields' check: more forms here
        if bias is None:
            return None
        if not isinstance(bias, (list, dict)):
            raise ValueError("expected [[token or text, bias], ...] or {token or text: bias}")
        pairs: list[Any] = list(bias.items()) if isinstance(bias, dict) else bias
        for pair in pairs:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], (int, str))
                    and (pair[1] is False or (isinstance(pair[1], (int, float)) and not isinstance(pair[1], bool)
                                              and not math.isnan(pair[1])))):
                raise ValueError(f"expected [token or text, bias] pairs (bias a number or false), got {pair!r:.60}")
        return bias

    def token_bias(self, tokenize: Any) -> None:
        """Resolve llama.cpp's logit_bias forms to {token id: bias}: [[id or text, bias], ...] or
        {id or text: bias}; a text biases each of its tokens; a bias of false bans the token."""
        raw = self.logit_bias
        pairs = list(raw.items()) if isinstance(raw, dict) else list(raw or [])
        out: dict[str, float] = {}
        for key, value in pairs:
            bias = -math.inf if value is False else float(value)
            numeric = isinstance(key, int) or (isinstance(raw, dict) and key.lstrip("-").isdigit())
            for token in [int(key)] if numeric else tokenize(key, False):
                out[str(token)] = bias
        self.logit_bias = out

    def ban_eog(self, model: Any) -> None:
        """ignore_eos as llama-server does it: every end-of-generation token biased to -inf (so never sampled)."""
        if self.ignore_eos:
            bias = dict(self.logit_bias or {})
            bias.update({str(t): -math.inf for t in range(model.n_vocab) if model.is_eog(t)})
            self.logit_bias = bias

    def refused(self) -> str | None:
        """The first llama.cpp field turned on that this server does not implement, as an error message."""
        for name, off in _UNSUPPORTED_SAMPLING.items():
            if getattr(self, name) != off:
                return f"{name} is not supported by this server"
        if self.id_slot != -1:
            return "id_slot is not supported: slots are assigned by the scheduler (prefix reuse is automatic)"
        return None

    def limit(self) -> int | None:
        """Tokens to generate: n_predict (-1: until the context is full), else max_tokens."""
        if self.n_predict is not None:
            return None if self.n_predict < 0 else self.n_predict
        return self.max_tokens

    def settings(self) -> dict[str, Any]:
        """The `generation_settings` llama-server reports back."""
        limit = self.limit()
        return {"n_predict": -1 if limit is None else limit,
                "seed": RANDOM_SEED if self.seed is None else self.seed,
                "temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p,
                "typical_p": self.typical_p, "repeat_penalty": self.repeat_penalty,
                "presence_penalty": self.presence_penalty, "frequency_penalty": self.frequency_penalty,
                "stop": list(self.stop or []), "ignore_eos": self.ignore_eos, "n_probs": self.n_probs,
                "grammar": self.grammar or "",
                "logit_bias": [{"bias": v if math.isfinite(v) else None, "token": int(k)}     # null: -inf
                               for k, v in (self.logit_bias or {}).items()],
                "mirostat": self.mirostat, "mirostat_tau": self.mirostat_tau, "mirostat_eta": self.mirostat_eta,
                "dry_multiplier": self.dry_multiplier, "dry_base": self.dry_base,
                "dry_allowed_length": self.dry_allowed_length, "dry_penalty_last_n": self.dry_penalty_last_n,
                "dry_sequence_breakers": list(self.dry_sequence_breakers), "xtc_probability": self.xtc_probability,
                "xtc_threshold": self.xtc_threshold, "top_n_sigma": self.top_n_sigma,
                "dynatemp_range": self.dynatemp_range, "dynatemp_exponent": self.dynatemp_exponent,
                "min_keep": self.min_keep, "adaptive_target": -1.0, "adaptive_decay": 0.9,
                "post_sampling_probs": False}


def prompts(prompt: Any, tokenize: Any) -> list[list[int]]:
    """llama.cpp's prompt forms as token lists: a string, a token list, a list mixing token ids and
    strings (one prompt), a {prompt_string} object, or a list of any of these (several prompts).

    `tokenize(text, first)` tokenizes a string; `first` adds the model's BOS. ValueError names a bad form.
    """
    if isinstance(prompt, list) and prompt and all(isinstance(p, (int, str)) for p in prompt) \
            and any(isinstance(p, int) for p in prompt):
        return [_one(prompt, tokenize)]
    items = prompt if isinstance(prompt, list) else [prompt]
    if not items:
        raise ValueError("prompt: empty list")
    return [_one(item, tokenize) for item in items]


def _one(item: Any, tokenize: Any) -> list[int]:
    if isinstance(item, str):
        return tokenize(item, True)
    if isinstance(item, dict):
        if item.get("multimodal_data"):
            raise ValueError("prompt: multimodal_data needs a model with a multimodal projector; this one has none")
        text = item.get("prompt_string")
        if not isinstance(text, str):
            raise ValueError("prompt: an object prompt needs a prompt_string")
        return tokenize(text, True)
    if isinstance(item, list) and all(isinstance(p, (int, str)) and not isinstance(p, bool) for p in item):
        out: list[int] = []
        for part in item:
            out += tokenize(part, not out) if isinstance(part, str) else [part]
        return out
    raise ValueError("prompt: expected a string, a list of token ids and strings, or a list of prompts")


def stop_type(finish: Finished | None) -> str:
    if finish is None or finish.reason in (FinishReason.CANCELLED, FinishReason.ERROR):
        return "none"
    if finish.reason is FinishReason.LENGTH:
        return "limit"
    return "word" if finish.stop_sequence else "eos"


def probabilities(entries: list[TokenLogprob]) -> list[dict[str, Any]]:
    """llama-server's completion_probabilities: each token with its top alternatives (log-probabilities)."""
    def item(token: int, text: str, logprob: float | None) -> dict[str, Any]:
        return {"id": token, "token": text, "bytes": list(text.encode("utf-8")), "logprob": logprob}
    return [{**item(e.token, e.text, e.logprob), "top_logprobs": [item(*t) for t in e.top]} for e in entries]


def final(index: int, content: str, finish: Finished | None, tokens: list[int], timings: Timings,
          body: NativeCompletionRequest, model: str, prompt_text: str) -> dict[str, Any]:
    """The last object of a generation (the whole answer when not streamed)."""
    out: dict[str, Any] = {
        "index": index, "content": content, "tokens": tokens if body.return_tokens else [], "id_slot": -1,
        "stop": True, "model": model, "tokens_predicted": timings.n_generated, "tokens_evaluated": timings.n_prompt,
        "generation_settings": body.settings(), "prompt": prompt_text, "has_new_line": "\n" in content,
        "truncated": False, "stop_type": stop_type(finish),
        "stopping_word": (finish.stop_sequence or "") if finish else "", "tokens_cached": timings.n_cached,
        "timings": timings.llama_cpp()}
    if body.response_fields:
        return {name: _field(out, name) for name in body.response_fields}
    return out


def _field(obj: dict[str, Any], path: str) -> Any:
    """response_fields names nested values with slashes: generation_settings/n_predict."""
    value: Any = obj
    for part in path.split("/"):
        value = value.get(part) if isinstance(value, dict) else None
    return value
