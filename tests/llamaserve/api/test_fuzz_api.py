"""Property-based HTTP fuzzing of a real llamaserve process.

schemathesis generates request bodies from the server's own /openapi.json (valid bodies and
deliberately invalid ones) for the three POST routes; hypothesis picks the model and keeps
generation short. Every answer must be a non-5xx (or a 503 with Retry-After); every error
body must be OpenAI-shaped; streams must end with [DONE] and carry no server errors; and the
server must stay healthy. Hand-written nasty requests follow.
"""

from __future__ import annotations

import collections
import json

import httpx
import pytest
from helpers import assert_openai_error, check_error_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server import ServerProcess

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]

COMPLETIONS, CHAT, EMBEDDINGS = "/v1/completions", "/v1/chat/completions", "/v1/embeddings"
MODEL_FOR = {COMPLETIONS: "m", CHAT: "m", EMBEDDINGS: "emb"}
STATS: collections.Counter = collections.Counter()
SETTINGS = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def api(tmp_path_factory, tiny_model_path, embed_model_path):
    config = {
        "idle_unload": 600, "parallel": 2, "max_queue": 8, "max_body_bytes": "4MiB",
        "defaults": {"n_ctx": 128, "n_threads": 1},
        "models": [{"alias": "m", "model": str(tiny_model_path)},
                   {"alias": "emb", "model": str(embed_model_path), "embedding": True, "pooling_type": "mean"}],
    }
    proc = ServerProcess(config, tmp_path_factory.mktemp("fuzz_api")).start()
    yield proc
    print(f"\nfuzz_api: {sum(STATS.values())} requests, statuses {dict(sorted(STATS.items()))}")
    assert proc.stop() == 0, proc.log()


def operation_strategies(api, paths) -> dict:
    """Body strategies (valid and invalid) for the POST `paths`, from the running server's /openapi.json."""
    schemathesis = pytest.importorskip("schemathesis")
    doc = httpx.get(api.base_url + "/openapi.json", timeout=10).json()
    assert doc["openapi"].startswith("3.1")
    # The client stops reading an event stream after `max-stream-events` events (20 by default),
    # which would cut off [DONE] of a long stream (4 choices x 5 chunks).
    config = schemathesis.config.SchemathesisConfig.from_dict({"max-stream-events": 1000})
    schema = schemathesis.openapi.from_dict(doc, config=config)
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    return {path: st.one_of(*(schema[path]["POST"].as_strategy(mode) for mode in modes)) for path in paths}


@pytest.fixture(scope="module")
def operations(api):
    return operation_strategies(api, MODEL_FOR)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def tame(body, route: str, data) -> None:
    """Point most bodies at the route's model and keep valid generation lengths tiny (n_ctx 128)."""
    if not isinstance(body, dict):
        return
    choice = data.draw(st.sampled_from(["keep", "right", "right", "right", "other", "drop"]), label="model")
    if choice == "right":
        body["model"] = MODEL_FOR[route]
    elif choice == "other":
        body["model"] = data.draw(st.sampled_from(["m", "emb", "nope", "", "../m", None]), label="other model")
    elif choice == "drop":
        body.pop("model", None)
    if route == EMBEDDINGS:
        return
    for key in ("max_tokens", "max_completion_tokens"):
        if _int(body.get(key)) and body[key] > 4:
            body[key] = 1 + body[key] % 4
    if not _int(body.get("max_tokens")) and not _int(body.get("max_completion_tokens")):
        body["max_tokens"] = 3           # (a missing or null limit means: until the context is full)
    if _int(body.get("n")) and 1 <= body["n"] <= 16:
        body["n"] = 1 + body["n"] % 2


def header(resp, name: str) -> str | None:
    for key, values in resp.headers.items():
        if key.lower() == name.lower():
            return values[0] if isinstance(values, list) else values
    return None


def check_response(status: int, headers_get, content: bytes, where: str) -> None:
    STATS[status] += 1
    if status >= 500:
        assert status == 503 and headers_get("retry-after"), f"{where}: {status} {content[:500]!r}"
    ctype = headers_get("content-type") or ""
    if not 200 <= status < 300:
        assert ctype.startswith("application/json"), f"{where}: {status} {ctype}"
        body = json.loads(content)
        assert set(body) == {"error"}, f"{where}: {body!r}"
        check_error_body(body["error"], where)
    elif ctype.startswith("text/event-stream"):
        events = [line[6:] for line in content.decode().splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", f"{where}: {content[-500:]!r}"
        for event in events[:-1]:
            chunk = json.loads(event)
            if "error" in chunk:
                check_error_body(chunk["error"], where)
                assert chunk["error"]["type"] != "server_error", f"{where}: server error mid-stream: {chunk}"
    else:
        body = json.loads(content)
        assert body.get("object") in ("text_completion", "chat.completion", "list"), f"{where}: {body!r}"


def run_case(api, case, where: str) -> None:
    resp = case.call(base_url=api.base_url, timeout=60)
    try:
        check_response(resp.status_code, lambda n: header(resp, n), resp.content,
                       f"{where} {case.body!r:.500}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server log (tail) ---\n{api.log()[-4000:]}") from None
    health = httpx.get(api.base_url + "/health", timeout=10)
    assert health.status_code == 200, f"server unhealthy after {where} {case.body!r:.500}: {api.log()}"


@pytest.mark.parametrize("route", list(MODEL_FOR))
def test_schemathesis_fuzz(api, operations, route):
    @SETTINGS
    @given(data=st.data())
    def fuzz(data):
        case = data.draw(operations[route], label="case")
        tame(case.body, route, data)
        run_case(api, case, route)

    fuzz()
    assert api.proc.poll() is None


# -- hand-written nasty requests ------------------------------------------------------------


def raw_post(api, route: str, content: bytes) -> httpx.Response:
    resp = httpx.post(api.base_url + route, content=content, headers={"content-type": "application/json"},
                      timeout=120)
    check_response(resp.status_code, resp.headers.get, resp.content, f"{route} {content[:200]!r}")
    return resp


def post(api, route: str, body: dict) -> httpx.Response:
    return raw_post(api, route, json.dumps(body).encode())


def completion(**kw) -> dict:
    return {"model": "m", "prompt": "Hello", "max_tokens": 2, **kw}


def chat(content="Hello", **kw) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 2, **kw}


def expect_error(resp: httpx.Response, status: int = 400, param: str | None = None) -> dict:
    err = assert_openai_error(resp, status)
    if param is not None:
        assert (err["param"] or "").split(".")[0] == param, err
    return err


def test_invalid_utf8_body(api):
    expect_error(raw_post(api, COMPLETIONS, b'{"model": "m", "prompt": "\xff\xfe\xc3", "max_tokens": 2}'))
    expect_error(raw_post(api, CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'))


def test_three_megabyte_prompt_is_context_exceeded(api):
    resp = post(api, COMPLETIONS, completion(prompt="hello " * 500_000))     # 3 MB < 4 MiB limit
    assert expect_error(resp)["code"] == "context_length_exceeded"
    expect_error(post(api, COMPLETIONS, completion(prompt="x" * (5 << 20))), 413)


def test_null_model_uses_the_default(api):
    resp = post(api, COMPLETIONS, completion(model=None))
    assert resp.status_code == 200 and resp.json()["model"] == "m"


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json(api, depth):
    nested = b"[" * depth + b"]" * depth
    expect_error(raw_post(api, COMPLETIONS, b'{"model": "m", "prompt": ' + nested + b"}"))
    expect_error(raw_post(api, EMBEDDINGS, b'{"model": "emb", "input": ' + nested + b"}"))
    expect_error(raw_post(api, CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "x"}], '
                                     b'"response_format": {"type": "json_object", "schema": '
                                     + b'{"items": ' * depth + b"{}" + b"}" * depth + b"}}"))


def test_limits_on_counts(api):
    expect_error(post(api, COMPLETIONS, completion(stop=["x"] * 1000)))
    expect_error(post(api, CHAT, chat(stop=["x"] * 1000)))
    expect_error(post(api, COMPLETIONS, completion(n=1000)), param="n")
    # parallel 2 + max_queue 8: 16 choices can never all be admitted, so no retryable 503
    expect_error(post(api, COMPLETIONS, completion(n=16)), param="n")
    expect_error(post(api, COMPLETIONS, completion(prompt=["a", "b", "c"], n=4)), param="n")
    expect_error(post(api, CHAT, chat(logprobs=True, top_logprobs=10**6)), param="top_logprobs")
    expect_error(post(api, COMPLETIONS, completion(logprobs=10**6)), param="logprobs")


@pytest.mark.parametrize("bias", [{"99999999": 1}, {"32000": 5}, {"-1": 1}, {"99999999999999999999999": 1},
                                  {"abc": 1}, {"": 1}, {"1.5": 1}, {"5": "x"}])
def test_bad_logit_bias(api, bias):
    expect_error(post(api, COMPLETIONS, completion(logit_bias=bias)), param="logit_bias")
    expect_error(post(api, CHAT, chat(logit_bias=bias, stream=True)), param="logit_bias")
    resp = post(api, COMPLETIONS, completion())           # the model's worker survived
    assert resp.status_code == 200, resp.text


def test_nan_logit_bias(api):
    expect_error(raw_post(api, COMPLETIONS, b'{"model": "m", "prompt": "x", "max_tokens": 2, '
                                            b'"logit_bias": {"5": NaN}}'), param="logit_bias")
    resp = raw_post(api, COMPLETIONS, b'{"model": "m", "prompt": "x", "max_tokens": 2, "temperature": 0, '
                                      b'"logit_bias": {"5": -Infinity}}')
    assert resp.status_code == 200


@pytest.mark.parametrize("extra", [{"max_tokens": 10**12}, {"seed": -1}, {"seed": 2**70}, {"seed": -(2**70)},
                                   {"top_k": 10**12}, {"max_tokens": 2, "n": 8, "seed": 2**64 - 1}])
def test_extreme_numbers_are_accepted(api, extra):
    resp = post(api, COMPLETIONS, completion(**extra))
    assert resp.status_code == 200, resp.text
    resp = post(api, CHAT, chat(**extra))
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("body", [
    chat([{"type": "text", "text": 5}]),
    chat([{"type": "text", "text": None}]),
    chat([5]),
    chat(response_format={"type": "json_schema", "json_schema": 5}),
    chat(response_format={"type": "json_object", "schema": {"type": "object", "properties": 5}}),
    chat(response_format={"type": "json_object", "schema": {"type": "array", "prefixItems": 5}}),
    chat(response_format={"type": "json_object", "schema": {"type": "string", "minLength": 10**9}}),
    chat(tools=[{"type": "function", "function": 5}], tool_choice="required"),
    chat(tools=[{"type": "function", "function": {"name": "f", "parameters": 5}}], tool_choice="required"),
    chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function", "function": 5}),
    chat(tools=[5], tool_choice={"type": "function", "function": {"name": "f"}}),
], ids=lambda b: json.dumps(b)[60:140])
def test_malformed_structures_are_client_errors(api, body):
    expect_error(post(api, CHAT, body))
    if "response_format" in body:
        expect_error(post(api, COMPLETIONS, completion(response_format=body["response_format"])))


# -- Anthropic's Messages route: the same fuzzing, Anthropic's shapes ---------------------------

MESSAGES = "/v1/messages"


def check_messages_response(status: int, content: bytes, ctype: str, where: str) -> None:
    """No 5xx but 503; errors as {"type": "error", "error": {type, message}}; answers as a message or
    Anthropic's event stream (an error event allowed, never a server error)."""
    assert status < 500 or status == 503, f"{where}: {status} {content[:500]!r}"
    if ctype.startswith("text/event-stream"):
        text = content.decode()
        assert text.startswith("event: message_start"), f"{where}: {text[:300]!r}"
        for line in text.splitlines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "error":
                    assert event["error"]["type"] != "api_error", f"{where}: {event}"
        return
    body = json.loads(content)
    if status == 200:
        assert body["type"] == "message" and body["role"] == "assistant", f"{where}: {body!r}"
    else:
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, f"{where}: {body!r}"


def fuzz_route(api, route: str, shorten, check) -> None:
    """Fuzz one route's schema: half the cases name the real model, `shorten(body)` keeps generations
    short, `check` judges each answer, and the server must stay up throughout."""
    strategy = operation_strategies(api, [route])[route]

    @SETTINGS
    @given(data=st.data())
    def fuzz(data):
        case = data.draw(strategy, label="case")
        if isinstance(case.body, dict):
            if data.draw(st.booleans(), label="right model"):
                case.body["model"] = "m"
            shorten(case.body)
        resp = case.call(base_url=api.base_url, timeout=60)
        check(resp.status_code, resp.content, header(resp, "content-type") or "", f"{route} {case.body!r:.500}")
        assert httpx.get(api.base_url + "/health", timeout=10).status_code == 200, api.log()

    fuzz()
    assert api.proc.poll() is None


def test_schemathesis_fuzz_messages(api):
    def shorten(body):
        if _int(body.get("max_tokens")) and body["max_tokens"] > 4:
            body["max_tokens"] = 1 + body["max_tokens"] % 4
    fuzz_route(api, MESSAGES, shorten, check_messages_response)


# -- OpenAI's Responses route: typed events, no [DONE] ------------------------------------------

RESPONSES = "/v1/responses"


def check_responses_response(status: int, content: bytes, ctype: str, where: str) -> None:
    """No 5xx but 503; errors OpenAI-shaped; answers a response object or its numbered event stream,
    ending in response.completed or response.incomplete unless an error event (never a server error) ends it."""
    STATS[status] += 1
    assert status < 500 or status == 503, f"{where}: {status} {content[:500]!r}"
    if ctype.startswith("text/event-stream"):
        events = [json.loads(line[6:]) for line in content.decode().splitlines() if line.startswith("data: ")]
        assert [e["sequence_number"] for e in events] == list(range(len(events))), f"{where}: {content[:300]!r}"
        assert events[0]["type"] == "response.created", f"{where}: {events[0]}"
        last = events[-1]
        if last["type"] == "error":
            assert last["code"] is None or isinstance(last["code"], str), f"{where}: {last}"
            assert not last["message"].startswith("generation failed"), f"{where}: {last}"
        else:
            assert last["type"] in ("response.completed", "response.incomplete"), f"{where}: {last}"
        return
    body = json.loads(content)
    if status == 200:
        assert body["object"] == "response" and body["status"] in ("completed", "incomplete"), f"{where}: {body!r}"
    else:
        assert set(body) == {"error"}, f"{where}: {body!r}"
        check_error_body(body["error"], where)


def test_schemathesis_fuzz_responses(api):
    def shorten(body):
        limit = body.get("max_output_tokens")
        body["max_output_tokens"] = 1 + limit % 4 if _int(limit) and limit > 4 else limit or 3
    fuzz_route(api, RESPONSES, shorten, check_responses_response)
