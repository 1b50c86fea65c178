"""What a llama-server user relies on: its native /completion route, the OpenAI routes without /v1,
per-model sampling defaults (its --temp, --n-predict...), any model name served by the one model,
/metrics off, llama.cpp's timings and token counts."""

from __future__ import annotations

import json

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    config = {"metrics": False, "defaults": {"n_ctx": 512, "n_threads": N_THREADS},
              "models": [{"alias": "tiny", "model": str(tiny_model_path),
                          "sampling": {"temperature": 0, "max_tokens": 5}}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("compat")).start()
    yield proc
    proc.stop()


def post(srv, path: str, body: dict) -> dict:
    r = srv.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_any_model_name_is_served_by_the_one_model(srv):
    out = post(srv, "/v1/chat/completions", {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "Hi"}]})
    ref = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]})
    assert out["choices"][0]["message"] == ref["choices"][0]["message"]
    assert out["model"] == "gpt-3.5-turbo"      # the name asked for, as OpenAI echoes it
    assert srv.get("/v1/models/gpt-3.5-turbo").status_code == 404     # listing stays exact


def test_sampling_defaults_fill_what_a_request_leaves_out(srv):
    short = post(srv, "/v1/completions", {"model": "tiny", "prompt": PROMPT})
    assert short["usage"]["completion_tokens"] == 5 and short["choices"][0]["finish_reason"] == "length"
    longer = post(srv, "/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 9})
    assert longer["usage"]["completion_tokens"] == 9
    # temperature 0 by default: the same answer each time, and the prefix of the longer one
    assert longer["choices"][0]["text"].startswith(short["choices"][0]["text"])
    chat = post(srv, "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 7})
    assert chat["usage"]["completion_tokens"] == 7


def test_routes_without_v1_are_the_same_routes(srv):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6}
    assert post(srv, "/chat/completions", body)["choices"] == post(srv, "/v1/chat/completions", body)["choices"]
    # except /completions, which is llama-server's native route there (as /embeddings)
    assert post(srv, "/completions", {"prompt": PROMPT})["content"] == \
        post(srv, "/v1/completions", {"prompt": PROMPT})["choices"][0]["text"]
    assert [m["id"] for m in srv.get("/models").json()["data"]] == ["tiny"]


def test_metrics_can_be_turned_off(srv):
    r = srv.get("/metrics")
    assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"


def test_native_completion_answers_as_the_openai_route(srv):
    ref = post(srv, "/v1/completions", {"prompt": PROMPT, "max_tokens": 8})["choices"][0]
    out = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 8, "return_tokens": True})
    assert out["content"] == ref["text"] and out["stop"] is True and out["stop_type"] == "limit"
    assert out["tokens_predicted"] == len(out["tokens"]) == 8 and out["truncated"] is False
    assert out["prompt"].startswith("<s>") and out["generation_settings"]["n_predict"] == 8
    assert out["generation_settings"]["temperature"] == 0       # the model's sampling default
    timings = out["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == out["tokens_evaluated"] and timings["predicted_n"] == 8
    # n_predict left out: the model's max_tokens default
    assert post(srv, "/completion", {"prompt": PROMPT})["tokens_predicted"] == 5


def test_native_completion_streams_tokens_then_a_summary(srv):
    with httpx.stream("POST", srv.base_url + "/completion", timeout=60,
                      json={"prompt": PROMPT, "n_predict": 8, "stream": True, "n_probs": 3}) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    *tokens, last = chunks
    assert all(c["stop"] is False and len(c["tokens"]) == 1 for c in tokens) and last["stop"] is True
    assert all(len(c["completion_probabilities"][0]["top_logprobs"]) == 3 for c in tokens)
    whole = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 8})
    assert "".join(c["content"] for c in tokens) == whole["content"] and last["content"] == ""
    assert last["timings"]["predicted_n"] == 8


def test_native_completion_prompt_forms(srv):
    tokens = post(srv, "/tokenize", {"content": PROMPT, "add_special": True})["tokens"]
    one = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 4})["content"]
    assert post(srv, "/completion", {"prompt": tokens, "n_predict": 4})["content"] == one
    assert post(srv, "/completion", {"prompt": {"prompt_string": PROMPT}, "n_predict": 4})["content"] == one
    several = post(srv, "/completion", {"prompt": [tokens, PROMPT], "n_predict": 4})
    assert [s["content"] for s in several] == [one, one] and [s["index"] for s in several] == [0, 1]
    mixed = post(srv, "/completion", {"prompt": [tokens[0], PROMPT[:4], 300], "n_predict": 2})
    assert mixed["tokens_evaluated"] > 2
    picked = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 4,
                                       "response_fields": ["content", "generation_settings/n_predict"]})
    assert picked == {"content": one, "generation_settings/n_predict": 4}


def test_native_logit_bias_by_text_bans_its_tokens(srv):
    plain = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 12, "return_tokens": True})
    banned = plain["tokens"][0]
    for bias in ([[banned, False]], {str(banned): -100}):
        out = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 12, "return_tokens": True, "logit_bias": bias})
        assert banned not in out["tokens"], bias
    # a text biases each of its tokens
    text = post(srv, "/detokenize", {"tokens": plain["tokens"][:2]})["content"]
    text_tokens = post(srv, "/tokenize", {"content": text})["tokens"]
    out = post(srv, "/completion", {"prompt": PROMPT, "n_predict": 12, "return_tokens": True,
                                    "logit_bias": [[text, False]]})
    assert not set(text_tokens) & set(out["tokens"])


@pytest.mark.parametrize("body, needle", [
    ({"mirostat": 3}, "mirostat"),
    ({"post_sampling_probs": True}, "post_sampling_probs"),
    ({"id_slot": 1}, "id_slot"),
    ({"prompt": {"prompt_string": "x", "multimodal_data": ["aGk="]}}, "multimodal"),
    ({"prompt": [[1, 2], {"nope": 1}]}, "prompt"),
    ({"logit_bias": [[1]]}, "logit_bias"),
    ({"n_predict": -2}, "n_predict"),
])
def test_native_completion_refuses_what_it_cannot_honour(srv, body, needle):
    r = srv.post("/completion", json={"prompt": PROMPT, **body})
    assert r.status_code == 400 and needle in r.text, r.text


def test_chat_input_tokens_counts_the_prompt(srv):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the best book?"}]
    count = post(srv, "/v1/chat/completions/input_tokens", {"messages": messages})["input_tokens"]
    assert count == post(srv, "/chat/completions", {"messages": messages})["usage"]["prompt_tokens"] > 5


def test_timings_per_token_and_on_the_usage_chunk(srv):
    with httpx.stream("POST", srv.base_url + "/v1/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": "Hi"}], "stream": True, "max_tokens": 4,
                            "timings_per_token": True, "stream_options": {"include_usage": True}}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    first, *rest = chunks
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None} and "timings" not in first
    assert all("timings" in c for c in rest)
    assert rest[-1]["choices"] == [] and rest[-1]["timings"]["predicted_n"] == 4


def chat(srv, messages, **extra) -> dict:
    return post(srv, "/v1/chat/completions", {"messages": messages, "max_tokens": 3, "verbose": True, **extra})


def test_a_final_assistant_message_is_continued(srv):
    turns = [{"role": "user", "content": "Tell me a story"}, {"role": "assistant", "content": "Once upon"}]
    prefill = chat(srv, turns)["__verbose"]["prompt"]
    assert prefill.endswith("Once upon")             # continued: the turn is left open
    # vLLM's explicit pair gives the same prompt; continue_final_message: false closes the turn instead
    assert chat(srv, turns, add_generation_prompt=False, continue_final_message=True)["__verbose"]["prompt"] == prefill
    closed = chat(srv, turns, continue_final_message=False)["__verbose"]["prompt"]
    assert not closed.endswith("Once upon") and "Once upon" in closed
    assert "__verbose" not in post(srv, "/v1/chat/completions", {"messages": turns, "max_tokens": 1})
    for bad in ({"add_generation_prompt": True, "continue_final_message": True},):
        r = srv.post("/v1/chat/completions", json={"messages": turns, **bad})
        assert r.status_code == 400 and "cannot both be true" in r.text
    two = turns + [{"role": "assistant", "content": "a time"}]
    r = srv.post("/v1/chat/completions", json={"messages": two})
    assert r.status_code == 400 and "two assistant messages" in r.text
    r = srv.post("/v1/chat/completions", json={"messages": turns[:1], "continue_final_message": True})
    assert r.status_code == 400 and "last message from the assistant" in r.text


def test_chat_json_schema_field_constrains_the_answer(srv):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    out = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "A number"}],
                                             "json_schema": schema, "max_tokens": 40})
    assert isinstance(json.loads(out["choices"][0]["message"]["content"])["n"], int)
    r = srv.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "json_schema": schema,
                                               "response_format": {"type": "json_object"}})
    assert r.status_code == 400


def test_prompt_progress_is_streamed_when_asked(srv):
    prompt = "the quick brown fox jumps over the lazy dog " * 12
    with httpx.stream("POST", srv.base_url + "/completion", timeout=60,
                      json={"prompt": prompt, "n_predict": 2, "stream": True, "return_progress": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    total = progress[0]["total"]
    # the first report is what the cache held; then one per decoded batch (n_batch 512 > this prompt: one)
    assert progress[0]["processed"] == progress[0]["cache"] and progress[-1]["processed"] == total
    assert all(p["total"] == total for p in progress) and len(progress) >= 2
    with httpx.stream("POST", srv.base_url + "/v1/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": prompt}], "max_tokens": 2, "stream": True,
                            "return_progress": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    reports = [c for c in chunks if "prompt_progress" in c]
    assert reports and all(c["choices"] == [] for c in reports)
    assert reports[-1]["prompt_progress"]["processed"] == reports[-1]["prompt_progress"]["total"]


def test_llama_cpp_template_names(tmp_path, tiny_model_path):
    from llamaserve.config.parse import ConfigError, parse_config

    def entry(template):
        config = parse_config({"models": [{"model": str(tiny_model_path), "chat_template": template}]},
                              None, tmp_path)
        return config.models[0]

    named = entry("llama3")
    assert (named.chat_format, named.chat_template) == ("llama-3", None)
    assert entry("command-r").chat_format == "command-r"
    with pytest.raises(ConfigError, match="deepseek3.*llama.cpp built-in template name"):
        entry("deepseek3")
    assert entry("{{ messages[0].content }}").chat_template == "{{ messages[0].content }}"


@pytest.mark.parametrize("credentials", [False, True])
def test_cors_credentials(tmp_path, tiny_model_path, credentials):
    proc = ServerProcess({"cors": ["*"], "cors_credentials": credentials,
                          "models": [{"alias": "tiny", "model": str(tiny_model_path)}]}, tmp_path).start()
    try:
        r = httpx.options(proc.base_url + "/v1/chat/completions", timeout=30,
                          headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                                   "Access-Control-Request-Headers": "Authorization"})
        assert r.status_code == 200
        # with credentials a browser needs its own origin back, never "*" (llama-server's default)
        assert r.headers["access-control-allow-origin"] == ("https://app.example" if credentials else "*")
        assert r.headers.get("access-control-allow-credentials") == ("true" if credentials else None)
    finally:
        proc.stop()
