"""The OpenAI routes of a real llamaserve process, driven by the real `openai` client."""

import asyncio
import base64
import json

import jsonschema
import numpy as np
import openai
import pytest
from helpers import N_THREADS

from llamacore import Llama

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def aclient(server):
    """Runs `jobs(client)` in a fresh event loop with an AsyncOpenAI client bound to it."""
    def run(jobs):
        async def main():
            async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0) as c:
                return await jobs(c)
        return asyncio.run(main())
    return run


def test_models_lists_every_name(client):
    assert {m.id for m in client.models.list()} == {"base", "gpt-test", "la", "lb", "lab", "emb"}


def test_completion_matches_the_library(client, tiny_model_path):
    out = client.completions.create(model="base", prompt="Once upon a time", max_tokens=10, temperature=0)
    llm = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    expected = llm("Once upon a time", max_tokens=10, temperature=0)
    assert out.choices[0].text == expected["choices"][0]["text"]
    assert out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens == expected["usage"]["prompt_tokens"]
    assert out.usage.completion_tokens == 10
    assert out.usage.total_tokens == out.usage.prompt_tokens + 10


def test_lora_alias_matches_library_with_that_adapter(client, tiny_model_path, lora_a_path, lora_b_path):
    out = client.completions.create(model="lab", prompt="Hello there", max_tokens=8, temperature=0)
    llm = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS, lora_adapters={lora_a_path: 1.0, lora_b_path: 0.5})
    assert out.choices[0].text == llm("Hello there", max_tokens=8, temperature=0)["choices"][0]["text"]


def test_default_model_and_extra_alias(client):
    a = client.completions.create(model="gpt-test", prompt="Hi", max_tokens=5, temperature=0)
    b = client.completions.create(model="base", prompt="Hi", max_tokens=5, temperature=0)
    assert a.choices[0].text == b.choices[0].text


def test_stream_with_usage_equals_plain_chat(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell a story."}]
    plain = client.chat.completions.create(model="la", messages=messages, max_tokens=12, temperature=0)
    chunks = list(client.chat.completions.create(model="la", messages=messages, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == plain.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens


def test_repeated_prompt_reports_its_cached_tokens(client, server):
    messages = [{"role": "user", "content": "A prompt sent twice, to find its prefix in the cache"}]
    first = client.chat.completions.create(model="base", messages=messages, max_tokens=2, temperature=0)
    again = client.chat.completions.create(model="base", messages=messages, max_tokens=2, temperature=0)
    n = first.usage.prompt_tokens
    # the second finds all but the last prompt token in the KV cache (that one is decoded for its logits)
    assert first.usage.prompt_tokens_details.cached_tokens < n - 1
    assert again.usage.prompt_tokens_details.cached_tokens == n - 1
    assert again.system_fingerprint.startswith("b")
    # llama-server's timings say the same, and how long the prompt and the generation took
    timings = server.post("/chat/completions", json={"model": "base", "messages": messages, "max_tokens": 2,
                                                     "temperature": 0}).json()["timings"]
    assert timings["cache_n"] == n - 1 and timings["prompt_n"] == 1 and timings["predicted_n"] == 2
    assert timings["prompt_ms"] > 0 and timings["predicted_per_second"] > 0


def test_content_parts_and_max_completion_tokens(client):
    out = client.chat.completions.create(
        model="base", messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        max_completion_tokens=3, temperature=0)
    assert out.usage.completion_tokens == 3 and out.choices[0].finish_reason == "length"


def test_n_choices_and_seed(client):
    kw = dict(model="base", prompt="The weather", max_tokens=8, temperature=1.5, n=2, seed=11)
    out = client.completions.create(**kw)
    again = client.completions.create(**kw)
    assert [c.index for c in out.choices] == [0, 1]
    assert out.choices[0].text != out.choices[1].text
    assert [c.text for c in out.choices] == [c.text for c in again.choices]
    assert out.usage.completion_tokens == 16


def test_stop_strings(client):
    full = client.completions.create(model="base", prompt="Once", max_tokens=12, temperature=0).choices[0].text
    stop = full[5:8]
    out = client.completions.create(model="base", prompt="Once", max_tokens=12, temperature=0, stop=[stop, "zzz"])
    assert out.choices[0].text == full[:full.index(stop)] and out.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="base", prompt="Once", max_tokens=12, temperature=0, stop=stop, stream=True))
    assert streamed == full[:full.index(stop)]


def test_logprobs(client):
    out = client.chat.completions.create(model="base", messages=[{"role": "user", "content": "Hi"}],
                                         max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert len(content) == 4
    for item in content:
        assert len(item.top_logprobs) == 3 and item.logprob == pytest.approx(item.top_logprobs[0].logprob)
    comp = client.completions.create(model="base", prompt="Hi", max_tokens=3, temperature=0, logprobs=2)
    assert len(comp.choices[0].logprobs.tokens) == 3 and len(comp.choices[0].logprobs.top_logprobs[0]) == 2


SCHEMAS = [
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["ok", "n"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                                               "maxItems": 2}},
     "required": ["color", "tags"]},
    {"type": "object", "properties": {"point": {"$ref": "#/$defs/point"}, "label": {"type": ["string", "null"],
                                                                                      "maxLength": 6}},
     "required": ["point"], "$defs": {"point": {"type": "object", "properties": {
         "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_json_schema_output_validates(client, schema):
    out = client.chat.completions.create(
        model="base", messages=[{"role": "user", "content": "Give JSON."}], max_tokens=200, temperature=0.7, seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert out.choices[0].finish_reason == "stop", out.choices[0].message.content
    jsonschema.validate(json.loads(out.choices[0].message.content), schema)


def test_json_object_mode(client):
    finished = 0
    for seed in range(4):
        out = client.chat.completions.create(model="lb", messages=[{"role": "user", "content": "JSON please"}],
                                             max_tokens=120, temperature=0.5, seed=seed,
                                             response_format={"type": "json_object"})
        text = out.choices[0].message.content
        assert text.lstrip().startswith("{")
        if out.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(text), dict)
            finished += 1
    assert finished, "no JSON object finished within 120 tokens"


def test_embeddings_float_and_base64(client, embed_model_path):
    texts = ["a red apple", "the stock market", "a green pear"]
    floats = client.embeddings.create(model="emb", input=texts)
    b64 = client.embeddings.with_raw_response.create(model="emb", input=texts, encoding_format="base64")
    raw = json.loads(b64.text)["data"]
    assert [d.index for d in floats.data] == [0, 1, 2]
    for d, r in zip(floats.data, raw):
        decoded = np.frombuffer(base64.b64decode(r["embedding"]), dtype="<f4")
        np.testing.assert_allclose(decoded, np.asarray(d.embedding, dtype=np.float32), rtol=1e-6)
        assert np.linalg.norm(d.embedding) == pytest.approx(1.0, abs=1e-4)
    single = client.embeddings.create(model="emb", input="a red apple").data[0].embedding
    np.testing.assert_allclose(single, floats.data[0].embedding, atol=1e-5)
    tokens = client.embeddings.create(model="emb", input=[[1, 15043, 2787]]).data[0].embedding
    assert len(tokens) == 64 and floats.usage.prompt_tokens > 0


def test_embedding_dimensions_are_honoured_or_refused(client):
    full = client.embeddings.create(model="emb", input="a red apple")
    same = client.embeddings.create(model="emb", input="a red apple", dimensions=64)
    assert same.data[0].embedding == full.data[0].embedding
    for bad in (32, 128):
        with pytest.raises(openai.BadRequestError) as err:
            client.embeddings.create(model="emb", input="a red apple", dimensions=bad)
        assert err.value.body["param"] == "dimensions" and "64-dimensional" in err.value.body["message"]


def test_an_embedding_input_too_long_is_refused_or_truncated_on_request(client):
    long_text = " ".join(["apple"] * 3000)          # more tokens than the model takes (n_batch)
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="emb", input=long_text)
    assert err.value.body["code"] == "context_length_exceeded" and err.value.body["param"] == "input"
    assert "truncate" in err.value.body["message"]
    cut = client.embeddings.create(model="emb", input=long_text, extra_body={"truncate": True})
    short = client.embeddings.create(model="emb", input="apple")
    assert len(cut.data[0].embedding) == len(short.data[0].embedding)
    limit = int(err.value.body["message"].split("the limit is ")[1].split()[0])
    assert cut.usage.prompt_tokens == limit                    # usage counts what was embedded


async def _complete(aclient, model, prompt, n=16):
    out = await aclient.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    return out.choices[0].text


PROMPTS = ["Once upon a time", "The cat", "Hello world", "In the beginning", "A long road", "Numbers: 1 2",
           "Why is", "Dear friend"]


def test_concurrent_requests_match_sequential(client, aclient):
    sequential = [client.completions.create(model="base", prompt=p, max_tokens=16, temperature=0).choices[0].text
                  for p in PROMPTS]

    async def all_at_once(c):
        return await asyncio.gather(*(_complete(c, "base", p) for p in PROMPTS))
    assert aclient(all_at_once) == sequential


def test_concurrent_lora_aliases_match_single_answers(client, aclient):
    jobs = [(alias, p) for alias in ("la", "lb", "base") for p in PROMPTS[:3]]
    single = [client.completions.create(model=a, prompt=p, max_tokens=12, temperature=0).choices[0].text
              for a, p in jobs]

    async def mixed(c):
        return await asyncio.gather(*(_complete(c, a, p, 12) for a, p in jobs))
    assert aclient(mixed) == single
    assert len(set(single)) == len(single)


def test_alias_switch_never_reuses_other_adapters_cache(client, tiny_model_path, lora_b_path):
    prompt = "Shared prompt for both aliases"
    client.completions.create(model="la", prompt=prompt, max_tokens=6, temperature=0)
    got = client.completions.create(model="lb", prompt=prompt, max_tokens=6, temperature=0).choices[0].text
    fresh = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS, lora_adapters={lora_b_path: 1.0})
    assert got == fresh(prompt, max_tokens=6, temperature=0)["choices"][0]["text"]
