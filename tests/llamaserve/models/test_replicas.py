"""Replicas behind a load balancer: /health (alive) and /ready (serving) differ; on SIGTERM /ready
turns 503 first while requests are still served for drain_delay, then the server exits 0."""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_ready_waits_for_the_default_model_and_turns_503_before_connections_close(tmp_path, tiny_model_path):
    config = {"api_key": "secret", "drain_delay": 2, "ready_requires_model": True, "idle_unload": 0.5,
              "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
              "models": [{"alias": "m", "model": str(tiny_model_path)}]}
    srv = ServerProcess(config, tmp_path).start()
    try:
        ready = httpx.get(srv.base_url + "/ready")     # probes send no key: /ready and /health are open
        assert ready.status_code in (200, 503) and ready.json()["status"] in ("ready", "loading")
        deadline = time.monotonic() + 30
        while srv.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, srv.log()
            time.sleep(0.1)
        assert srv.admin_state("m")["state"] == "loaded"       # loaded at start, without a request
        time.sleep(1.5)
        assert srv.admin_state("m")["state"] == "loaded"       # and kept past idle_unload: /ready needs it

        srv.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while srv.get("/ready").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert srv.get("/ready").json() == {"status": "draining"}
        assert httpx.get(srv.base_url + "/health").status_code == 200
        answer = srv.post("/v1/completions", json={"model": "m", "prompt": "Hello", "max_tokens": 4})
        assert answer.status_code == 200, answer.text      # still served during drain_delay
        assert srv.proc.wait(20) == 0
    finally:
        srv.stop()
    assert "not ready; serving on for drain_delay" in srv.log()


def test_ready_without_requirements_is_200_at_once(tmp_path, tiny_model_path):
    config = {"defaults": {"n_ctx": 256, "n_threads": N_THREADS},
              "models": [{"alias": "m", "model": str(tiny_model_path)}]}
    srv = ServerProcess(config, tmp_path).start()
    try:
        assert srv.get("/ready").json() == {"status": "ready"}
        assert srv.admin_state("m")["state"] == "unloaded"     # lazy as ever
        srv.proc.send_signal(signal.SIGTERM)                   # drain_delay 0: closes at once, exit 0
        assert srv.proc.wait(20) == 0
    finally:
        srv.stop()
