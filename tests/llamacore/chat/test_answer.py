"""Answers read by llama.cpp's parsers (llamacore.chat.answer): tool calls of several model families, whole
and streamed (id and name first, then the arguments as they grow, no markup sent as content)."""

from __future__ import annotations

import itertools
import json

import pytest
from chat_shapes import SHAPES, TEMPLATES

from llamacore.chat import native
from llamacore.chat.answer import AnswerFormat

ROME = {"city": "Rome"}
ANSWERS = {
    "Qwen-Qwen3-0.6B.jinja": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
    "Qwen3-Coder.jinja": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
                         "</tool_call>",
    "unsloth-mistral-Devstral-Small-2507.jinja": '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja":
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
}


def answer_format(template: str, reasoning_format: str = "auto") -> AnswerFormat:
    body = SHAPES["tools_offered"]
    params = native.render(native.compiled((TEMPLATES / template).read_text(), "<s>", "</s>"), body["messages"],
                           tools=body["tools"], reasoning_format=reasoning_format)
    return AnswerFormat(params, reasoning_format, tools=True)


def ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


@pytest.mark.parametrize("template", sorted(ANSWERS))
def test_a_tool_call_is_read_whole(template):
    message = answer_format(template).message(ANSWERS[template], ids())
    (call,) = message["tool_calls"]
    assert call["id"] == "call_0" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == ROME
    assert not message["content"]


@pytest.mark.parametrize("template", sorted(ANSWERS))
def test_a_tool_call_streams_as_name_then_argument_deltas(template):
    reader = answer_format(template).reader(ids(), stream=True)
    text = ANSWERS[template]
    deltas = [d for i in range(0, len(text), 3) for d in reader.push(text[i:i + 3])] + reader.finish()
    assert not "".join(d.content for d in deltas).strip()          # no markup as content
    calls = [d for d in deltas if d.tool_index == 0]
    assert calls[0].tool_name == "get_weather" and calls[0].tool_id == "call_0"
    assert all(not d.tool_name for d in calls[1:]) and len(calls) > 1
    assert json.loads("".join(d.arguments for d in calls)) == ROME


def test_reasoning_and_content_are_split_and_streamed():
    fmt = answer_format("Qwen-Qwen3-0.6B.jinja")
    text = "<think>\nLet me see.\n</think>\n\nIt is sunny."
    message = fmt.message(text, ids())
    assert message["content"] == "It is sunny." and message["reasoning_content"].strip() == "Let me see."
    reader = fmt.reader(ids(), stream=True)
    deltas = [d for ch in text for d in reader.push(ch)] + reader.finish()
    assert "".join(d.reasoning for d in deltas).strip() == "Let me see."
    assert "".join(d.content for d in deltas) == "It is sunny."


def test_reasoning_format_none_keeps_thinking_in_the_content():
    text = "<think>\nhm\n</think>\n\nSunny."
    message = answer_format("Qwen-Qwen3-0.6B.jinja", "none").message(text, ids())
    assert "<think>" in message["content"] and "reasoning_content" not in message


def test_an_answer_that_does_not_match_the_format_is_all_content():
    text = "<tool_call>\n{not json at all\n</tool_call> trailing"
    message = answer_format("Qwen-Qwen3-0.6B.jinja").message(text, ids())
    assert message == {"role": "assistant", "content": text}


def test_parallel_calls_have_their_own_index():
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>')
    reader = answer_format("Qwen-Qwen3-0.6B.jinja").reader(ids())
    deltas = reader.push(text) + reader.finish()
    assert {d.tool_index for d in deltas if d.tool_name} == {0, 1}
    assert [c["function"]["name"] for c in reader.message["tool_calls"]] == ["get_weather", "get_time"]
