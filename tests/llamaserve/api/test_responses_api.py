"""OpenAI's Responses API (/v1/responses) through the real `openai` client: answers equal the chat
route's, the streamed event sequence, structured output, a function-call round trip (stored and
stateless), the bounded store behind previous_response_id and GET/DELETE, and refused fields."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import openai
import pytest
from agent_script import CALLS, FINAL, QUESTION, TOOLS
from helpers import N_THREADS, assert_openai_error
from pydantic import BaseModel
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

KEY = "sk-test-responses"
STORE_SIZE = 3
FUNCTIONS = [{"type": "function", **t["function"]} for t in TOOLS]      # the Responses shape of the same tools
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                          "required": ["city"], "additionalProperties": False}}
TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", "response.output_text.delta", "response.output_text.done",
               "response.content_part.done", "response.output_item.done"]


class Person(BaseModel):
    name: Literal["Ann", "Bob"]
    adult: bool


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    config = {"api_key": KEY, "responses_store_size": STORE_SIZE, "defaults": {"n_ctx": 512, "n_threads": N_THREADS},
              "models": [{"alias": "tiny", "model": str(tiny_model_path)},
                         {"alias": "tiny-too", "model": str(tiny_model_path)}]}     # (unknown names: a 404)
    proc = ServerProcess(config, tmp_path_factory.mktemp("responses")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0)


def chat_reference(srv, messages, max_tokens) -> dict:
    r = srv.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": max_tokens,
                                               "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def test_text_response_equals_the_chat_answer(srv, client):
    resp = client.responses.create(model="tiny", instructions="You are terse.", input="Hello there",
                                   max_output_tokens=12, temperature=0)
    ref = chat_reference(srv, [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": "Hello there"}], 12)
    assert resp.object == "response" and resp.id.startswith("resp_") and resp.model == "tiny"
    assert [item.type for item in resp.output] == ["message"]
    assert resp.output_text == ref["choices"][0]["message"]["content"]
    cut = ref["choices"][0]["finish_reason"] == "length"
    assert resp.status == ("incomplete" if cut else "completed")
    assert (resp.incomplete_details and resp.incomplete_details.reason) == ("max_output_tokens" if cut else None)
    assert resp.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert resp.usage.output_tokens == ref["usage"]["completion_tokens"]
    assert resp.instructions == "You are terse." and resp.max_output_tokens == 12 and resp.temperature == 0


def test_input_items_render_like_chat_messages(srv, client):
    items = [{"role": "developer", "content": "Answer briefly."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "user", "content": "Tell me more"}]
    resp = client.responses.create(model="tiny", input=items, max_output_tokens=6, temperature=0, store=False)
    ref = chat_reference(srv, [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Hi"},
                               {"role": "assistant", "content": "Hello!"},
                               {"role": "user", "content": "Tell me more"}], 6)
    assert resp.output_text == ref["choices"][0]["message"]["content"]
    assert resp.usage.input_tokens == ref["usage"]["prompt_tokens"]


def test_stream_sends_the_documented_events(client):
    kwargs = dict(model="tiny", input="Once upon a time", max_output_tokens=10, temperature=0, store=False)
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(**kwargs, stream=True))
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert list(dict.fromkeys(kinds)) == TEXT_EVENTS + [f"response.{whole.status}"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == whole.output_text
    final = events[-1].response
    assert final.output_text == whole.output_text and final.usage.output_tokens == whole.usage.output_tokens
    assert events[0].response.status == "in_progress" and final.id == events[0].response.id


def test_structured_output(client):
    parsed = client.responses.parse(model="tiny", input="Invent a person", text_format=Person,
                                    max_output_tokens=64, temperature=0, store=False)
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, Person)
    with client.responses.stream(model="tiny", input="Invent a person", text_format=Person,
                                 max_output_tokens=64, temperature=0, store=False) as stream:
        final = stream.get_final_response()
    assert final.output_parsed == parsed.output_parsed
    loose = client.responses.create(model="tiny", input="Give JSON", max_output_tokens=64, temperature=0,
                                    text={"format": {"type": "json_object"}}, store=False)
    if loose.status == "completed":
        assert isinstance(json.loads(loose.output_text), dict)


@pytest.fixture(scope="module")
def agent(scripted):
    return openai.OpenAI(base_url=scripted[0].base_url + "/v1", api_key="unused", max_retries=0)


def test_function_call_round_trip(agent):
    """Two function calls and an answer on the scripted Qwen3 model (support/agent_script.py), chained by
    previous_response_id; the same conversation sent whole gives the same prompt and answer."""
    first = agent.responses.create(model="qwen3", input=QUESTION, tools=FUNCTIONS, max_output_tokens=400)
    previous, items = first, [{"role": "user", "content": QUESTION}]
    for name, args, result in CALLS:
        assert previous.status == "completed"
        call = previous.output[-1]
        assert call.type == "function_call" and call.name == name and json.loads(call.arguments) == args
        output = {"type": "function_call_output", "call_id": call.call_id, "output": result}
        items += [*[item.model_dump(exclude_none=True) for item in previous.output], output]
        previous = agent.responses.create(model="qwen3", previous_response_id=previous.id, input=[output],
                                          tools=FUNCTIONS, max_output_tokens=400)
        assert previous.previous_response_id
    assert previous.output_text == FINAL
    stateless = agent.responses.create(model="qwen3", tools=FUNCTIONS, max_output_tokens=400, store=False,
                                       input=items)
    assert stateless.usage.input_tokens == previous.usage.input_tokens and stateless.output_text == FINAL


def test_function_call_streams_its_arguments(agent):
    events = list(agent.responses.create(model="qwen3", input=QUESTION, tools=FUNCTIONS, tool_choice="required",
                                         max_output_tokens=400, stream=True, store=False))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    item = events[-1].response.output[-1]
    assert item.type == "function_call" and item.name == "get_weather"
    assert len(deltas) > 1 and "".join(deltas) == done.arguments == item.arguments
    assert json.loads(item.arguments) == {"city": "Paris"} and done.item_id == item.id
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call")
    assert added.item.id == item.id and added.output_index == len(events[-1].response.output) - 1
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.delta")


def test_previous_response_continues_the_conversation(srv, client):
    first = client.responses.create(model="tiny", input="Hello", instructions="Be kind.", max_output_tokens=5,
                                    temperature=0)
    second = client.responses.create(model="tiny", previous_response_id=first.id, input="And then?",
                                     max_output_tokens=5, temperature=0)
    # instructions are not carried over, the turns are
    ref = chat_reference(srv, [{"role": "user", "content": "Hello"},
                               {"role": "assistant", "content": first.output_text},
                               {"role": "user", "content": "And then?"}], 5)
    assert second.usage.input_tokens == ref["usage"]["prompt_tokens"]
    assert second.output_text == ref["choices"][0]["message"]["content"]


def test_store_get_delete_and_lru_eviction(srv, client):
    def new(**kw):
        return client.responses.create(model="tiny", input="Hi", max_output_tokens=1, temperature=0, **kw)

    a, b = new(), new()
    assert client.responses.retrieve(a.id).model_dump() == a.model_dump()     # a is now the most recent
    unstored = new(store=False)
    c, d = new(), new()                                                       # b goes, a stays
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(b.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    assert client.responses.retrieve(a.id).id == a.id and client.responses.retrieve(c.id).id == c.id
    assert srv.get(f"/v1/responses/{d.id}").json()["id"] == d.id
    assert httpx.delete(f"{srv.base_url}/v1/responses/{d.id}", headers=srv.headers()).json() == \
           {"id": d.id, "object": "response", "deleted": True}
    assert_openai_error(srv.get(f"/v1/responses/{d.id}"), 404)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="tiny", input="x", previous_response_id=b.id, max_output_tokens=1)
    assert info.value.body["param"] == "previous_response_id"


def test_routes_without_v1(srv):
    r = srv.post("/responses", json={"model": "tiny", "input": "Hi", "max_output_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "response"
    assert srv.get(f"/responses/{r.json()['id']}").json()["id"] == r.json()["id"]


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"background": True}, "background"),
    ({"reasoning": {"summary": "auto"}}, "reasoning"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"truncation": "auto"}, "truncation"),
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]}, "input"),  # no vision
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input.0.type"),
    ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"input": []}, "input"),
    ({"input": "word " * 600}, "input"),                   # longer than n_ctx
])
def test_unsupported_fields_are_refused(srv, extra, param):
    err = assert_openai_error(srv.post("/v1/responses", json={"model": "tiny", "input": "Hi", **extra}), 400)
    assert err["param"] == param and err["type"] == "invalid_request_error"


def test_errors_and_auth(srv, client):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=srv.base_url + "/v1", api_key="wrong", max_retries=0).responses.create(
            model="tiny", input="hi")
    assert_openai_error(srv.post("/v1/responses", json={"model": "tiny"}), 400)
    assert_openai_error(srv.get("/v1/responses/resp_missing?stream=true"), 400)
