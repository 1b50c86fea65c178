"""SIGTERM on a real llamaserve process: stop accepting, let in-flight streams finish within
`shutdown_grace`, end the rest with a final error event, unload the models and exit 0."""

import json
import signal
import subprocess
import threading
import time

import httpx
import openai
import pytest
from helpers import N_THREADS
from server import ServerProcess

# each test here talks to a real llamaserve process
pytestmark = [pytest.mark.server, pytest.mark.slow]

LONG = {"prompt": "Once upon a time", "temperature": 0, "ignore_eos": True}


def start(tmp_path, model_path, grace, n_ctx=4096):
    config = {"shutdown_grace": grace, "parallel": 4,
              "models": [{"alias": "m", "model": str(model_path), "n_ctx": n_ctx, "n_threads": N_THREADS}]}
    return ServerProcess(config, tmp_path).start()


def wait_exit(proc: ServerProcess, timeout: float) -> int:
    try:
        return proc.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.proc.kill()
        proc.proc.wait()
        pytest.fail(f"server did not exit within {timeout}s of SIGTERM:\n{proc.log()}")


def assert_unloaded_cleanly(proc: ServerProcess):
    log = proc.log()
    assert "llamaserve.models.registry: shutdown m" in log, log      # the engine was closed by the lifespan
    assert "Traceback" not in log, log


def test_stream_within_grace_finishes_and_new_connections_are_refused(tmp_path, tiny_model_path):
    # long enough to outlast the checks below on an idle machine (the tiny model writes 2500 tokens
    # in about 0.3 s, 12000 in about 4 s)
    proc = start(tmp_path, tiny_model_path, grace=60, n_ctx=16384)
    try:
        client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key="unused", max_retries=0)
        stream = client.completions.create(model="m", prompt=LONG["prompt"], max_tokens=12000, temperature=0,
                                           stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True})
        chunks = iter(stream)
        first = next(chunks)
        assert first.choices and first.choices[0].finish_reason is None
        proc.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):         # the listening socket is closed at once
            httpx.get(proc.base_url + "/health", timeout=5)
        assert proc.proc.poll() is None                 # still serving the in-flight stream
        rest = list(chunks)
        assert wait_exit(proc, 30) == 0
    finally:
        proc.stop()
    finishes = [c.choices[0].finish_reason for c in rest if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) <= {None}
    assert rest[-1].usage.completion_tokens == 12000
    assert_unloaded_cleanly(proc)


def test_streams_past_grace_end_with_a_shutdown_event(tmp_path, tiny_model_path):
    grace = 1.0
    proc = start(tmp_path, tiny_model_path, grace=grace)
    body = {"model": "m", "max_tokens": 4000, **LONG}
    results: dict[str, object] = {}
    started = threading.Barrier(3)

    def raw_stream():
        with httpx.stream("POST", proc.base_url + "/v1/completions", json={**body, "stream": True},
                          timeout=60) as r:
            lines = (line for line in r.iter_lines() if line)
            results["raw_first"] = next(lines)
            started.wait()
            results["raw_rest"] = list(lines)
            results["raw_end"] = time.monotonic()

    def openai_stream():
        client = openai.OpenAI(base_url=proc.base_url + "/v1", api_key="unused", max_retries=0)
        chunks = iter(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Tell me a long story."}], max_tokens=4000,
            temperature=0, stream=True, extra_body={"ignore_eos": True}))
        next(chunks)
        started.wait()
        try:
            results["openai_tail"] = sum(1 for _ in chunks)
        except openai.APIError as exc:
            results["openai_error"] = exc

    def plain():
        results["plain"] = httpx.post(proc.base_url + "/v1/completions", json=body, timeout=60)

    threads = [threading.Thread(target=f) for f in (raw_stream, openai_stream, plain)]
    try:
        for t in threads:
            t.start()
        started.wait(timeout=60)
        deadline = time.monotonic() + 30
        while proc.admin_state("m").get("active_sequences") != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.admin_state("m")["active_sequences"] == 3        # all three are generating
        sigterm_at = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=30)
        assert wait_exit(proc, grace + 10) == 0
        exited_after = time.monotonic() - sigterm_at
    finally:
        proc.stop()

    # The raw stream: normal chunks, then one OpenAI-shaped error event, then [DONE].
    rest = results["raw_rest"]
    assert rest[-1] == "data: [DONE]"
    final = json.loads(rest[-2].removeprefix("data: "))
    assert final == {"error": {"message": "server is shutting down", "type": "server_error", "param": None,
                               "code": "shutdown"}}
    assert all('"finish_reason":null' in line for line in rest[:-2])      # no pretend-normal ending
    assert grace - 0.2 <= results["raw_end"] - sigterm_at <= grace + 4
    # The openai client raises on that event instead of returning a truncated answer.
    assert "openai_error" in results, results
    assert "shutting down" in str(results["openai_error"])
    # A request that had not answered yet gets 503 with Retry-After.
    plain = results["plain"]
    assert plain.status_code == 503 and plain.headers["retry-after"]
    assert plain.json()["error"]["code"] == "shutdown"
    assert exited_after <= grace + 8
    assert_unloaded_cleanly(proc)
