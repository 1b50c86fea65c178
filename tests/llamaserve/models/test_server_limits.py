"""Registry behaviour, limits, auth and errors of a real llamaserve process (raw HTTP where needed)."""

import asyncio
import json
import re
import time

import httpx
import openai
import pytest
from helpers import N_THREADS, assert_openai_error
from prometheus_client.parser import text_string_to_metric_families
from server import ServerProcess

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]

KEY = "sk-test-123"


@pytest.fixture(scope="module")
def limited(tmp_path_factory, tiny_model_path, tiny_model_f16_path, lora_a_path):
    folder = tmp_path_factory.mktemp("limited")
    broken = folder / "broken.gguf"
    data = tiny_model_path.read_bytes()
    broken.write_bytes(data[: len(data) // 3])           # header intact, tensor data cut off
    config = {
        "api_key": KEY, "max_loaded_models": 1, "idle_unload": 600, "max_body_bytes": 20000,
        "parallel": 2, "max_queue": 1,
        "defaults": {"n_ctx": 128, "n_threads": N_THREADS},
        "models": [
            {"alias": "m32", "model": str(tiny_model_path)},
            {"alias": "m32-lora", "model": str(tiny_model_path), "lora_adapters": {str(lora_a_path): 1.0}},
            # room for a generation long enough that no client hang-up can come after its end
            {"alias": "m32-long", "model": str(tiny_model_path), "n_ctx": 2048},
            {"alias": "m16", "model": str(tiny_model_f16_path), "idle_unload": 1},
            {"alias": "broken", "model": str(broken)},
        ],
    }
    proc = ServerProcess(config, folder).start()
    yield proc
    proc.stop()


def complete(server, model, prompt="Hello", max_tokens=4, **kw):
    return server.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                "temperature": 0, **kw})


def test_auth(limited):
    url = limited.base_url
    assert httpx.get(url + "/health").status_code == 200
    assert_openai_error(httpx.get(url + "/v1/models"), 401)
    assert_openai_error(httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    assert_openai_error(httpx.get(url + "/admin/models"), 401)
    assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    client = openai.OpenAI(base_url=url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert KEY not in limited.log()


def test_lazy_load_shared_base_and_lru_eviction(limited):
    assert limited.admin_state("m32")["state"] == "unloaded"
    assert complete(limited, "m32").status_code == 200
    assert complete(limited, "m32-lora").status_code == 200
    state = limited.admin_state("m32-lora")
    assert state["state"] == "loaded" and "m32" in state["shared_with"]     # one base, two aliases
    assert complete(limited, "m16").status_code == 200                     # max_loaded_models: 1
    assert limited.admin_state("m32")["state"] == "unloaded"
    metrics = limited.get("/metrics").text
    assert 'llamaserve_model_unloads_total{model="m32",reason="evicted"} 1.0' in metrics


def test_idle_unload(limited):
    assert complete(limited, "m16").status_code == 200
    deadline = time.monotonic() + 15
    while limited.admin_state("m16")["state"] == "loaded" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert limited.admin_state("m16")["state"] == "unloaded"
    assert 'reason="idle"' in limited.get("/metrics").text
    # nothing is loaded now: the pages of llama.cpp's code that loading and decoding touched went back
    # (those the server alone maps: the kernel keeps a page another process, like this one, maps too)
    assert not [m for m in limited.get("/admin/models").json()["data"] if m["state"] == "loaded"]
    assert code_pages_kib(limited.proc.pid) < 1024


def code_pages_kib(pid: int) -> int:
    """Resident KiB of the llamacore extension's read-only mappings that only process `pid` maps."""
    total, ours = 0, False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                fields = line.split()
                ours = len(fields) >= 6 and "llamacore/_core" in fields[5] and "w" not in fields[1]
            elif ours and line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def test_admin_load_unload(limited):
    r = limited.post("/admin/models/m32/load")
    assert r.status_code == 200 and limited.admin_state("m32")["state"] == "loaded"
    assert limited.post("/admin/models/m32/unload").json()["state"] == "unloaded"
    assert_openai_error(limited.post("/admin/models/nope/load"), 404)


def test_failed_load_is_a_clear_error_and_server_stays_up(limited):
    err = assert_openai_error(complete(limited, "broken"), 500)
    assert "broken" in err["message"] and "failed to load" in err["message"]
    assert "Traceback" not in err["message"]
    assert limited.get("/health").status_code == 200
    assert complete(limited, "m32").status_code == 200


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "http://example.com/x.gguf", "m32/../m16"])
def test_model_names_are_never_paths(limited, name):
    err = assert_openai_error(complete(limited, name), 404)
    assert "m32" in err["message"] and err["code"] == "model_not_found"


def test_bad_requests(limited):
    h = {**limited.headers(), "content-type": "application/json"}
    assert_openai_error(limited.post("/v1/completions", content=b'{"prompt": ', headers=h), 400)
    assert_openai_error(limited.post("/v1/completions", content=b'[1, 2]', headers=h), 400)
    err = assert_openai_error(complete(limited, "m32", temperature=7), 400)
    assert err["param"] == "temperature"
    assert_openai_error(complete(limited, "m32", max_tokens=-1), 400)
    assert_openai_error(limited.post("/v1/chat/completions", json={"model": "m32", "messages": []}), 400)
    assert_openai_error(limited.post("/v1/chat/completions", json={"model": "m32", "messages": [
        {"role": "wizard", "content": "x"}]}), 400)
    assert_openai_error(complete(limited, "m32", prompt=[1, 99999999]), 400)
    ok = complete(limited, "m32", some_future_field={"x": 1})           # unknown fields are ignored
    assert ok.status_code == 200
    assert_openai_error(limited.post("/v1/embeddings", json={"model": "m32", "input": "x"}), 400)
    assert_openai_error(limited.post("/v1/nothing-here", json={}), 404)


def test_prompt_longer_than_context(limited):
    err = assert_openai_error(complete(limited, "m32", prompt="word " * 300), 400)
    match = re.search(r"maximum context length is (\d+) tokens, but the prompt has (\d+) tokens", err["message"])
    assert match and int(match.group(1)) >= 128 and int(match.group(2)) > int(match.group(1))
    assert err["code"] == "context_length_exceeded"


def test_body_too_large(limited):
    assert_openai_error(complete(limited, "m32", prompt="x" * 30000), 413)


def test_queue_full_answers_503_with_retry_after(limited):
    async def flood():
        async with httpx.AsyncClient(base_url=limited.base_url, headers=limited.headers(), timeout=120) as c:
            body = {"model": "m32", "prompt": "Once", "max_tokens": 60, "temperature": 0, "ignore_eos": True}
            return await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(6)))
    responses = asyncio.run(flood())
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 3 and 503 in codes, codes           # 2 running + 1 queued fit
    for r in responses:
        if r.status_code == 503:
            assert r.headers["retry-after"] and r.json()["error"]["type"] == "server_error"


def test_queue_full_stream_is_a_503_before_the_stream_starts(limited):
    async def flood():
        async with httpx.AsyncClient(base_url=limited.base_url, headers=limited.headers(), timeout=120) as c:
            body = {"model": "m32", "prompt": "Once", "max_tokens": 60, "temperature": 0, "ignore_eos": True,
                    "stream": True}

            async def one():
                async with c.stream("POST", "/v1/completions", json=body) as r:
                    return r.status_code, r.headers.get("retry-after"), (await r.aread()).decode()
            return await asyncio.gather(*(one() for _ in range(6)))
    results = asyncio.run(flood())
    codes = sorted(code for code, _, _ in results)
    assert codes.count(200) >= 3 and 503 in codes, codes           # 2 running + 1 queued fit
    for code, retry_after, text in results:
        if code == 503:
            assert retry_after and json.loads(text)["error"]["type"] == "server_error"
        else:
            assert '"error"' not in text and text.rstrip().endswith("data: [DONE]")


def test_disconnect_mid_stream_frees_the_sequence(limited):
    # 2,000 tokens: with 120 (all that m32's 128-token context holds), one loaded CI run generated
    # them all before the hang-up below reached the server, so nothing was cancelled
    body = {"model": "m32-long", "prompt": "Once", "max_tokens": 2000, "temperature": 0, "ignore_eos": True,
            "stream": True}
    with httpx.stream("POST", limited.base_url + "/v1/completions", json=body, headers=limited.headers(),
                      timeout=60) as r:
        lines = r.iter_lines()
        first = [next(lines) for _ in range(4)]
        assert any(line.startswith("data: {") for line in first)
        assert limited.admin_state("m32-long")["active_sequences"] == 1
    deadline = time.monotonic() + 10
    while limited.admin_state("m32-long")["active_sequences"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert limited.admin_state("m32-long")["active_sequences"] == 0
    assert "llamaserve_cancelled_requests_total 1.0" in limited.get("/metrics").text


def test_openapi_and_metrics(limited):
    spec = limited.get("/openapi.json").json()
    assert {"/v1/completions", "/v1/chat/completions", "/v1/embeddings"} <= set(spec["paths"])
    assert "CompletionRequest" in spec["components"]["schemas"]
    text = limited.get("/metrics").text
    for name in ("llamaserve_requests_total", "llamaserve_completion_tokens_total", "llamaserve_loaded_models",
                 "llamaserve_time_to_first_token_seconds_bucket", "llamaserve_queue_depth"):
        assert name in text


def test_startup_objects_stay_out_of_garbage_collections(limited):
    """What the server holds once started is frozen (full collections, which hold the GIL, walk only
    what came after), and every collection's pause is measured."""
    assert complete(limited, "m32").status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(limited.get("/metrics").text)}
    frozen = families["llamaserve_gc_frozen_objects"].samples[0].value
    assert frozen > 10_000, frozen           # uvicorn, Starlette, pydantic, the schemas...
    counts = {s.labels["generation"]: s.value for s in families["llamaserve_gc_pause_seconds"].samples
              if s.name.endswith("_count")}
    assert counts.get("0", 0) > 0, counts


def test_sigterm_exits_cleanly(tmp_path, tiny_model_path):
    proc = ServerProcess({"models": [{"alias": "m", "model": str(tiny_model_path), "n_ctx": 64}]}, tmp_path).start()
    assert complete(proc, "m").status_code == 200
    assert proc.stop() == 0
    assert json.dumps("Traceback") not in proc.log()


def test_concurrent_first_requests_share_one_load(limited):
    limited.post("/admin/models/m32/unload")

    def loads() -> float:
        line = [x for x in limited.get("/metrics").text.splitlines()
                if x.startswith('llamaserve_model_loads_total{model="m32"}')]
        return float(line[0].split()[-1]) if line else 0.0
    before = loads()

    async def burst():
        async with httpx.AsyncClient(base_url=limited.base_url, headers=limited.headers(), timeout=120) as c:
            body = {"model": "m32", "prompt": "Hi", "max_tokens": 2, "temperature": 0}
            return await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(3)))
    assert [r.status_code for r in asyncio.run(burst())] == [200, 200, 200]
    assert loads() == before + 1


def test_request_metrics_are_labelled_by_route_template(limited):
    for i in range(3):
        assert limited.get(f"/no/such/path/{i}").status_code == 404
        assert limited.post(f"/admin/models/ghost{i}/load").status_code == 404
    text = limited.get("/metrics").text
    assert 'route="unmatched",status="404"' in text
    assert 'route="/admin/models/{alias}/load",status="404"' in text
    assert "/no/such/path" not in text and "ghost" not in text
