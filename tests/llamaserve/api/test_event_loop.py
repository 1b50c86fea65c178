"""The event loop only moves bytes (hostile clients, findings 5 and 8): a body of 120k messages is
refused, a megabytes-long prompt is tokenized on a worker thread while /health still answers at once,
/tokenize's pieces are bounded, and a token id past int32 is a 400, not a 500."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    config = {"max_body_bytes": "8MiB", "defaults": {"n_ctx": 128, "n_threads": N_THREADS},
              "models": [{"alias": "tiny", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("loop")).start()
    yield proc
    proc.stop()


def health_while(srv, hostile) -> tuple[float, httpx.Response]:
    """The slowest /health answer while `hostile()` runs (in another thread), and its response."""
    out: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", hostile()))
    thread.start()
    slowest = 0.0
    with httpx.Client(timeout=30) as client:
        while thread.is_alive():
            start = time.monotonic()
            assert client.get(srv.base_url + "/health").status_code == 200
            slowest = max(slowest, time.monotonic() - start)
            time.sleep(0.02)
    thread.join()
    return slowest, out["r"]


def test_a_body_of_many_messages_is_refused_and_blocks_nobody(srv):
    body = json.dumps({"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": ""}] * 120_000})
    assert len(body) > 3_500_000
    slowest, resp = health_while(srv, lambda: httpx.post(srv.base_url + "/v1/chat/completions", content=body,
                                                         headers={"Content-Type": "application/json"}, timeout=60))
    assert resp.status_code == 400 and "at most 4096" in resp.json()["error"]["message"]
    assert slowest < 0.5


def test_a_long_prompt_is_tokenized_off_the_loop(srv):
    content = "the quick brown fox jumps over the lazy dog " * 150_000      # 6.6 MB, about 1.5M tokens
    slowest, resp = health_while(srv, lambda: httpx.post(srv.base_url + "/tokenize", json={"content": content},
                                                         timeout=120))
    assert resp.status_code == 200 and len(resp.json()["tokens"]) > 1_000_000
    assert slowest < 0.5
    pieces = httpx.post(srv.base_url + "/tokenize", json={"content": content, "with_pieces": True}, timeout=120)
    assert pieces.status_code == 400 and "with_pieces answers at most 262144" in pieces.json()["error"]["message"]


@pytest.mark.parametrize("tokens", [[2147483648], [-1], [10**30]])
def test_token_ids_past_the_vocabulary_are_a_400(srv, tokens):
    resp = httpx.post(srv.base_url + "/detokenize", json={"tokens": tokens}, timeout=30)
    assert resp.status_code == 400 and resp.json()["error"]["param"].startswith("tokens")
