"""llama-server's own routes and shapes on a real server: the native /completions, /embedding(s) with
every input form and pooling `none`, /props, /slots and POST /props refusals, the llamacpp:* metrics,
ignore_eos's reported logit biases, and a comma-separated host."""

import socket

import httpx
import pytest
import yaml

from llamacore import Model

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path, minilm_path):
    from server import ServerProcess

    config = {
        "metrics": True,
        "defaults": {"n_threads": 2},
        "models": [
            {"alias": "base", "model": str(tiny_model_path), "n_ctx": 128, "parallel": 2,
             "sampling": {"seed": 7, "temperature": 0.0}},
            {"alias": "emb", "model": str(minilm_path), "embedding": True, "pooling_type": "mean", "n_batch": 64,
             "n_ubatch": 64},
            {"alias": "tokens", "model": str(minilm_path), "embedding": True, "pooling_type": "none",
             "isolation": "process"},
        ],
    }
    proc = ServerProcess(config, tmp_path_factory.mktemp("llama-routes")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return Model(minilm_path, vocab_only=True)


def _embed(server, input, model="emb", path="/v1/embeddings"):
    return server.post(path, json={"model": model, "input": input})


@pytest.mark.parametrize("input,count", [
    ("", 1), ([12, 34, 56], 1), ([12, 34, "string", 56], 1), (["a", "b"], 2), (["a", [12, 34]], 2),
    ([[12, 34], [12, "x", 34]], 2), ({"prompt_string": "s"}, 1), ({"content": [{"type": "text", "text": "s"}]}, 1),
    (["a", {"prompt_string": "b"}, {"content": [{"type": "text", "text": "c"}]}], 3),
])
def test_embedding_input_forms(server, input, count):
    got = _embed(server, input)
    assert got.status_code == 200, got.text
    assert len(got.json()["data"]) == count
    assert all(len(d["embedding"]) == 384 for d in got.json()["data"])


def test_embedding_forms_agree(server, minilm):
    text = "hello world"
    tokens = minilm.tokenize(text, add_special=True, parse_special=False)
    got = _embed(server, [text, {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]},
                          tokens, {"prompt_string": text}]).json()["data"]
    assert got[0]["embedding"] == got[1]["embedding"] == got[2]["embedding"] == got[3]["embedding"]
    empty = _embed(server, "").json()
    assert empty["usage"]["prompt_tokens"] == len(minilm.tokenize("", add_special=True, parse_special=False)) == 2


@pytest.mark.parametrize("input", [[], {"content": "s"}, {"content": [{"type": "unknown"}]},
                                   {"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]},
                                   [[]], [10 ** 9], {"other": 1}])
def test_embedding_bad_inputs(server, input):
    got = _embed(server, input)
    assert got.status_code == 400, got.text
    assert got.json()["error"]["type"] == "invalid_request_error"


def test_embedding_too_long(server):
    got = _embed(server, "word " * 100)
    assert got.status_code == 400
    assert got.json()["error"]["code"] == "context_length_exceeded"
    assert "too large" in got.json()["error"]["message"]
    truncated = server.post("/v1/embeddings", json={"model": "emb", "input": "word " * 100, "truncate": True})
    assert truncated.status_code == 200


def test_native_embeddings_shape(server):
    oai = _embed(server, ["one", "two"]).json()["data"]
    for path in ("/embedding", "/embeddings"):
        got = server.post(path, json={"model": "emb", "content": ["one", "two"]})
        assert got.status_code == 200, got.text
        assert got.json() == [{"index": i, "embedding": [d["embedding"]]} for i, d in enumerate(oai)]
    assert server.post("/embeddings", json={"model": "emb"}).status_code == 400


def test_pooling_none_is_per_token_and_native_only(server, minilm):
    refused = _embed(server, "hello hello hello", model="tokens")
    assert refused.status_code == 400 and "none" in refused.json()["error"]["message"]
    got = server.post("/embeddings", json={"model": "tokens", "input": "hello hello hello"})
    assert got.status_code == 200, got.text
    rows = got.json()[0]["embedding"]
    assert len(rows) == len(minilm.tokenize("hello hello hello", add_special=True, parse_special=False)) == 5
    assert all(len(r) == 384 and abs(sum(x * x for x in r) - 1) > 1e-3 for r in rows)    # not normalized


def test_native_completions_route(server):
    got = server.post("/completions", json={"model": "base", "prompt": "Once", "n_predict": 4})
    assert got.status_code == 200, got.text
    assert "content" in got.json() and got.json()["timings"]["predicted_n"] == 4


def test_ignore_eos_reports_banned_eog_tokens(server, tiny_model_path):
    model = Model(tiny_model_path, vocab_only=True)
    eog = {t for t in range(model.n_vocab) if model.is_eog(t)}
    got = server.post("/completion", json={"model": "base", "prompt": "Once", "n_predict": 6, "ignore_eos": True,
                                           "logit_bias": [[5, 1.5]]}).json()
    bias = got["generation_settings"]["logit_bias"]
    assert {b["token"] for b in bias if b["bias"] is None} == eog and {"bias": 1.5, "token": 5} in bias
    assert got["timings"]["predicted_n"] == 6 and not eog & set(got.get("tokens") or [])
    plain = server.post("/completion", json={"model": "base", "prompt": "Once", "n_predict": 2}).json()
    assert plain["generation_settings"]["logit_bias"] == []


def test_props_and_refusals(server, tiny_model_path):
    props = server.get("/props?model=base")
    assert props.status_code == 200, props.text
    body = props.json()
    assert body["model_path"] == str(tiny_model_path) and body["total_slots"] == 2
    assert body["default_generation_settings"]["n_ctx"] == 128
    assert body["default_generation_settings"]["params"]["seed"] == 7
    assert body["default_generation_settings"]["params"]["temperature"] == 0.0
    assert body["endpoint_metrics"] is True and body["modalities"]["vision"] is False
    assert isinstance(body["chat_template"], str) and body["chat_template"]
    assert server.get("/props?model=emb").json()["model_alias"] == "emb"
    assert server.post("/props", json={}).status_code == 501
    assert server.get("/slots").status_code == 501


def _metrics(server) -> tuple[dict[str, float], httpx.Response]:
    got = server.get("/metrics")
    values = {}
    for line in got.text.splitlines():
        if line.startswith("llamacpp:"):
            name, value = line.split(" ")
            values[name] = float(value)
    return values, got


def test_llamacpp_metrics_count_real_work(server):
    before, _ = _metrics(server)
    timings = [server.post("/completion", json={"model": "base", "prompt": "the quick brown fox jumps",
                                                 "n_predict": 3}).json()["timings"] for _ in range(2)]
    assert timings[1]["cache_n"] > 0
    after, response = _metrics(server)
    assert response.headers["Process-Start-Time-Unix"].isdigit()
    assert "# TYPE llamacpp:prompt_tokens_total counter" in response.text
    assert "# TYPE llamacpp:requests_processing gauge" in response.text

    def delta(name):
        return after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]
    assert delta("prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert delta("prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert delta("tokens_predicted_total") == 6
    assert delta("n_decode_total") >= 2 * 3           # a prompt decode, then one per later token
    assert after["llamacpp:requests_processing"] == 0
    _embed(server, ["a b c", "d e"], model="tokens", path="/embeddings")
    embedded, _ = _metrics(server)
    assert embedded["llamacpp:n_decode_total"] > after["llamacpp:n_decode_total"]
    assert embedded["llamacpp:prompt_tokens_total"] > after["llamacpp:prompt_tokens_total"]


def test_comma_separated_hosts(tmp_path, tiny_model_path):
    from server import ServerProcess

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    proc = ServerProcess({"models": [{"alias": "base", "model": str(tiny_model_path), "n_ctx": 64}]}, tmp_path)
    config = yaml.safe_load(proc.config_path.read_text())
    proc.config_path.write_text(yaml.safe_dump({**config, "host": "127.0.0.1,::1"}))
    proc.start()
    try:
        for url in (f"http://127.0.0.1:{proc.port}", f"http://[::1]:{proc.port}"):
            assert httpx.get(url + "/health", timeout=10).status_code == 200
    finally:
        proc.stop()
