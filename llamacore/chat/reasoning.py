"""Thinking models: whether a chat template thinks, the `enable_thinking` it is rendered with, and
the split of generated text into reasoning and content, as llama-server does.

A thinking model writes its reasoning between tags (`<think>` … `</think>`) before the answer;
some templates open the block themselves (the prompt ends with `<think>`: thinking is forced
open, and everything up to `</think>` is reasoning). `reasoning_format` says what to do with it:

- `none`: nothing is split; the text stays in `content` as generated.
- `deepseek`: the reasoning goes to `reasoning_content`, also in streamed deltas, and `content`
  keeps only the answer.
- `auto` (llama-server's default): as deepseek for a template that knows thinking, else none.
- `deepseek-legacy`: as deepseek, but a stream sends the reasoning inline in `content`, tags
  and all.

Templates read `enable_thinking` (Qwen3, DeepSeek-R1, QwQ, Command-R7B, ...). As llama-server,
it is true for a template that can think unless `reasoning` is off, and a request's (or the
model's) `chat_template_kwargs` can set it; `reasoning_effort: none` turns it off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
REASONING_MODES = ("on", "off", "auto")      # llama-server's --reasoning

# (start, end) tags of the thinking blocks that templates write; the first found in a template is its pair
THINK_TAGS = (("<think>", "</think>"), ("<|START_THINKING|>", "<|END_THINKING|>"),
              ("<seed:think>", "</seed:think>"), ("[THINK]", "[/THINK]"))


def tags_for(template: str) -> tuple[str, str]:
    """The thinking tags `template` writes (`<think>`/`</think>` when it names none)."""
    found = [(template.find(start), (start, end)) for start, end in THINK_TAGS if start in template]
    return min(found)[1] if found else THINK_TAGS[0]


def supports_thinking(template: str) -> bool:
    """Whether a template knows thinking: it reads enable_thinking or writes thinking tags."""
    return "enable_thinking" in template or any(start in template for start, _ in THINK_TAGS)


def check_format(value: str) -> str:
    if value not in REASONING_FORMATS:
        raise ValueError(f"reasoning_format: expected one of {', '.join(REASONING_FORMATS)}, got {value!r}")
    return value


def template_kwargs(template: str, *, reasoning: str = "auto", defaults: Mapping[str, Any] | None = None,
                    request: Mapping[str, Any] | None = None, reasoning_effort: str | None = None) -> dict[str, Any]:
    """The extra variables `template` is rendered with: the model's `defaults` and the request's
    chat_template_kwargs (the request wins), with `enable_thinking` resolved as llama-server does.

    `reasoning` is the model's on/off/auto; ValueError for an enable_thinking that is not a boolean.
    """
    if reasoning not in REASONING_MODES:
        raise ValueError(f"reasoning: expected one of {', '.join(REASONING_MODES)}, got {reasoning!r}")
    kwargs = {**(defaults or {}), **(request or {})}
    thinking = kwargs.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise ValueError(f"chat_template_kwargs.enable_thinking: expected a boolean, got {type(thinking).__name__}")
    if thinking is None:
        thinking = reasoning == "on" or (reasoning == "auto" and supports_thinking(template))
    if reasoning_effort is not None:
        if not isinstance(reasoning_effort, str):
            raise ValueError("reasoning_effort: expected a string")
        if reasoning_effort == "none":
            thinking = False
            kwargs.pop("reasoning_effort", None)
        elif reasoning_effort:
            kwargs["reasoning_effort"] = reasoning_effort
    kwargs["enable_thinking"] = thinking
    return kwargs


@dataclass(frozen=True)
class Reasoning:
    """How one request's output carries its thinking (one made per request; `none` makes none)."""

    format: str = "deepseek"             # deepseek, deepseek-legacy (auto is deepseek)
    start: str = "<think>"
    end: str = "</think>"
    forced_open: bool = False            # the prompt opened the block: the output starts inside it

    @classmethod
    def for_prompt(cls, template: str, prompt: str, reasoning_format: str) -> Reasoning | None:
        """The split for a prompt `template` rendered as `prompt`; None for reasoning_format none, and
        for auto when the template does not know thinking (its text is left alone, as llama-server)."""
        if check_format(reasoning_format) == "none" or (reasoning_format == "auto" and not supports_thinking(template)):
            return None
        start, end = tags_for(template)
        fmt = "deepseek" if reasoning_format == "auto" else reasoning_format
        return cls(fmt, start, end, forced_open=prompt.rstrip().endswith(start))

    def split(self, text: str) -> tuple[str | None, str]:
        """(reasoning or None, content) of a whole generated text.

        Reasoning is trimmed and the answer's leading whitespace dropped; a block never closed
        (cut by max_tokens) is all reasoning.
        """
        if self.forced_open:
            body = text
        else:
            lead = text.lstrip()
            if not lead.startswith(self.start):
                return None, text
            body = lead[len(self.start):]
        cut = body.find(self.end)
        reasoning, content = (body, "") if cut < 0 else (body[:cut], body[cut + len(self.end):].lstrip())
        return reasoning.strip() or None, content

    def splitter(self) -> ReasoningSplitter:
        return ReasoningSplitter(self)

    def separate_splitter(self) -> ReasoningSplitter:
        """A splitter whose reasoning is always its own part: for APIs that carry thinking in a block or
        item of its own (Anthropic's, Responses), where deepseek-legacy's inline form has no place."""
        return ReasoningSplitter(replace(self, format="deepseek"))


@dataclass
class ReasoningSplitter:
    """Streamed text split as `Reasoning.split` splits the whole: push() each piece, finish() at the
    end; each returns ("reasoning" | "content", text) parts to send now. Text that may still turn
    out to be a tag (or whitespace the split trims) is held back until it is known.

    With deepseek-legacy the reasoning comes out as content, between its tags.
    """

    reasoning: Reasoning
    state: str = "lead"                  # lead (before the output shows whether it thinks), think, answer
    pending: str = ""
    started: bool = False                # reasoning text sent (leading whitespace is dropped before)
    answered: bool = False               # answer text sent (likewise)
    _legacy_open: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.reasoning.forced_open:
            self.state = "think"
            self._legacy_open = [("content", self.reasoning.start)]

    def push(self, text: str) -> list[tuple[str, str]]:
        self.pending += text
        return self._legacy(self._drain(final=False))

    def finish(self) -> list[tuple[str, str]]:
        return self._legacy(self._drain(final=True))

    def _drain(self, final: bool) -> list[tuple[str, str]]:
        r, out = self.reasoning, []
        if self.state == "lead":
            lead = self.pending.lstrip()
            if lead.startswith(r.start):
                self.state, self.pending = "think", lead[len(r.start):]
                out.append(("open", ""))
            elif final or not r.start.startswith(lead):
                text, self.pending, self.state, self.answered = self.pending, "", "answer", True
                return [("content", text)] if text else []
            else:
                return []
        if self.state == "think":
            cut = self.pending.find(r.end)
            if cut >= 0:
                body, self.pending = self.pending[:cut], self.pending[cut + len(r.end):]
                out += self._thought(body.rstrip())
                out.append(("close", ""))
                self.state = "answer"
            elif final:
                out += self._thought(self.pending.rstrip())
                self.pending = ""
                return out
            else:
                keep = _partial_suffix(self.pending, r.end)
                safe = self.pending[:len(self.pending) - keep]
                sent = safe.rstrip()          # trailing whitespace may end the reasoning: hold it
                out += self._thought(sent)
                self.pending = self.pending[len(sent):]
                return out
        if self.state == "answer":
            text = self.pending if self.answered else self.pending.lstrip()
            self.pending = ""
            if text:
                self.answered = True
                out.append(("content", text))
        return out

    def _thought(self, text: str) -> list[tuple[str, str]]:
        if not self.started:
            text = text.lstrip()
        if not text:
            return []
        self.started = True
        return [("reasoning", text)]

    def _legacy(self, parts: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Markers out; with deepseek-legacy the reasoning as content between its tags."""
        if self.reasoning.format != "deepseek-legacy":
            return [p for p in parts if p[0] in ("reasoning", "content")]
        out, r = [], self.reasoning
        if self._legacy_open:
            out, self._legacy_open = self._legacy_open, []
        for kind, text in parts:
            if kind == "open":
                out.append(("content", r.start))
            elif kind == "close":
                out.append(("content", r.end))
            else:
                out.append(("content", text))
        return out


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (a tag that may still be arriving)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


__all__ = ["REASONING_FORMATS", "REASONING_MODES", "Reasoning", "ReasoningSplitter", "check_format",
           "supports_thinking", "tags_for", "template_kwargs"]
