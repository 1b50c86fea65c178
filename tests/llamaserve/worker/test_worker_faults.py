"""`isolation: process`: faults caused for real (signals to the worker, a config llama.cpp aborts on,
a memory limit) end only that model's requests; the server and the other models go on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory, tiny_model_path):
    folder = tmp_path_factory.mktemp("faults")
    files = {}
    for name in ("killed", "hung", "other", "aborts", "greedy"):     # one file (so one worker) each
        files[name] = folder / f"{name}.gguf"
        shutil.copy(tiny_model_path, files[name])
    config = {
        "idle_unload": 600, "parallel": 1, "max_queue": 4,
        "defaults": {"n_ctx": 4096, "n_threads": N_THREADS, "isolation": "process"},
        "models": [
            {"alias": "killed", "model": str(files["killed"])},
            {"alias": "hung", "model": str(files["hung"]), "step_timeout": 2},
            {"alias": "other", "model": str(files["other"]), "parallel": 2},
            # llama.cpp aborts (GGML_ASSERT on the layer count) while loading this one
            {"alias": "aborts", "model": str(files["aborts"]), "kv_overrides": {"llama.block_count": 100000}},
            # no Python process with llama.cpp in it fits in 20 MiB
            {"alias": "greedy", "model": str(files["greedy"]), "max_rss": "20MiB"},
        ],
    }
    proc = ServerProcess(config, folder).start()
    yield proc
    proc.stop()


def complete(srv: ServerProcess, model: str, max_tokens: int = 16) -> httpx.Response:
    return srv.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                                             "temperature": 0})


def state(srv: ServerProcess, alias: str) -> dict:
    return srv.admin_state(alias)


def metric(srv: ServerProcess, name: str, **labels: str) -> float:
    want = sorted(f'{k}="{v}"' for k, v in labels.items())
    for line in srv.get("/metrics").text.splitlines():
        if line.startswith(name + "{") and sorted(line[line.index("{") + 1:line.index("}")].split(",")) == want:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def metric_plain(srv: ServerProcess, name: str) -> float:
    """An unlabelled metric's value."""
    for line in srv.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


class Stream:
    """A streamed completion read line by line from a thread of its own."""

    def __init__(self, srv: ServerProcess, model: str, max_tokens: int) -> None:
        self.chunks: list[dict] = []
        self.done = threading.Event()
        self.ended_with_done = False
        self.status: int | None = None
        body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "ignore_eos": True}
        self._thread = threading.Thread(target=self._run, args=(srv, body), daemon=True)
        self._thread.start()

    def _run(self, srv: ServerProcess, body: dict) -> None:
        try:
            with httpx.stream("POST", srv.base_url + "/v1/completions", json=body, timeout=60) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    if line == "data: [DONE]":
                        self.ended_with_done = True
                    elif line.startswith("data: "):
                        self.chunks.append(json.loads(line[6:]))
        finally:
            self.done.set()

    def wait_chunks(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.chunks) < n:
            assert time.monotonic() < deadline and not self.done.is_set(), (self.status, self.chunks[-3:])
            time.sleep(0.01)

    @property
    def error(self) -> dict | None:
        return next((c["error"] for c in self.chunks if "error" in c), None)

    @property
    def text(self) -> str:
        return "".join(c["choices"][0]["text"] for c in self.chunks if "choices" in c)

    @property
    def finish(self) -> str | None:
        return next((c["choices"][0]["finish_reason"] for c in self.chunks
                     if "choices" in c and c["choices"][0]["finish_reason"]), None)


def ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        with open(f"/proc/{pid}/status") as f:
            pid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
        out.append(pid)
    return out


def wait_for(predicate, timeout: float = 20, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_mid_stream_ends_only_that_models_requests(fault_server):
    srv = fault_server
    reference = complete(srv, "other", 200).json()["choices"][0]["text"]
    assert complete(srv, "killed").status_code == 200
    pid = state(srv, "killed")["worker"]["pid"]
    other_pid = state(srv, "other")["worker"]["pid"]

    running = Stream(srv, "killed", 3000)
    running.wait_chunks(2)
    os.kill(pid, signal.SIGSTOP)                 # frozen mid-stream, so nothing finishes before the kill
    queued: dict = {}
    waiter = threading.Thread(target=lambda: queued.update(r=complete(srv, "killed")), daemon=True)
    waiter.start()
    wait_for(lambda: state(srv, "killed")["queued"] >= 1, what="a queued request")
    other = Stream(srv, "other", 200)
    other.wait_chunks(1)
    os.kill(pid, signal.SIGKILL)

    assert running.done.wait(20)
    assert running.error is not None and running.error["code"] == "model_crashed", running.chunks[-2:]
    assert "killed by SIGKILL" in running.error["message"] and running.ended_with_done
    waiter.join(20)
    r = queued["r"]
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1, r.text
    assert r.json()["error"]["code"] == "model_crashed"
    assert other.done.wait(20)
    assert other.error is None and other.ended_with_done
    assert other.text == reference and other.finish == "length"
    assert state(srv, "other")["worker"]["pid"] == other_pid

    again = complete(srv, "killed")                # reloaded in a new worker
    assert again.status_code == 200, again.text
    after = state(srv, "killed")
    assert after["state"] == "loaded" and after["worker"]["pid"] != pid
    assert after["restarts"] == 1 and after["crashes"] == 1
    assert after["last_crash"]["cause"] == "signal" and "SIGKILL" in after["last_crash"]["reason"]
    assert metric(srv, "llamaserve_worker_crashes_total", model="killed", cause="signal") == 1
    assert metric(srv, "llamaserve_worker_restarts_total", model="killed") == 1
    assert srv.get("/health").status_code == 200


def test_a_stream_starts_with_its_first_token_and_a_client_gone_before_is_dropped(fault_server):
    """As llama-server: a streamed response's headers wait for the first token (so a failure before
    it can still be an HTTP error), and a client that leaves before then is noticed and its request
    cancelled. A stopped worker holds the first token back for as long as the test needs."""
    srv = fault_server
    assert complete(srv, "other").status_code == 200
    pid = state(srv, "other")["worker"]["pid"]
    before = metric_plain(srv, "llamaserve_cancelled_requests_total")
    body = {"model": "other", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stream": True}
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(httpx.ReadTimeout):       # no headers: there is no token to send yet
            with httpx.stream("POST", srv.base_url + "/v1/completions", json=body, timeout=0.5):
                pass
    finally:
        os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while metric_plain(srv, "llamaserve_cancelled_requests_total") != before + 1:
        assert time.monotonic() < deadline, "the request of the client that left was not cancelled"
        time.sleep(0.05)
    assert state(srv, "other")["active_sequences"] == 0
    with httpx.stream("POST", srv.base_url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.read().decode().rstrip().endswith("data: [DONE]")


def test_hung_worker_is_killed_by_the_watchdog_and_restarted(fault_server):
    srv = fault_server
    assert complete(srv, "hung").status_code == 200
    pid = state(srv, "hung")["worker"]["pid"]
    stream = Stream(srv, "hung", 3000)
    stream.wait_chunks(2)
    stopped = time.monotonic()
    os.kill(pid, signal.SIGSTOP)                 # a hang: the worker makes no progress at all
    assert stream.done.wait(20)
    assert time.monotonic() - stopped >= 2 - 0.2     # step_timeout: 2
    assert stream.error is not None and "no progress for 2 s" in stream.error["message"], stream.chunks[-2:]
    # restarted at once: the next request finds a new worker
    new_pid = wait_for(lambda: (state(srv, "hung").get("worker") or {}).get("pid"), what="the restart")
    assert new_pid != pid
    assert complete(srv, "hung").status_code == 200
    after = state(srv, "hung")
    assert after["last_crash"]["cause"] == "hung" and after["restarts"] == 1
    assert metric(srv, "llamaserve_worker_crashes_total", model="hung", cause="hung") == 1


def test_worker_that_aborts_while_loading_fails_its_request_then_backs_off(fault_server):
    srv = fault_server
    for _attempt in range(3):
        r = complete(srv, "aborts")
        assert r.status_code == 500, r.text
        error = r.json()["error"]
        assert error["code"] == "model_load_failed"
        assert "'aborts'" in error["message"] and "SIGABRT while loading" in error["message"]
        assert srv.get("/health").status_code == 200
        assert complete(srv, "other").status_code == 200      # the server and other models go on
    # three crashes within a minute: failed, with a backoff instead of a reload loop
    r = complete(srv, "aborts")
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_failed", r.text
    assert 1 <= int(r.headers["retry-after"]) <= 10
    entry = state(srv, "aborts")
    assert entry["state"] == "failed" and entry["crashes"] == 3 and 0 < entry["retry_after"] <= 10
    assert entry["last_crash"]["cause"] == "signal" and "SIGABRT" in entry["last_crash"]["reason"]


def test_worker_over_max_rss_is_stopped_with_a_clear_error(fault_server):
    srv = fault_server
    r = complete(srv, "greedy")
    assert r.status_code == 500, r.text
    message = r.json()["error"]["message"]
    assert "'greedy'" in message and "over its max_rss of 20 MiB" in message
    assert state(srv, "greedy")["last_crash"]["cause"] == "max_rss"
    assert metric(srv, "llamaserve_worker_crashes_total", model="greedy", cause="max_rss") == 1
    assert srv.get("/health").status_code == 200


def test_admin_shows_each_workers_pid_and_memory(fault_server):
    srv = fault_server
    assert complete(srv, "other").status_code == 200
    entry = state(srv, "other")
    assert entry["isolation"] == "process"
    pid, rss = entry["worker"]["pid"], entry["worker"]["rss_bytes"]
    assert pid != srv.proc.pid and os.path.exists(f"/proc/{pid}")
    assert srv.proc.pid in ancestors(pid)            # forked by the server's fork server
    assert 10 * 2**20 < rss < 2**30
    assert srv.post("/admin/models/other/unload").status_code == 200
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2],
             what="the worker to exit on unload")
