"""Anthropic's Messages API shapes: its requests as the chat pipeline's messages and tools, and the
pipeline's output as Anthropic's message, stream events and errors.

A request's `system`, text blocks, `thinking` blocks (as reasoning_content), `tool_use` and
`tool_result` blocks become the OpenAI-style messages the chat templates render; tools become
functions (`input_schema` as `parameters`). The answer's reasoning, text and parsed tool calls
become `thinking`, `text` and `tool_use` content blocks, with Anthropic's stop reasons (end_turn,
max_tokens, stop_sequence, tool_use).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from llamacore.generation.events import FinishReason
from llamaserve.api.errors import APIError
from llamaserve.api.openai.protocol import AdapterFields

# HTTP status -> Anthropic's error type
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               503: "overloaded_error"}


class MessagesRequest(AdapterFields):
    """POST /v1/messages (and, without max_tokens, /v1/messages/count_tokens). Fields Anthropic
    has that change the answer and that we do not implement are refused, not ignored; our
    `lora_adapters` / `lora` extension fields work as on the OpenAI routes."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = Field(None, max_length=16)
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: float = Field(1.0, ge=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    container: Any = None


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


def _text_of(content: Any, where: str) -> str:
    """The text of a string or a list of text blocks (tool_result content, system)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{where}: expected a string or a list of content blocks")
    parts = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise APIError(400, f"{where}: only text blocks are supported here, got {kind!r}")
        parts.append(block["text"])
    return "\n".join(parts)


def chat_messages(body: MessagesRequest) -> list[dict[str, Any]]:
    """The request as chat messages for the model's template."""
    template_kwargs(body)          # a bad thinking setting fails before anything runs
    if body.output_config:
        raise APIError(400, "output_config is not supported by this server; for JSON output use "
                            "/v1/chat/completions with response_format")
    if body.container is not None:
        raise APIError(400, "container: server-side tool containers are not supported by this server")
    out: list[dict[str, Any]] = []
    if body.system:
        out.append({"role": "system", "content": _text_of(body.system, "system")})
    for i, message in enumerate(body.messages):
        role, content = message.get("role"), message.get("content")
        where = f"messages.{i}"
        if role not in ("user", "assistant"):
            raise APIError(400, f"{where}.role: expected 'user' or 'assistant', got {role!r}")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise APIError(400, f"{where}.content: expected a string or a list of content blocks")
        texts, calls, thoughts, parts = [], [], [], []       # parts: texts and images, in order
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
                parts.append({"type": "text", "text": block["text"]})
            elif kind == "image" and role == "user":
                parts.append({"type": "image_url", "image_url": {"url": _image_url(block, f"{where}.content.{j}")}})
            elif kind == "thinking" and role == "assistant" and isinstance(block.get("thinking"), str):
                thoughts.append(block["thinking"])        # the template shows it (reasoning_content)
            elif kind == "redacted_thinking" and role == "assistant":
                continue                                  # encrypted by another server: nothing to show
            elif kind == "tool_use" and role == "assistant":
                calls.append({"id": str(block.get("id", "")), "type": "function",
                              "function": {"name": str(block.get("name", "")),
                                           "arguments": json.dumps(block.get("input", {}), ensure_ascii=False)}})
            elif kind == "tool_result" and role == "user":
                result = _text_of(block.get("content", ""), f"{where}.content.{j}.content")
                if block.get("is_error"):
                    result = f"Error: {result}"
                out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": result})
            elif kind in ("image", "document"):
                raise APIError(400, f"{where}.content.{j}: {kind} blocks are not supported here (images "
                                    f"go in user messages, for a vision model)")
            else:
                raise APIError(400, f"{where}.content.{j}: unsupported content block type {kind!r}")
        if len(parts) > len(texts):              # images: the content stays a list of parts
            out.append({"role": role, "content": parts})
        elif texts or calls or thoughts:
            item: dict[str, Any] = {"role": role, "content": "\n".join(texts) if texts else None}
            if thoughts:
                item["reasoning_content"] = "\n".join(thoughts)
            if calls:
                item["tool_calls"] = calls
            out.append(item)
    return out


def _image_url(block: dict[str, Any], where: str) -> str:
    """An image block's source as an image URL: base64 data as a data: URI, or the url as given."""
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        return f"data:{source['media_type']};base64,{source['data']}"
    if kind == "url" and isinstance(source.get("url"), str):
        return source["url"]
    raise APIError(400, f"{where}.source: expected {{type: base64, media_type, data}} or {{type: url, url}}")


def template_kwargs(body: MessagesRequest) -> dict[str, Any] | None:
    """Template variables for the request's `thinking`: disabled turns a thinking template's thinking
    off; enabled and adaptive leave the model's setting (its reasoning key; budget_tokens is not enforced,
    max_tokens still caps the answer)."""
    if body.thinking is None:
        return None
    kind = body.thinking.get("type")
    if kind == "disabled":
        return {"enable_thinking": False}
    if kind in ("enabled", "adaptive"):
        return None
    raise APIError(400, f"thinking.type: expected enabled, adaptive or disabled, got {kind!r}")


def chat_tools(body: MessagesRequest) -> tuple[list[dict[str, Any]] | None, Any]:
    """(OpenAI-style tools, tool_choice) for the request's tools and tool_choice."""
    tools = None
    if body.tools:
        tools = []
        for i, tool in enumerate(body.tools):
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise APIError(400, f"tools.{i}.name: required")
            if tool.get("type") not in (None, "custom"):
                raise APIError(400, f"tools.{i}: server tools ({tool.get('type')!r}) are not supported")
            tools.append({"type": "function", "function": {
                "name": tool["name"], "description": tool.get("description", ""),
                "parameters": tool.get("input_schema") or {"type": "object"}}})
    choice = body.tool_choice or {"type": "auto"}
    kind = choice.get("type")
    if kind == "auto":
        return tools, "auto"
    if kind == "none":
        return tools, "none"
    if kind == "any":
        return tools, "required"
    if kind == "tool":
        return tools, {"type": "function", "function": {"name": choice.get("name")}}
    raise APIError(400, f"tool_choice.type: expected auto, any, tool or none, got {kind!r}")


def stop_reason(finish: FinishReason | None, matched: str | None, stop_sequences: list[str],
                has_calls: bool) -> tuple[str, str | None]:
    """Anthropic's (stop_reason, stop_sequence) for how a generation ended."""
    if finish is FinishReason.LENGTH:         # also inside a tool call: its input is partial
        return "max_tokens", None
    if has_calls:
        return "tool_use", None
    if matched is not None and matched in stop_sequences:
        return "stop_sequence", matched
    return "end_turn", None


def content_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat answer (content and tool_calls) as Anthropic content blocks."""
    blocks: list[dict[str, Any]] = []
    if message.get("reasoning_content"):       # local models sign nothing: an empty signature, as llama-server
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        try:
            arguments = json.loads(fn["arguments"]) if fn["arguments"] else {}
        except json.JSONDecodeError:
            arguments = {"_raw": fn["arguments"]}      # cut short by max_tokens
        blocks.append({"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"),
                       "name": fn["name"], "input": arguments})
    return blocks


def new_message(model: str, n_input: int) -> dict[str, Any]:
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": input_usage(n_input, 0) | {"output_tokens": 0}}


def input_usage(n_input: int, n_cached: int) -> dict[str, int]:
    """Anthropic's split of the prompt: `input_tokens` are the ones computed, `cache_read_input_tokens`
    the ones found in the KV cache (a reused prefix); their sum is what count_tokens reports."""
    return {"input_tokens": n_input - n_cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": n_cached}


__all__ = ["MessagesRequest", "chat_messages", "chat_tools", "content_blocks", "error_body", "new_message",
           "stop_reason", "template_kwargs"]
