"""An agent's loop through the real `openai` client, streamed: two tool round trips, then an answer, on
models whose answers are scripted in each family's own format (tests/support/agent_script.py).

A turn passes only when the server rendered exactly the prompt llama.cpp renders (a different history
rendering moves the answer off its scripted positions), streamed the tool call as its name then
argument deltas with no markup in content, and read the final answer back as content and reasoning.
"""

from __future__ import annotations

import json

import openai
import pytest
from agent_script import CALLS, FAMILIES, FINAL, QUESTION, TOOLS, WEATHER, assistant_call

pytestmark = [pytest.mark.server, pytest.mark.slow]
LOOPED = [alias for alias, conversation in FAMILIES.items() if conversation.tools is TOOLS]


@pytest.fixture(scope="module")
def client(scripted):
    return openai.OpenAI(base_url=scripted[0].base_url + "/v1", api_key="unused", max_retries=0)


def stream(client, alias: str, messages: list[dict], **kw) -> dict:
    chunks = list(client.chat.completions.create(model=alias, messages=messages, tools=kw.pop("tools", TOOLS),
                                                 max_tokens=kw.pop("max_tokens", 400), temperature=0.7,
                                                 stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls: dict[int, dict] = {}
    for d in deltas:
        for tc in d.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name, "arguments": []})
            assert tc.function.name in (None, call["name"]), "the name comes once, in the first delta"
            if tc.function.arguments:
                call["arguments"].append(tc.function.arguments)
    return {"content": "".join(d.content or "" for d in deltas),
            "reasoning": "".join(getattr(d, "reasoning_content", None) or "" for d in deltas),
            "calls": calls, "finish": next(c.choices[0].finish_reason for c in reversed(chunks) if c.choices)}


@pytest.mark.parametrize("alias", LOOPED)
def test_two_tool_round_trips_then_an_answer(client, scripted, alias):
    answers = scripted[1][alias]
    messages = [{"role": "user", "content": QUESTION}]
    for (name, args, result), (answer, reasoning) in zip(CALLS, answers):
        turn = stream(client, alias, messages)
        assert turn["finish"] == "tool_calls", (answer, turn)
        assert turn["content"].strip() == "", f"markup leaked into content: {turn['content']!r}"
        assert turn["reasoning"].strip() == reasoning
        [call] = turn["calls"].values()
        assert call["name"] == name and call["id"], call
        assert json.loads("".join(call["arguments"])) == args
        assert len(call["arguments"]) > 1, "the arguments come as they are generated, in several deltas"
        messages = [*messages, assistant_call(call["id"], name, args),
                    {"role": "tool", "tool_call_id": call["id"], "content": result}]
    final = stream(client, alias, messages)
    answer, reasoning = answers[-1]
    assert final["finish"] == "stop" and not final["calls"], final
    assert final["content"].strip() == FINAL, (answer, final)
    assert final["reasoning"].strip() == reasoning


@pytest.mark.parametrize("alias", ["qwen3", "llama3", "gpt-oss"])
def test_required_forces_the_call_through_llama_cpp_grammar(client, alias):
    """tool_choice required: llama.cpp's grammar, not lazy, taking the generation prompt first."""
    out = client.chat.completions.create(model=alias, messages=[{"role": "user", "content": QUESTION}],
                                         tools=TOOLS, tool_choice="required", max_tokens=400, temperature=0.7)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")


def test_a_named_function_offers_that_tool_alone(client):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    turn = stream(client, "qwen3-weather", [{"role": "user", "content": QUESTION}], tools=TOOLS, tool_choice=choice)
    assert turn["finish"] == "tool_calls" and turn["calls"][0]["name"] == "get_weather"
    assert json.loads("".join(turn["calls"][0]["arguments"])) == {"city": "Paris"}
    with pytest.raises(openai.BadRequestError, match="not among the tools"):
        client.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": QUESTION}],
                                       tools=[WEATHER], max_tokens=4,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})


@pytest.mark.parametrize("cut_before", ['"arguments"', "ris"])
def test_a_call_cut_by_max_tokens_is_a_partial_call(client, scripted, cut_before):
    """finish_reason length, the name and the argument text so far in tool_calls, no markup in content."""
    answer = scripted[1]["qwen3"][0][0]
    max_tokens = len(answer[:answer.index(cut_before)].encode())       # one token a byte
    kw = dict(model="qwen3", messages=[{"role": "user", "content": QUESTION}], tools=TOOLS, temperature=0)
    out = client.chat.completions.create(**kw, max_tokens=max_tokens)
    choice = out.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None, choice
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and '{"city": "Paris"}'.startswith(call.function.arguments)
    assert ("Pa" in call.function.arguments) == (cut_before == "ris")
    turn = stream(client, "qwen3", kw["messages"], max_tokens=max_tokens)
    assert turn["finish"] == "length" and not turn["content"]
    assert "".join(turn["calls"][0]["arguments"]) == call.function.arguments


def test_tools_on_a_template_that_cannot_call_them_are_refused(server):
    """The tiny model's own template renders no tools: asking it for a call is a 400 saying why, not text."""
    plain = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    for choice in ("auto", "required"):
        with pytest.raises(openai.BadRequestError, match="cannot call tools"):
            plain.chat.completions.create(model="base", messages=[{"role": "user", "content": "time?"}],
                                          tools=[tool], tool_choice=choice, max_tokens=4)
    out = plain.chat.completions.create(model="base", messages=[{"role": "user", "content": "time?"}],
                                        tools=[tool], tool_choice="none", max_tokens=4)
    assert out.choices[0].message.tool_calls is None
