"""Structured output through a real llamaserve: formats, patterns and bounds that validate, refusals
as OpenAI-shaped 400s, the whitespace extension (per request and per model), the grammar cache on
/metrics, and hostile schemas that are refused quickly without stalling other requests."""

from __future__ import annotations

import json
import random
import re
import string
import threading
import time

import httpx
import jsonschema
import pytest
from grammar_probe import GrammarProbe
from helpers import N_THREADS, assert_openai_error

pytestmark = pytest.mark.server
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    from server import ServerProcess

    config = {
        "parallel": 4, "idle_unload": 600, "grammar_cache_size": "8MiB",
        "defaults": {"n_ctx": 512, "n_threads": N_THREADS},
        "models": [{"alias": "base", "model": str(tiny_model_path)},
                   {"alias": "tight", "model": str(tiny_model_path), "json_whitespace": "none"}],
    }
    proc = ServerProcess(config, tmp_path_factory.mktemp("structured")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def bias(tiny_model):
    """Logit bias (as a request sends it) that makes random-weight outputs finish: see GrammarProbe."""
    return {str(k): v for k, v in GrammarProbe(tiny_model).closing_bias(11.0).items()}


def complete(srv, schema, *, n=1, seed=1, max_tokens=200, extra=None, model="base", timeout=120.0):
    body = {"model": model, "prompt": "JSON:", "max_tokens": max_tokens, "temperature": 1.0, "seed": seed,
            "n": n, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
            **(extra or {})}
    return httpx.post(srv.base_url + "/v1/completions", json=body, timeout=timeout)


SCHEMAS = [
    {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"}, "ip": {"type": "string", "format": "ipv4"},
        "host": {"type": "string", "format": "hostname"}, "mail": {"type": "string", "format": "email"}},
     "required": ["day", "at", "id", "ip", "host", "mail"]},
    {"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
        "price": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 100},
        "ratio": {"type": "number", "minimum": -1, "maximum": 1},
        "span": {"type": "string", "format": "duration"}, "v6": {"type": "string", "format": "ipv6"}},
     "required": ["code", "price", "ratio", "span", "v6"]},
    {"type": "array", "items": {"enum": ["red", "green", "blue", "cyan"]}, "uniqueItems": True, "minItems": 2},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
     "minProperties": 1, "maxProperties": 2, "dependentRequired": {"a": ["b"]}},
]


@pytest.mark.slow
@pytest.mark.parametrize("schema", SCHEMAS)
def test_outputs_validate_with_format_checking(srv, bias, schema):
    out = complete(srv, schema, n=4, extra={"logit_bias": bias})
    assert out.status_code == 200, out.text
    finished = [c["text"] for c in out.json()["choices"] if c["finish_reason"] == "stop"]
    assert len(finished) >= 2, out.json()["choices"]
    for text in finished:
        jsonschema.validate(json.loads(text), schema, format_checker=FORMAT_CHECKER)


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "string", "pattern": "^(?=a)a$"}, "lookaround"),
    ({"type": "string", "pattern": "^(a)\\1$"}, "backreferences"),
    ({"type": "string", "format": "iri"}, "format 'iri' is not supported"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "kaboom"}, "unknown type"),
    ({"type": 123}, "unknown type"),
    ({"type": "string", "pattern": "^(a$"}, "unbalanced"),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "oneOf"),
    ({"type": "string", "maxLength": 10**7}, "larger than"),
])
def test_refused_schemas_are_400s(srv, schema, message):
    for path, body in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        resp = httpx.post(srv.base_url + path, timeout=60, json={
            "model": "base", "max_tokens": 4, **body,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        err = assert_openai_error(resp, 400)
        assert re.search(message, err["message"]), err


WS_SCHEMA = {"type": "array", "items": {"const": 1}, "minItems": 3, "maxItems": 3}


@pytest.fixture(scope="module")
def spaces(tiny_model):
    """Logit bias that makes the model take every space and newline the grammar allows."""
    tokens = GrammarProbe(tiny_model).char_token
    return {str(tokens[b" "]): 30.0, str(tokens[b"\n"]): 30.0}


@pytest.mark.parametrize(("model", "whitespace", "expected"), [
    ("base", None, re.compile(r"\[ 1, 1, 1 \]")),               # compact: at most one space between tokens
    ("base", "none", re.compile(r"\[1,1,1\]")),
    ("tight", None, re.compile(r"\[1,1,1\]")),                  # the model's json_whitespace: none
    ("tight", "compact", re.compile(r"\[ 1, 1, 1 \]")),         # the request wins over the model
    ("base", "pretty", re.compile(r"\[(?:\n[ \t]{0,20}|[ ])1,(?:\n[ \t]{0,20}|[ ])1,(?:\n[ \t]{0,20}|[ ])1"
                                  r"(?:\n[ \t]{0,20}|[ ])\]")),
])
def test_whitespace_per_request_and_per_model(srv, spaces, model, whitespace, expected):
    extra = {"logit_bias": spaces, **({"json_whitespace": whitespace} if whitespace else {})}
    out = complete(srv, WS_SCHEMA, max_tokens=40, model=model, extra=extra)
    assert out.status_code == 200, out.text
    choice = out.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert expected.fullmatch(choice["text"]), choice["text"]


def test_whitespace_field_is_checked(srv):
    resp = complete(srv, WS_SCHEMA, extra={"json_whitespace": "loose"})
    err = assert_openai_error(resp, 400)
    assert err["param"] == "json_whitespace"


def _metric(srv, name: str) -> float:
    text = srv.get("/metrics").text
    return float(re.search(rf"^{name}(?:_total)? (\S+)$", text, re.M)[1])


def test_repeated_schema_compiles_once(srv):
    schema = {"enum": [f"city-{i}" for i in range(2000)], "title": f"cache-{time.time()}"}
    misses, hits = _metric(srv, "llamaserve_grammar_cache_misses"), _metric(srv, "llamaserve_grammar_cache_hits")
    for _ in range(3):
        out = complete(srv, schema, max_tokens=12)
        assert out.status_code == 200, out.text
    assert _metric(srv, "llamaserve_grammar_cache_misses") == misses + 1
    assert _metric(srv, "llamaserve_grammar_cache_hits") == hits + 2
    assert 0 < _metric(srv, "llamaserve_grammar_cache_bytes") <= 8 * 2**20


@pytest.mark.slow
def test_huge_enum_is_refused_quickly_and_others_keep_flowing(srv):
    rng = random.Random(1)
    values = ["".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(30, 46))) for _ in range(90000)]
    body = json.dumps({"model": "base", "prompt": "x", "max_tokens": 4, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": values}}}})
    assert len(body) > 3_500_000
    results: dict[str, float] = {}

    def hostile() -> None:
        start = time.monotonic()
        resp = httpx.post(srv.base_url + "/v1/completions", content=body, timeout=60,
                          headers={"content-type": "application/json"})
        results["hostile"] = time.monotonic() - start
        results["status"] = resp.status_code
        results["message"] = resp.json()["error"]["message"]

    def quick() -> float:
        start = time.monotonic()
        resp = httpx.post(srv.base_url + "/v1/completions", timeout=60,
                          json={"model": "base", "prompt": "Hello", "max_tokens": 8, "temperature": 0})
        assert resp.status_code == 200
        return time.monotonic() - start

    quick()                                       # the model is loaded
    results["alone"] = quick()
    thread = threading.Thread(target=hostile)
    thread.start()
    time.sleep(0.05)
    results["other"] = quick()
    thread.join()
    assert results["status"] == 400 and "larger than" in results["message"]
    assert results["hostile"] < 1.5, results      # body upload and parse included
    assert results["other"] < results["alone"] + 1.0, results


def test_large_enum_answers_from_the_enum(srv):
    values = [f"product-{i:05d}" for i in range(20000)]
    out = complete(srv, {"enum": values}, max_tokens=24, timeout=60)
    assert out.status_code == 200, out.text
    choice = out.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert json.loads(choice["text"]) in values
