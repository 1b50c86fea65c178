"""Tool calls in the three common model styles: forcing them with a grammar, parsing them back.

Styles: Hermes/Qwen ``<tool_call>{"name":..,"arguments":..}</tool_call>``, Llama-3 JSON
``{"name":..,"parameters":..}`` and Mistral ``[TOOL_CALLS][{"name":..,"arguments":..}]``.
The style follows the chat template's own markers, so forced calls look like what the model
was trained to emit.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from llamacore.grammar.json_schema import schema_to_grammar

HERMES, LLAMA3, MISTRAL = "hermes", "llama3", "mistral"


def style_for(template: str) -> str:
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<tool_call>" in template:
        return HERMES
    if "<|python_tag|>" in template or "ipython" in template:
        return LLAMA3
    return HERMES


def _call_schema(tools: list[dict[str, Any]], args_key: str) -> dict[str, Any]:
    """JSON schema of one call to any of `tools` (a oneOf over the functions).

    Each tool's `$defs`/`definitions` move to the combined schema's root so that its local
    `#/$defs/...` references still resolve there.
    """
    variants: list[dict[str, Any]] = []
    hoisted: dict[str, dict[str, Any]] = {"$defs": {}, "definitions": {}}
    for tool in tools:
        fn = tool.get("function", tool)
        params = dict(fn.get("parameters") or {"type": "object"})
        for section in hoisted:
            for name, definition in (params.pop(section, None) or {}).items():
                if hoisted[section].setdefault(name, definition) != definition:
                    raise ValueError(f"tools define '{section}/{name}' differently; rename one of them")
        variants.append({
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, args_key: params},
            "required": ["name", args_key],
        })
    schema: dict[str, Any] = variants[0] if len(variants) == 1 else {"oneOf": variants}
    return {**schema, **{k: v for k, v in hoisted.items() if v}}


def forcing_grammar(tools: list[dict[str, Any]], style: str) -> str:
    """GBNF that makes the model emit exactly one call to one of `tools` in `style`."""
    args_key = "parameters" if style == LLAMA3 else "arguments"
    body = schema_to_grammar(_call_schema(tools, args_key))
    # Rename the schema's root so the call can be wrapped in the style's markers.
    body = re.sub(r"^root ::=", "call ::=", body, count=1, flags=re.M)
    if style == HERMES:
        root = 'root ::= "<tool_call>\\n" call "\\n</tool_call>"'
    elif style == MISTRAL:
        root = 'root ::= "[TOOL_CALLS][" call "]"'
    else:
        root = "root ::= call"
    return root + "\n" + body


def _decode_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object or array of objects found in `text`."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                i += 1
                continue
            found.extend(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, dict))
            i = end
        else:
            i += 1
    return found


_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


def parse_partial(text: str, style: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    """A call cut short (by max_tokens): (content before it, one call with the name and the argument
    text generated so far), as OpenAI answers with finish_reason "length"; no call begun -> (text, [])."""
    starts = [i for i in (text.find("<tool_call>"), text.find("[TOOL_CALLS]")) if i >= 0]
    marker = {HERMES: "<tool_call>", MISTRAL: "[TOOL_CALLS]"}.get(style or HERMES, "")
    starts += [len(text) - k for k in range(3, len(marker)) if text.endswith(marker[:k])]  # cut inside it
    if starts:
        head, body = text[:min(starts)], text[min(starts):]
    elif style == LLAMA3 or text.lstrip().startswith(("{", "<|python_tag|>")):
        stripped = text.replace("<|python_tag|>", "").lstrip()
        if not stripped.startswith("{"):
            return text, []
        head, body = "", stripped
    else:
        return text, []
    name = _NAME.search(body)
    args = _ARGS.search(body)
    call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": json.loads(f'"{name.group(1)}"') if name else "",
                         "arguments": body[args.end():] if args else ""}}
    return (head.strip() or None), [call]


def parse(text: str, style: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    """Split model output into (remaining content, OpenAI `tool_calls`); no calls -> (text, [])."""
    content, calls = text, []
    if "<tool_call>" in text:
        blocks = re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, flags=re.S)
        calls = [c for b in blocks for c in _decode_objects(b)]
        content = re.sub(r"<tool_call>.*?(</tool_call>|$)", "", text, flags=re.S)
    elif "[TOOL_CALLS]" in text:
        head, _, tail = text.partition("[TOOL_CALLS]")
        calls, content = _decode_objects(tail), head
    elif style == LLAMA3 or text.lstrip().startswith(("{", "<|python_tag|>")):
        stripped = text.replace("<|python_tag|>", "").strip()
        objs = _decode_objects(stripped)
        if objs and stripped.startswith("{") and all("name" in o for o in objs):
            calls, content = objs, ""
    out = []
    for call in calls:
        if not isinstance(call.get("name"), str):
            continue
        args = call.get("arguments", call.get("parameters", {}))
        out.append({
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call["name"],
                         "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)},
        })
    if not out:
        return text, []
    content = content.strip()
    return (content or None), out
