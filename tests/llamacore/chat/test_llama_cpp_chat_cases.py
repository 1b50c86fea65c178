"""llama.cpp's own parser cases (tests/test-chat.cpp, test_template_output_peg_parsers), run through the
binding: each template renders the case's inputs with ChatTemplates.apply, and the model output is fed
to ChatParser one character at a time, as a stream arrives. The deltas, accumulated, and the final
parse must both equal the message llama.cpp's test expects (its comparison: text stripped, arguments
as JSON, ids exact). The cases are read from the vendored source (tests/support/llama_chat_cases.py).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from llama_chat_cases import ChatCase, read_cases

from llamacore._core import ChatParser, ChatTemplates

CASES, SKIPPED = read_cases()


@cache
def _templates(path) -> ChatTemplates:
    return ChatTemplates(template=path.read_text(encoding="utf-8"))      # no BOS/EOS, as the C++ test reads them


def test_most_cases_are_read():
    """The reader follows llama.cpp's file; the chains it cannot evaluate stay few (local variables)."""
    assert len(CASES) >= 350 and len(SKIPPED) <= 0.06 * (len(CASES) + len(SKIPPED)), SKIPPED


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    if message.get("tool_calls"):
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}}
                             for c in message["tool_calls"]]
    return out


def _json(text: str) -> str:
    try:
        return json.dumps(json.loads(text))
    except ValueError:
        return ""           # partial arguments are not compared, as in llama.cpp's test


def _comparable(message: dict[str, Any]) -> tuple:
    return ((message.get("content") or "").strip(), (message.get("reasoning_content") or "").strip(),
            [(c["name"], _json(c["arguments"]), c["id"]) for c in message.get("tool_calls") or []])


def _ours(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "tool_calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"],
                                       "id": c.get("id", "")} for c in message.get("tool_calls") or []]}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parse_equals_llama_cpp(case: ChatCase):
    p = case.params
    messages = [_wire(m) for m in p.get("messages") or [{"role": "user", "content": "Hey there!"}]]
    params = _templates(case.template).apply(
        messages, tools=p.get("tools"), tool_choice=p.get("tool_choice", "auto"),
        parallel_tool_calls=p.get("parallel_tool_calls", False),
        add_generation_prompt=p.get("add_generation_prompt", True),
        continue_final_message=p.get("continue_final_message"), reasoning_format=p.get("reasoning_format", "none"),
        enable_thinking=p.get("enable_thinking", True), json_schema=p.get("json_schema"))
    parser = ChatParser(params, reasoning_format="none")     # llama.cpp's test parses with the params' defaults
    accumulated: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": []}
    deltas = [d for ch in case.output for d in parser.update(ch)]
    if not case.is_partial:
        deltas += parser.finish()
    for reasoning, content, index, id_, name, arguments in deltas:
        accumulated["reasoning_content"] += reasoning
        accumulated["content"] += content
        if index >= 0:
            while len(accumulated["tool_calls"]) <= index:
                accumulated["tool_calls"].append({"name": "", "arguments": "", "id": ""})
            call = accumulated["tool_calls"][index]
            call["name"] = name or call["name"]
            call["id"] = id_ or call["id"]
            call["arguments"] += arguments
    assert _comparable(_ours(parser.message)) == _comparable(case.expect)
    assert _comparable(accumulated) == _comparable(case.expect)
