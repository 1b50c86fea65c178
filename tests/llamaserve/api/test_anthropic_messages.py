"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through the real `anthropic` client:
answers equal the chat route's, stop reasons, streaming events, a tool round trip, errors and auth."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest
from agent_script import CALLS, FINAL, QUESTION, TOOLS
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

KEY = "sk-test-anthropic"
GREEDY = {"temperature": 0}      # today's client has no sampling arguments; the API still takes them


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    config = {"api_key": KEY, "unknown_model": "error", "defaults": {"n_ctx": 512, "n_threads": N_THREADS},
              "models": [{"alias": "claude-tiny", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("anthropic")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(srv):
    return anthropic.Anthropic(base_url=srv.base_url, api_key=KEY, max_retries=0)     # sends x-api-key


def chat_reference(srv, messages, max_tokens, **extra) -> dict:
    r = srv.post("/v1/chat/completions", json={"model": "claude-tiny", "messages": messages,
                                               "max_tokens": max_tokens, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_message_equals_the_chat_answer_and_reports_usage(srv, client):
    msg = client.messages.create(model="claude-tiny", max_tokens=12, extra_body=GREEDY, system="You are terse.",
                                 messages=[{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}])
    ref = chat_reference(srv, [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": "Hello there"}], 12)
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == ref["message"]["content"]
    assert msg.stop_reason == ("max_tokens" if ref["finish_reason"] == "length" else "end_turn")
    count = client.messages.count_tokens(model="claude-tiny", system="You are terse.",
                                         messages=[{"role": "user", "content": "Hello there"}])
    # computed plus found in the KV cache: the whole prompt, as count_tokens counts it
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == count.input_tokens > 0
    assert msg.usage.cache_creation_input_tokens == 0
    assert msg.usage.output_tokens == 12 or msg.stop_reason == "end_turn"


def test_a_repeated_prompt_is_read_from_the_cache(client):
    messages = [{"role": "user", "content": "Tell me about the cache, twice"}]
    client.messages.create(model="claude-tiny", max_tokens=2, extra_body=GREEDY, messages=messages)
    again = client.messages.create(model="claude-tiny", max_tokens=2, extra_body=GREEDY, messages=messages)
    total = client.messages.count_tokens(model="claude-tiny", messages=messages).input_tokens
    # all but the last prompt token come from the KV cache; that one is computed for its logits
    assert (again.usage.input_tokens, again.usage.cache_read_input_tokens) == (1, total - 1)


def test_stop_sequence_is_named(srv, client):
    plain = client.messages.create(model="claude-tiny", max_tokens=24, extra_body=GREEDY,
                                   messages=[{"role": "user", "content": "Tell a story"}])
    text = plain.content[0].text
    word = next(w for w in text.split() if len(w) > 2)           # a stop string the answer really contains
    msg = client.messages.create(model="claude-tiny", max_tokens=24, extra_body=GREEDY, stop_sequences=[word],
                                 messages=[{"role": "user", "content": "Tell a story"}])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == word
    assert msg.content[0].text == text[:text.index(word)]


def test_stream_sends_anthropics_events_and_the_same_text(client):
    kwargs = dict(model="claude-tiny", max_tokens=16, extra_body=GREEDY,
                  messages=[{"role": "user", "content": "Once upon a time"}])
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    events = [e.type for e in client.messages.create(**kwargs, stream=True)]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(events)


def test_tool_use_round_trip(scripted):
    """Two tool round trips and an answer on the scripted Qwen3 model (support/agent_script.py): the
    prompts equal the chat route's, tool_use blocks carry the calls, the last turn is text."""
    proc, answers = scripted
    client = anthropic.Anthropic(base_url=proc.base_url, api_key="unused", max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    messages: list[dict] = [{"role": "user", "content": QUESTION}]
    for i, (name, args, result) in enumerate(CALLS):
        kwargs = dict(model="qwen3", max_tokens=400, tools=tools, messages=messages)
        if i == 0:            # streamed: the input arrives as input_json_delta events
            with client.messages.stream(**kwargs, tool_choice={"type": "any"}) as stream:
                events = list(stream)
                reply = stream.get_final_message()
            partial = [e.delta.partial_json for e in events
                       if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
            assert len(partial) > 1 and json.loads("".join(partial)) == args
        else:
            reply = client.messages.create(**kwargs)
        assert reply.stop_reason == "tool_use"
        use = reply.content[-1]
        assert use.type == "tool_use" and use.name == name and use.input == args and use.id.startswith("toolu_")
        assert not [b for b in reply.content if b.type == "text" and b.text.strip()]
        messages += [{"role": "assistant", "content": [b.model_dump() for b in reply.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": result}]}]
    final = client.messages.create(model="qwen3", max_tokens=400, tools=tools, messages=messages)
    assert final.stop_reason == "end_turn"
    assert [b.text for b in final.content if b.type == "text"] == [FINAL]


def test_errors_come_in_anthropics_shape(srv, client):
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "not_found_error"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError, match="vision"):
        client.messages.create(model="claude-tiny", max_tokens=4, messages=[{"role": "user", "content": [image]}])
    missing = httpx.post(srv.base_url + "/v1/messages", headers={"x-api-key": KEY}, timeout=30,
                         json={"model": "claude-tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
    assert missing.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=srv.base_url, api_key="wrong", max_retries=0).messages.create(
            model="claude-tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    bearer = httpx.post(srv.base_url + "/v1/messages", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                        json={"model": "claude-tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert bearer.status_code == 200 and bearer.json()["type"] == "message"
