"""Runtime adapters over HTTP: POST/GET/DELETE /admin/adapters and vLLM's load/unload routes on a real
server, with the real `openai` client for the answers; paths confined to adapters_dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from gguf_files import place
from helpers import N_THREADS, assert_openai_error
from server import ServerProcess

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]

KEY = "sk-admin-test"
PROMPT = "Once upon a time"
STREAMED = 200           # tokens of each answer that streams while its adapter is removed (n_ctx 256)


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_model_path, tiny_spec, lora_a_path, lora_b_path, lora_other_arch_path,
          lora_wrong_shape_path):
    """adapters/ (good, bad and hostile files) and outside/ (what a path must never reach)."""
    from tiny_models import write_lora

    root = tmp_path_factory.mktemp("admin_adapters")
    adapters, outside = root / "adapters", root / "outside"
    for d in (adapters / "team", adapters / "dir", outside):
        d.mkdir(parents=True)
    for src, name in ((lora_a_path, "a.gguf"), (lora_a_path, "idle.gguf"), (lora_a_path, "swap.gguf"),
                      (lora_b_path, "team/b.gguf"), (lora_other_arch_path, "gpt2.gguf"),
                      (lora_wrong_shape_path, "wrong-shape.gguf"), (tiny_model_path, "model.gguf"),
                      (lora_a_path, str(outside / "secret.gguf"))):
        place(src, adapters / name)
    write_lora(adapters / "rank8.gguf", tiny_spec, rank=8, seed=11)
    for seed in (1, 2):       # rank 64: big enough for a buffer of its own (unmapped when freed)
        write_lora(adapters / f"big{seed}.gguf", tiny_spec, rank=64, seed=20 + seed)
    data = lora_a_path.read_bytes()
    (adapters / "corrupt.gguf").write_bytes(data[: len(data) // 2])
    (adapters / "not-gguf.gguf").write_bytes(b"PK\x03\x04 not a model")
    os.mkfifo(adapters / "fifo")
    os.mkfifo(outside / "fifo")
    (adapters / "out-link.gguf").symlink_to(outside / "fifo")       # opening it would hang the server
    (adapters / "out-dir").symlink_to(outside)
    (adapters / "inside-link.gguf").symlink_to(adapters / "team/b.gguf")
    return root


def _config(files, tiny_model_path, tiny_model_f16_path, lora_a_path, persist=True) -> dict:
    base = str(tiny_model_path)
    return {
        "api_key": KEY, "idle_unload": 600, "parallel": 6, "max_queue": 64,
        "adapters_dir": [str(files / "adapters")], "persist_adapters": persist,
        "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
        "models": [
            {"alias": "base", "model": base, "aliases": ["gpt-x"]},
            {"alias": "cfg-a", "model": base, "lora_adapters": {str(lora_a_path): 1.0}},
            {"alias": "idle-base", "model": str(tiny_model_f16_path), "idle_unload": 1},
        ],
    }


@pytest.fixture(scope="module")
def srv(files, tiny_model_path, tiny_model_f16_path, lora_a_path):
    proc = ServerProcess(_config(files, tiny_model_path, tiny_model_f16_path, lora_a_path), files).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0)


def complete(client, model, prompt=PROMPT, max_tokens=10, **extra):
    return client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                     extra_body=extra or None).choices[0].text


def add(srv, alias, path, base="base", **kw):
    return srv.post("/admin/adapters", json={"path": path, "alias": alias, "base": base, **kw})


def delete(srv, alias):
    return httpx.delete(f"{srv.base_url}/admin/adapters/{alias}", headers=srv.headers(), timeout=60)


def adapters_of(srv, base="base") -> list[dict]:
    return next(b for b in srv.get("/admin/adapters").json()["data"] if b["base"] == base)["adapters"]


def counter(srv, name, **labels) -> float:
    want = sorted(f'{k}="{v}"' for k, v in labels.items())
    for line in srv.get("/metrics").text.splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m and sorted(m[1].split(",")) == want:
            return float(m[2])
    return 0.0


def test_admin_routes_need_the_api_key(srv):
    url = srv.base_url
    assert_openai_error(httpx.post(url + "/admin/adapters", json={"path": "a.gguf", "alias": "x"}), 401)
    assert_openai_error(httpx.get(url + "/admin/adapters"), 401)
    assert_openai_error(httpx.delete(url + "/admin/adapters/x"), 401)
    assert_openai_error(httpx.post(url + "/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "a"}), 401)


def test_runtime_adapter_answers_equal_the_same_adapter_from_config(srv, client, files):
    r = add(srv, "rt-a", "a.gguf")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["alias"], body["base"], body["path"], body["scale"]) == ("rt-a", "base", "a.gguf", 1.0)
    assert body["load_seconds"] > 0
    try:
        configured = complete(client, "cfg-a")
        assert complete(client, "rt-a") == configured != complete(client, "base")
        assert complete(client, "base", lora_adapters={"rt-a": 1.0}) == configured
        chat = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 8, "temperature": 0}
        assert (client.chat.completions.create(model="rt-a", **chat).choices[0].message.content
                == client.chat.completions.create(model="cfg-a", **chat).choices[0].message.content)
        card = client.models.retrieve("rt-a").model_dump()
        assert card["parent"] == "base" and card["lora_adapters"] == {"rt-a": 1.0}
        listed = srv.get("/lora-adapters", params={"model": "rt-a"}).json()
        assert [(a["name"], a["scale"]) for a in listed] == [("lora-a", 0.0), ("rt-a", 1.0)]
        rt_id = listed[1]["id"]
        assert complete(client, "base", lora=[{"id": rt_id, "scale": 1.0}]) == configured
        state = next(a for a in adapters_of(srv) if a["name"] == "rt-a")
        assert state["source"] == "runtime" and state["state"] == "loaded" and state["aliases"] == ["rt-a"]
        assert state["requests"] == 4 and state["completion_tokens"] == 4 * 10 - 2
        assert state["memory_bytes"] == (files / "adapters/a.gguf").stat().st_size
        assert state["path"] == str(files / "adapters/a.gguf") and state["load_seconds"] > 0
        assert any(m["alias"] == "rt-a" and m["runtime"] for m in srv.get("/admin/models").json()["data"])
    finally:
        r = delete(srv, "rt-a")
    assert r.status_code == 200 and r.json()["deleted"] is True
    with pytest.raises(openai.NotFoundError):
        complete(client, "rt-a")
    with pytest.raises(openai.BadRequestError, match="'rt-a' is not loaded"):
        complete(client, "base", lora_adapters={"rt-a": 1.0})
    assert "rt-a" not in [a["name"] for a in adapters_of(srv)]


def test_one_file_many_aliases_and_the_vllm_routes(srv, client, files):
    r = srv.post("/v1/load_lora_adapter", json={"lora_name": "v-b", "lora_path": str(files / "adapters/team/b.gguf")})
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'v-b' added successfully.")
    assert add(srv, "v-b-half", "team/b.gguf", scale=0.5).status_code == 200
    assert add(srv, "v-b-link", "inside-link.gguf", scale=-0.5).status_code == 200     # resolves to b.gguf
    mine = [a for a in adapters_of(srv) if "v-b" in a["names"]]
    assert len(mine) == 1 and mine[0]["names"] == ["v-b", "v-b-half", "v-b-link"]      # the file loaded once
    assert complete(client, "v-b") == complete(client, "base", lora_adapters={"v-b": 1.0}) != complete(client, "base")
    assert complete(client, "v-b-half") == complete(client, "base", lora_adapters={"v-b-link": 0.5})
    assert complete(client, "v-b-link") == complete(client, "base", lora_adapters={"v-b": -0.5})
    assert_openai_error(srv.post("/v1/load_lora_adapter", json={"lora_name": "v-b", "lora_path": "team/b.gguf"}),
                        409)
    r = srv.post("/v1/unload_lora_adapter", json={"lora_name": "v-b"})
    assert (r.status_code, r.text) == (200, "Success: LoRA adapter 'v-b' removed successfully.")
    assert complete(client, "v-b-half") == complete(client, "base", lora_adapters={"v-b-half": 0.5})
    assert_openai_error(srv.post("/v1/unload_lora_adapter", json={"lora_name": "v-b"}), 404)
    for alias in ("v-b-half", "v-b-link"):
        assert delete(srv, alias).status_code == 200
    assert not [a for a in adapters_of(srv) if a["source"] == "runtime"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path, status, words", [
    ("../outside/secret.gguf", 403, "'..' is not allowed"),
    ("team/../../outside/secret.gguf", 403, "'..' is not allowed"),
    ("OUTSIDE", 403, "outside every adapters_dir"),
    ("out-link.gguf", 403, "resolves outside adapters_dir"),
    ("out-dir/secret.gguf", 403, "resolves outside adapters_dir"),
    ("https://example.com/a.gguf", 400, "is a URL"),
    ("file:///etc/passwd", 400, "is a URL"),
    ("missing.gguf", 404, "no adapter file 'missing.gguf'"),
    ("dir", 400, "not a regular file"),
    ("fifo", 400, "not a regular file"),
    ("a.gguf\u0000", 400, "NUL byte"),
    ("", 400, "path"),
    ("gpt2.gguf", 400, "is for architecture 'gpt2', model 'base' is 'llama'"),
    ("wrong-shape.gguf", 400, "wrong-shape.gguf cannot be loaded onto model 'base'"),
    ("corrupt.gguf", 400, "corrupt.gguf"),
    ("not-gguf.gguf", 400, "not a readable GGUF file"),
    ("model.gguf", 400, "not a LoRA adapter"),
])
def test_refused_paths_leave_the_server_unaffected(srv, client, files, path, status, words):
    path = str(files / "outside/secret.gguf") if path == "OUTSIDE" else path
    r = add(srv, "never", path)
    err = assert_openai_error(r, status)
    assert words in err["message"] and err["param"] == "path", err
    assert "never" not in {m.id for m in client.models.list()}
    assert complete(client, "cfg-a", max_tokens=2)
    assert not [a for a in adapters_of(srv) if a["source"] == "runtime"]


def test_unknown_or_embedding_base_and_bad_fields(srv):
    err = assert_openai_error(add(srv, "x", "a.gguf", base="nope"), 404)
    assert err["param"] == "base"
    assert assert_openai_error(add(srv, "x", "a.gguf", scale=11), 400)["param"] == "scale"
    assert assert_openai_error(add(srv, "bad\nname", "a.gguf"), 400)["param"] == "alias"
    assert_openai_error(srv.post("/admin/adapters", json={"alias": "x"}), 400)


@pytest.mark.parametrize("alias, words", [
    ("base", "already a model alias"), ("gpt-x", "already a model alias"), ("cfg-a", "already a model alias"),
    ("lora-a", "already an adapter name on model 'base'"),
])
def test_names_colliding_with_existing_ones_are_409(srv, alias, words):
    err = assert_openai_error(add(srv, alias, "team/b.gguf"), 409)
    assert words in err["message"] and err["param"] == "alias"


def test_concurrent_adds_of_one_name_one_wins(srv):
    with ThreadPoolExecutor(4) as pool:
        codes = sorted(r.status_code for r in pool.map(lambda p: add(srv, "twin", p),
                                                       ["a.gguf", "team/b.gguf", "rank8.gguf", "a.gguf"]))
    assert codes == [200, 409, 409, 409]
    assert delete(srv, "twin").status_code == 200


def test_delete_errors(srv):
    assert assert_openai_error(delete(srv, "no-such-alias"), 404)["param"] == "alias"
    err = assert_openai_error(delete(srv, "cfg-a"), 400)
    assert "configured in the config file" in err["message"]


def test_load_and_unload_under_traffic(srv, client):
    """A DELETE while its alias streams: those requests finish in full, no other request notices."""
    assert add(srv, "busy", "rank8.gguf").status_code == 200
    jobs = [("busy", {}), ("busy", {}), ("busy", {}), ("cfg-a", {}), ("base", {"lora_adapters": {"lora-a": 0.5}}),
            ("base", {})]
    # long answers: the tiny model writes 48 tokens in a few ms, which a DELETE could arrive after
    refs = [complete(client, m, f"{PROMPT} {i}", STREAMED, ignore_eos=True, **x) for i, (m, x) in enumerate(jobs)]
    assert len(set(refs)) == len(refs)
    unloads = counter(srv, "llamaserve_adapter_unloads_total", model="base", reason="removed")

    async def scenario():
        async with openai.AsyncOpenAI(base_url=srv.base_url + "/v1", api_key=KEY, max_retries=0) as c, \
                httpx.AsyncClient(base_url=srv.base_url, headers=srv.headers(), timeout=60) as admin:
            streams = [await c.completions.create(model=m, prompt=f"{PROMPT} {i}", max_tokens=STREAMED, temperature=0,
                                                  stream=True, extra_body={"ignore_eos": True, **x})
                       for i, (m, x) in enumerate(jobs)]
            iters = [s.__aiter__() for s in streams]
            texts = [(await it.__anext__()).choices[0].text for it in iters]      # every request is running
            gone = await admin.delete("/admin/adapters/busy")
            churn = []
            for _ in range(3):            # other adapters come and go meanwhile
                added = await admin.post("/admin/adapters", json={"path": "team/b.gguf", "alias": "churn"})
                churn.append(added.status_code)
                churn.append((await admin.delete("/admin/adapters/churn")).status_code)
            late = await admin.post("/v1/completions", json={"model": "busy", "prompt": "x", "max_tokens": 2})

            async def rest(i):
                async for chunk in iters[i]:
                    texts[i] += chunk.choices[0].text
            await asyncio.gather(*(rest(i) for i in range(len(jobs))))
            return gone, churn, late, texts
    gone, churn, late, texts = asyncio.run(scenario())
    assert gone.status_code == 200 and gone.json()["draining"] is True
    assert churn == [200, 200] * 3
    assert late.status_code == 404
    assert texts == refs
    assert not [a for a in adapters_of(srv) if a["source"] == "runtime"]       # freed once its requests ended
    assert counter(srv, "llamaserve_adapter_unloads_total", model="base", reason="removed") >= unloads + 4


def test_adapters_added_after_a_removal_serve(srv, client):
    """Load, use and remove adapters again and again on one loaded base: the server keeps serving,
    and each answer is the adapter's own (a context never decodes with a freed adapter's tensors).

    One request per adapter, one token of one prompt: every request then decodes a batch of the
    same shape as the one before it, which llama.cpp would answer with the graph it built last.
    """
    answers: dict[str, list[str]] = {"big1": [], "big2": []}
    for round_ in range(3):
        for name in answers:
            alias = f"{name}-{round_}"
            assert add(srv, alias, f"{name}.gguf").status_code == 200
            answers[name].append(complete(client, alias, max_tokens=1))
            assert delete(srv, alias).status_code == 200
    assert len(set(answers["big1"])) == 1 and len(set(answers["big2"])) == 1
    assert answers["big1"] != answers["big2"]
    assert srv.proc.poll() is None and srv.get("/health").status_code == 200


def _wait_unloaded(srv, alias, timeout=20):
    deadline = time.monotonic() + timeout
    while srv.admin_state(alias)["state"] == "loaded":
        assert time.monotonic() < deadline, "the base did not unload when idle"
        time.sleep(0.2)


def test_runtime_adapters_come_back_after_an_idle_unload(srv, client, files):
    assert add(srv, "idle-a", "idle.gguf", base="idle-base").status_code == 200
    assert add(srv, "swap", "swap.gguf", base="idle-base", scale=0.5).status_code == 200
    before, swapped = complete(client, "idle-a"), complete(client, "swap")
    assert before != complete(client, "idle-base") != swapped
    _wait_unloaded(srv, "idle-base")
    assert [a["state"] for a in adapters_of(srv, "idle-base")] == ["unloaded", "unloaded"]
    assert complete(client, "idle-a") == before                    # reloaded with its base
    assert complete(client, "swap") == swapped
    assert counter(srv, "llamaserve_adapter_loads_total", model="idle-base", source="runtime") == 4
    # a file that becomes a link out of adapters_dir is not loaded again
    _wait_unloaded(srv, "idle-base")
    swap = files / "adapters/swap.gguf"
    swap.unlink()
    swap.symlink_to(files / "outside/secret.gguf")
    try:
        with pytest.raises(openai.InternalServerError, match="no longer inside adapters_dir"):
            complete(client, "swap")
        assert complete(client, "idle-a") == before
        state = next(a for a in adapters_of(srv, "idle-base") if a["name"] == "swap")
        assert state["state"] == "unloaded" and "no longer inside adapters_dir" in state["error"]
    finally:
        for alias in ("idle-a", "swap"):
            assert delete(srv, alias).status_code == 200


def test_runtime_adapters_survive_a_restart_only_when_persisted(srv, client, files, tiny_model_path,
                                                                tiny_model_f16_path, lora_a_path):
    assert add(srv, "keep", "team/b.gguf", scale=0.75).status_code == 200
    assert add(srv, "drop", "rank8.gguf").status_code == 200
    assert delete(srv, "drop").status_code == 200
    stored = json.loads((files / "adapters/llamaserve-adapters.json").read_text())
    assert stored["adapters"] == [{"alias": "keep", "base": "base", "path": "team/b.gguf", "scale": 0.75}]
    answer = complete(client, "keep")
    try:
        for persist, expected in ((True, {"keep"}), (False, set())):
            config = _config(files, tiny_model_path, tiny_model_f16_path, lora_a_path, persist=persist)
            again = ServerProcess(config, files, name=f"restart-{persist}.yaml").start()
            try:
                other = openai.OpenAI(base_url=again.base_url + "/v1", api_key=KEY, max_retries=0)
                names = {m.id for m in other.models.list()}
                assert names & {"keep", "drop"} == expected
                if persist:
                    assert complete(other, "keep") == answer
            finally:
                again.stop()
    finally:
        assert delete(srv, "keep").status_code == 200
    assert json.loads((files / "adapters/llamaserve-adapters.json").read_text())["adapters"] == []
