"""llama.cpp's `grammar` request field (GBNF) on completions and chat: honoured, and a grammar that
does not parse is a 400 naming the parser's reason before any stream starts."""

from __future__ import annotations

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

YES_NO = 'root ::= "yes" | "no"'


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    config = {"defaults": {"n_ctx": 256, "n_threads": N_THREADS},
              "models": [{"alias": "m", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("grammar")).start()
    yield proc
    proc.stop()


@pytest.mark.parametrize("seed", range(4))
def test_grammar_constrains_completions_and_chat(srv, seed):
    done = srv.post("/v1/completions", json={"model": "m", "prompt": f"Answer {seed}:", "max_tokens": 4,
                                             "temperature": 1.0, "seed": seed, "grammar": YES_NO})
    assert done.status_code == 200, done.text
    assert done.json()["choices"][0]["text"] in ("yes", "no")
    chat = srv.post("/v1/chat/completions", json={"model": "m", "max_tokens": 4, "temperature": 1.0, "seed": seed,
                                                  "messages": [{"role": "user", "content": f"Question {seed}?"}],
                                                  "grammar": YES_NO})
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] in ("yes", "no")


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_grammar_that_does_not_parse_is_a_400(srv, route, stream):
    body = {"model": "m", "max_tokens": 4, "stream": stream, "grammar": 'root ::= ( "a"'}
    body.update({"prompt": "x"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]})
    r = httpx.post(srv.base_url + route, json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "grammar" and "grammar" in error["message"]
    both = {**body, "stream": False, "grammar": YES_NO, "response_format": {"type": "json_object"}}
    r = httpx.post(srv.base_url + route, json=both, timeout=60)
    assert r.status_code == 400 and "not both" in r.json()["error"]["message"], r.text
    assert srv.get("/health").status_code == 200
