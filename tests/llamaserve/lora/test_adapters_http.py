"""Per-request adapters over HTTP, driven by the real `openai` client: `lora_adapters` by name,
llama.cpp's `lora` by id, /v1/models with parents, /lora-adapters, and every refused request.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest
from helpers import N_THREADS, assert_openai_error
from server import ServerProcess

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]

# the aliases' default adapter sets, by adapter name ("lora-a" is lora-a.gguf's stem, "style" names lora-b)
ALIAS_SETS = {"a-half": {"lora-a": 0.5}, "a-minus-b": {"lora-a": 1.0, "style": -0.5}, "b-two": {"style": 2.0},
              "b-neg": {"style": -1.25}}
PROMPTS = ["Once upon a time", "The cat sat", "Numbers: 1 2 3"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path, embed_model_path):
    base, paths = str(tiny_model_path), {"lora-a": str(lora_a_path), "style": str(lora_b_path)}
    config = {
        "idle_unload": 600, "parallel": 8, "max_queue": 64,
        "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
        "models": [
            {"alias": "base", "model": base, "adapters": [{"path": str(lora_b_path), "name": "style"}]},
            *({"alias": alias, "model": base, "lora_adapters": {paths[n]: s for n, s in scales.items()}}
              for alias, scales in ALIAS_SETS.items()),
            {"alias": "emb", "model": str(embed_model_path), "embedding": True, "pooling_type": "mean"},
        ],
    }
    proc = ServerProcess(config, tmp_path_factory.mktemp("adapters_http")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)


def complete(client, model, prompt, max_tokens=10, **extra):
    return client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                     extra_body=extra or None).choices[0].text


def test_models_list_adapter_aliases_with_their_parent(client, srv):
    cards = {m.id: m.model_dump() for m in client.models.list()}
    assert set(cards) == {"base", "emb", *ALIAS_SETS}
    assert cards["base"]["parent"] is None and "lora_adapters" not in cards["base"]
    for alias, scales in ALIAS_SETS.items():
        assert cards[alias]["parent"] == "base" and cards[alias]["lora_adapters"] == scales
    one = client.models.retrieve("a-minus-b")
    assert one.id == "a-minus-b" and one.model_dump()["parent"] == "base"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
    assert_openai_error(srv.get("/v1/models/base/extra"), 404)


def test_lora_adapters_route_lists_ids_and_each_alias_scales(srv):
    listed = srv.get("/lora-adapters").json()             # the default model: base, which applies none
    # ids in the order the config first names each file: base's adapters list, then the aliases
    assert [(a["id"], a["name"], a["scale"]) for a in listed] == [(0, "style", 0.0), (1, "lora-a", 0.0)]
    assert listed[0]["path"].endswith("lora-b.gguf") and listed[1]["path"].endswith("lora-a.gguf")
    mixed = srv.get("/lora-adapters", params={"model": "a-minus-b"}).json()
    assert [(a["id"], a["scale"]) for a in mixed] == [(0, -0.5), (1, 1.0)]
    assert_openai_error(srv.get("/lora-adapters", params={"model": "nope"}), 404)
    err = assert_openai_error(srv.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}]), 405)
    assert "per request" in err["message"]


def _by_id(scales: dict[str, float]) -> list[dict]:
    ids = {"style": 0, "lora-a": 1}
    return [{"id": ids[n], "scale": s} for n, s in scales.items()]


def test_concurrent_per_request_scales_equal_the_same_scales_as_aliases(client, srv):
    """Requests on one base, each with its own adapter scales, decode together and answer as the alias
    configured with those scales does alone."""
    jobs = [(alias, p) for alias in ALIAS_SETS for p in PROMPTS]
    expected = [complete(client, alias, p) for alias, p in jobs]
    plain = [complete(client, "base", p) for p in PROMPTS]
    assert len(set(expected)) == len(expected) and not set(plain) & set(expected)    # the sets really differ

    async def all_at_once():
        async with openai.AsyncOpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0) as c:
            async def one(i, alias, prompt):
                scales = ALIAS_SETS[alias]
                extra = {"lora_adapters": scales} if i % 2 else {"lora": _by_id(scales)}
                if i % 3 == 0:
                    r = await c.chat.completions.create(model="base", messages=[{"role": "user", "content": prompt}],
                                                        max_tokens=10, temperature=0, extra_body=extra)
                    return "chat", r.choices[0].message.content
                r = await c.completions.create(model="base", prompt=prompt, max_tokens=10, temperature=0,
                                               extra_body=extra)
                return "text", r.choices[0].text
            return await asyncio.gather(*(one(i, a, p) for i, (a, p) in enumerate(jobs)))
    got = asyncio.run(all_at_once())
    for i, ((alias, prompt), (kind, text)) in enumerate(zip(jobs, got)):
        if kind == "text":
            assert text == expected[i], (alias, prompt)
        else:
            alone = client.chat.completions.create(model=alias, messages=[{"role": "user", "content": prompt}],
                                                   max_tokens=10, temperature=0)
            assert text == alone.choices[0].message.content, (alias, prompt)


def test_the_request_set_replaces_the_alias_set(client):
    prompt = PROMPTS[0]
    assert complete(client, "a-minus-b", prompt, lora_adapters={}) == complete(client, "base", prompt)
    assert complete(client, "a-minus-b", prompt, lora=[]) == complete(client, "base", prompt)
    assert complete(client, "b-two", prompt, lora_adapters={"lora-a": 0.5}) == complete(client, "a-half", prompt)
    assert complete(client, "a-half", prompt, lora_adapters={"lora-a": 0.0}) == complete(client, "base", prompt)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="base", prompt=prompt, max_tokens=10, temperature=0, stream=True,
        extra_body={"lora_adapters": {"style": 2.0}}))
    assert streamed == complete(client, "b-two", prompt)


@pytest.mark.parametrize("extra, param, words", [
    ({"lora_adapters": {"nope": 1.0}}, "lora_adapters",
     "adapter 'nope' is not loaded for model 'base'; loaded adapters (id 'name'): 0 'style', 1 'lora-a'"),
    ({"lora": [{"id": 2, "scale": 1.0}]}, "lora", "adapter id 2 is not loaded for model 'base'"),
    ({"lora": [{"id": -1, "scale": 1.0}]}, "lora", "adapter id -1 is not loaded"),
    ({"lora_adapters": {"lora-a": 10.5}}, "lora_adapters.lora-a", "finite number between -10 and 10, got 10.5"),
    ({"lora_adapters": {"lora-a": -11}}, "lora_adapters.lora-a", "between -10 and 10, got -11"),
    ({"lora_adapters": {"lora-a": "1"}}, "lora_adapters.lora-a", "finite number"),
    ({"lora_adapters": {"lora-a": True}}, "lora_adapters.lora-a", "finite number"),
    ({"lora_adapters": {"lora-a": None}}, "lora_adapters.lora-a", "finite number"),
    ({"lora": [{"id": 0, "scale": 99}]}, "lora.0.scale", "between -10 and 10"),
    ({"lora": [{"id": 0}]}, "lora.0.scale", "Field required"),
    ({"lora": [{"id": "0", "scale": 1}]}, "lora.0.id", "valid integer"),
    ({"lora": {"id": 0, "scale": 1}}, "lora", "valid list"),
    ({"lora_adapters": ["lora-a"]}, "lora_adapters", "valid dictionary"),
    ({"lora": [{"id": 1, "scale": 1}, {"id": 1, "scale": 0.5}]}, "lora", "'lora-a' (id 1) is named twice"),
    ({"lora_adapters": {"lora-a": 1}, "lora": [{"id": 0, "scale": 1}]}, "lora_adapters", "not both"),
])
def test_bad_adapter_fields_are_400_never_dropped(client, srv, extra, param, words):
    for path, body in (("/v1/completions", {"prompt": "Hi"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})):
        err = assert_openai_error(srv.post(path, json={"model": "base", "max_tokens": 2, **body, **extra}), 400)
        assert words in err["message"] and err["param"] == param, err
    with pytest.raises(openai.BadRequestError):
        complete(client, "a-half", "Hi", **extra)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_scales_are_refused(srv, literal):
    body = '{"model": "base", "prompt": "Hi", "max_tokens": 2, "lora_adapters": {"lora-a": ' + literal + "}}"
    err = assert_openai_error(srv.post("/v1/completions", content=body,
                                       headers={"content-type": "application/json"}), 400)
    assert "finite number" in err["message"]


def test_embeddings_refuse_adapter_fields(srv):
    err = assert_openai_error(srv.post("/v1/embeddings", json={"model": "emb", "input": "x",
                                                               "lora_adapters": {"a": 1}}), 400)
    assert err["param"] == "lora_adapters"


def test_runtime_adapters_are_off_without_adapters_dir(srv):
    err = assert_openai_error(srv.post("/admin/adapters", json={"path": "x.gguf", "alias": "x"}), 403)
    assert "adapters_dir" in err["message"]
    assert_openai_error(srv.post("/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "/tmp/x.gguf"}),
                        403)
    assert "x" not in {m["id"] for m in srv.get("/v1/models").json()["data"]}


def _counter(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m and ",".join(sorted(m[1].split(","))) == want:
            return float(m[2])
    return 0.0


def test_metrics_count_requests_and_tokens_per_adapter(client, srv):
    before = srv.get("/metrics").text
    out = client.completions.create(model="base", prompt="Hello", max_tokens=4, temperature=0,
                                    extra_body={"lora_adapters": {"style": 0.7, "lora-a": 0.0}})
    client.completions.create(model="a-half", prompt="Hello", max_tokens=3, temperature=0)
    after = srv.get("/metrics").text

    def grew(name, adapter):
        series = f"llamaserve_adapter_{name}_total"
        return _counter(after, series, model="base", adapter=adapter) - _counter(before, series, model="base",
                                                                                 adapter=adapter)
    assert (grew("requests", "style"), grew("completion_tokens", "style")) == (1, 4)
    assert grew("prompt_tokens", "style") == out.usage.prompt_tokens
    # lora-a at scale 0 does not count: only the a-half request does
    assert (grew("requests", "lora-a"), grew("completion_tokens", "lora-a")) == (1, 3)
    listed = srv.get("/admin/adapters").json()["data"]
    style = next(a for base in listed for a in base["adapters"] if a["name"] == "style")
    assert style["requests"] >= 1 and style["memory_bytes"] > 0 and style["source"] == "config"
    assert style["state"] == "loaded" and style["load_seconds"] is not None
    assert json.dumps(listed)      # plain JSON throughout
    assert _counter(after, "llamaserve_adapter_loads_total", model="base", source="config") == 2


def test_unknown_fields_are_still_ignored(client, srv):
    r = srv.post("/v1/completions", json={"model": "base", "prompt": "Hi", "max_tokens": 2, "lora_thing": 1})
    assert r.status_code == 200
    assert httpx.get(srv.base_url + "/health").status_code == 200
