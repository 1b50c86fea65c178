"""OpenAI's Responses API shapes: a request's input items, instructions, tools and text format as the
chat pipeline's messages, tools and response_format, and the pipeline's answer as a response object
with `reasoning` (a thinking model's, llamacore.chat.reasoning), `message` and `function_call` output items.

(Not to be confused with llamacore.chat.openai, which builds the chat and completion shapes.)
Input items are `message` (user, system, developer, assistant; text parts), `reasoning` (shown to
the template with the assistant turn after it), `function_call` (a call the model made, as echoed
back by the client) and `function_call_output` (its result);
they become the OpenAI-style chat messages the templates render. Function tools become chat
functions; `text.format` json_object/json_schema becomes a response_format.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from llamacore.generation.events import FinishReason
from llamaserve.api.errors import APIError
from llamaserve.api.openai.protocol import AdapterFields

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_MEDIA_PARTS = ("input_image", "input_file", "input_audio")


class ResponsesRequest(AdapterFields):
    """POST /v1/responses. OpenAI's fields that would change the answer and that this server does not
    implement are refused (`check_supported`), not ignored; unknown fields are ignored as on the
    other OpenAI routes, and `lora_adapters` / `lora` work as there."""

    return_progress: bool = False       # llama-server's: streamed prompt_progress (response.in_progress events)
    timings_per_token: bool = False     # llama-server's: llama.cpp timings on each output_text.delta
    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    text: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = Field(None, ge=1)
    previous_response_id: str | None = None
    store: bool | None = None                    # null or absent: true, as on OpenAI
    stream: bool | None = None
    metadata: dict[Annotated[str, StringConstraints(max_length=64)],
                   Annotated[str, StringConstraints(max_length=512)]] | None = Field(None, max_length=16)
    user: str | None = Field(None, max_length=256)      # an end-user id; it is stored and echoed
    # refused unless absent or off (check_supported)
    background: bool | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None
    truncation: str | None = None
    conversation: Any = None
    prompt: Any = None
    context_management: Any = None


def _refuse(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param)


def check_supported(body: ResponsesRequest) -> None:
    """A 400 for each field set to something this server cannot do."""
    if body.background:
        raise _refuse("background", "background responses are not supported by this server")
    if body.reasoning and any(v not in (None, "none") for k, v in body.reasoning.items() if k != "effort"):
        raise _refuse("reasoning", "reasoning summaries are not supported by this server (the reasoning "
                                   "itself comes back as a reasoning item)")
    effort = (body.reasoning or {}).get("effort")
    if effort is not None and not isinstance(effort, str):
        raise _refuse("reasoning.effort", "expected a string")
    if body.include:
        raise _refuse("include", "no additional output data (logprobs, reasoning, tool results) is available "
                                 "from this server")
    if body.top_logprobs:
        raise _refuse("top_logprobs", "logprobs are not supported on /v1/responses; use /v1/chat/completions")
    if body.truncation not in (None, "disabled"):
        raise _refuse("truncation", "only 'disabled' is supported: a conversation longer than the context is a 400")
    for name in ("conversation", "prompt", "context_management"):
        if getattr(body, name) is not None:
            raise _refuse(name, "not supported by this server")


def input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's input as items (a string is one user message)."""
    return [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else list(value)


def _string(item: Mapping[str, Any], key: str, where: str, empty: bool = False) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not (value or empty):
        raise _refuse(f"{where}.{key}", "required, a non-empty string" if not empty else "required, a string")
    return value


def _content_text(content: Any, where: str, images: bool = False) -> str | list[dict[str, Any]]:
    """The text of a string or a list of text parts (message content, a function call's output);
    with `images` (message content), `input_image` parts too, as chat `image_url` parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(where, "expected a string or a list of content parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = "refusal" if kind == "refusal" else "text"
        if kind in ("input_text", "output_text", "refusal"):
            parts.append({"type": "text", "text": _string(part, key, f"{where}.{j}", empty=True)})
        elif kind == "input_image" and images:
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise _refuse(f"{where}.{j}.image_url", "required: a data: URI or a URL (file_id is not supported)")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind in _MEDIA_PARTS:
            raise _refuse(f"{where}.{j}", f"{kind} parts are not supported here (images go in message content "
                                          f"as input_image, for a vision model)")
        else:
            raise _refuse(f"{where}.{j}.type", f"unsupported content part type {str(kind)[:40]!r} (expected "
                                               f"input_text, output_text, refusal or input_image)")
    if any(p["type"] == "image_url" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def chat_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Instructions (a system message) and input items as chat messages for the model's template.

    A `function_call` joins the assistant message just before it (the turn's text), as the chat
    templates expect one assistant message with its tool calls.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    thought: str | None = None          # a reasoning item's text, for the assistant message after it
    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise _refuse(where, "expected an input item object")
        kind = item.get("type") or "message"
        if kind == "reasoning":
            thought = _reasoning_text(item, where)
            continue
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise _refuse(f"{where}.role", f"expected one of {', '.join(ROLES)}, got {str(role)[:40]!r}")
            out.append({"role": ROLES[role],
                        "content": _content_text(item.get("content"), f"{where}.content", images=True)})
            if thought and role == "assistant":
                out[-1]["reasoning_content"] = thought
            thought = None
        elif kind == "function_call":
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where),
                                 "arguments": _string(item, "arguments", where, empty=True)}}
            if out and out[-1]["role"] == "assistant" and not thought:
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
                if thought:
                    out[-1]["reasoning_content"] = thought
            thought = None
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where),
                        "content": _content_text(item.get("output"), f"{where}.output")})
        else:
            raise _refuse(f"{where}.type", f"unsupported input item type {str(kind)[:40]!r}; this server takes "
                                           f"message, reasoning, function_call and function_call_output items")
    if not out:
        raise _refuse("input", "give at least one input item (or instructions)")
    return out


def _reasoning_text(item: Mapping[str, Any], where: str) -> str:
    """The text of a reasoning item (its reasoning_text content; else its summary), as the model's
    template shows an earlier answer's reasoning."""
    for key, part_type in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise _refuse(f"{where}.{key}", "expected a list of parts")
        texts = [_string(p, "text", f"{where}.{key}.{j}", empty=True) for j, p in enumerate(parts)
                 if isinstance(p, dict) and p.get("type") == part_type]
        if texts:
            return "\n".join(texts)
    return ""


def chat_tools(tools: list[dict[str, Any]] | None, tool_choice: Any) -> tuple[list[dict[str, Any]] | None, Any]:
    """(chat tools, chat tool_choice) for the request's function tools; other tools are a 400."""
    converted: list[dict[str, Any]] | None = None
    if tools:
        converted = []
        for i, tool in enumerate(tools):
            kind = tool.get("type")
            if kind != "function":
                raise _refuse(f"tools.{i}.type", f"only function tools are supported; {str(kind)[:40]!r} tools "
                                                 f"(run by OpenAI itself) are not available on this server")
            parameters = tool.get("parameters")
            if parameters is not None and not isinstance(parameters, dict):
                raise _refuse(f"tools.{i}.parameters", "expected a JSON schema object")
            description = tool.get("description")
            converted.append({"type": "function", "function": {
                "name": _string(tool, "name", f"tools.{i}"),
                "description": description if isinstance(description, str) else "",
                "parameters": parameters or {"type": "object", "properties": {}}}})
    if tool_choice in (None, "auto", "none", "required"):
        if tool_choice == "required" and not converted:
            raise _refuse("tool_choice", "'required' needs at least one function tool")
        return converted, tool_choice or "auto"
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = _string(tool_choice, "name", "tool_choice")
        if not any(t["function"]["name"] == name for t in converted or []):
            raise _refuse("tool_choice.name", f"function {name[:100]!r} is not among the tools")
        return converted, {"type": "function", "function": {"name": name}}
    kind = tool_choice.get("type") if isinstance(tool_choice, dict) else tool_choice
    raise _refuse("tool_choice", f"expected auto, none, required or {{type: function, name}}, got {str(kind)[:40]!r}")


def response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chat response_format for `text` (None for plain text)."""
    if not text:
        return None
    if text.get("verbosity") not in (None, "medium"):
        raise _refuse("text.verbosity", "only 'medium' (the default) is supported by this server")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _refuse("text.format", "expected an object with a type")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise _refuse("text.format.schema", "required with json_schema, a JSON schema object")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt["schema"],
                                                       "strict": fmt.get("strict")}}
    raise _refuse("text.format.type", f"expected text, json_object or json_schema, got {str(kind)[:40]!r}")


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    """A thinking model's reasoning as an output item (its full text, no summary)."""
    return {"type": "reasoning", "id": item_id, "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def output_items(message: Mapping[str, Any], finish: FinishReason | None, message_id: str, *,
                 always_text: bool, max_calls: int | None, reasoning_id: str = "",
                 call_item_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """A chat answer (reasoning_content, content and tool_calls) as output items; only the first
    `max_calls` calls.

    `always_text`: a message item even for empty text (as streamed without tools, where it
    opened before any text came). `call_item_ids`: the item ids of calls already streamed, in order.
    """
    status = "incomplete" if finish is FinishReason.LENGTH else "completed"
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(reasoning_id, message["reasoning_content"]))
    if message.get("content") or always_text:
        items.append(message_item(message_id, message.get("content") or "", status))
    for i, call in enumerate((message.get("tool_calls") or [])[:max_calls]):
        items.append({"type": "function_call", "id": call_item_ids[i] if i < len(call_item_ids) else new_id("fc"),
                      "call_id": call["id"],
                      "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                      "status": status})
    return items


@dataclass
class ResponseDraft:
    """What every snapshot of one response shares: its ids, creation time and the request's settings."""

    body: ResponsesRequest
    model: str
    id: str = field(default_factory=lambda: new_id("resp"))
    message_id: str = field(default_factory=lambda: new_id("msg"))
    reasoning_id: str = field(default_factory=lambda: new_id("rs"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    @property
    def max_calls(self) -> int | None:
        """How many function calls an answer may carry (parallel_tool_calls false: one)."""
        limits = [n for n in (self.body.max_tool_calls, 1 if self.body.parallel_tool_calls is False else None) if n]
        return min(limits) if limits else None

    def snapshot(self, output: list[dict[str, Any]], n_input: int = 0, n_output: int = 0,
                 finish: FinishReason | None = None, done: bool = False) -> dict[str, Any]:
        """The response object: in progress until `done`, then completed, or incomplete when cut by length."""
        body = self.body
        incomplete = done and finish is FinishReason.LENGTH
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": ("incomplete" if incomplete else "completed") if done else "in_progress",
            "background": False, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
            "max_tool_calls": body.max_tool_calls, "model": self.model, "output": output,
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": (body.reasoning or {}).get("effort"), "summary": None},
            "store": body.store is not False,
            "temperature": 1.0 if body.temperature is None else body.temperature,
            "text": {"format": ((body.text or {}).get("format") or {"type": "text"}), "verbosity": "medium"},
            "tool_choice": body.tool_choice or "auto", "tools": body.tools or [],
            "top_p": 1.0 if body.top_p is None else body.top_p, "truncation": "disabled",
            "usage": {"input_tokens": n_input, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": n_output, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": n_input + n_output} if done else None,
            "user": body.user, "metadata": body.metadata or {},
        }


__all__ = ["ResponseDraft", "ResponsesRequest", "chat_messages", "chat_tools", "check_supported", "input_items",
           "message_item", "new_id", "output_items", "response_format"]
