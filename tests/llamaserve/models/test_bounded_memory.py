"""Nothing a client chooses (paths, model names, header values) becomes a metric label or grows the
server's memory: hostile traffic twice over leaves the same metric series and a flat RSS."""

from __future__ import annotations

import secrets

import httpx
import pytest
from helpers import N_THREADS
from load_scenario import rss_kib
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_path):
    folder = tmp_path_factory.mktemp("bounded")
    config = {"unknown_model": "error", "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
              "models": [{"alias": "m", "model": str(tiny_model_path)}]}
    proc = ServerProcess(config, folder).start()
    yield proc
    proc.stop()


def hostile_round(srv: ServerProcess, n: int) -> set[str]:
    """`n` requests with fresh random paths, model names and header values; the strings sent."""
    sent = set()
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        for i in range(n):
            word = f"x{secrets.token_hex(6)}"
            sent.add(word)
            headers = {"x-request-id": word, f"x-{word}": word, "user-agent": word}
            kind = i % 5
            if kind == 0:
                r = http.get(f"/{word}/{word}", headers=headers)
            elif kind == 1:
                r = http.post("/v1/completions", json={"model": word, "prompt": "hi", "max_tokens": 1},
                              headers=headers)
            elif kind == 2:
                r = http.post("/v1/chat/completions", json={"model": word, "messages": [
                    {"role": "user", "content": word}]}, headers=headers)
            elif kind == 3:
                r = http.get(f"/v1/models/{word}", headers=headers)
            else:
                r = http.post(f"/admin/models/{word}/load", headers=headers)
            assert r.status_code == 404, (r.status_code, r.text)
    return sent


def series(srv: ServerProcess) -> list[str]:
    return [line for line in srv.get("/metrics").text.splitlines() if line and not line.startswith("#")]


def test_hostile_names_grow_no_metric_series_and_no_memory(server):
    assert server.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2}).status_code == 200
    series(server)                                            # /metrics counts itself from its first call
    first = hostile_round(server, 200)
    after_first, rss_first = series(server), rss_kib(server.proc.pid)
    second = hostile_round(server, 400)
    after_second, rss_second = series(server), rss_kib(server.proc.pid)

    labels = lambda lines: {line.rsplit(" ", 1)[0] for line in lines}      # noqa: E731
    assert labels(after_second) == labels(after_first)       # twice the distinct names, not one series more
    text = "\n".join(after_second)
    assert not any(word in text for word in first | second)
    assert 'route="unmatched"' in text                        # arbitrary paths share one fixed label
    assert rss_second - rss_first < 2048, (rss_first, rss_second)     # KiB
