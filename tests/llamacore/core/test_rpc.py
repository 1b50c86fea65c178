"""A model split across ggml RPC workers (`llamaserve rpc-worker`) on loopback: same tokens and logits
as a local run; unreachable, busy, wrong and dying workers give clear errors, never an abort."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from helpers import N_THREADS, describe
from isolation import child_env, run_python
from server import ServerProcess, free_port

pytestmark = [pytest.mark.slow]

PROMPT = "Once upon a time"


def start_worker(folder, name: str) -> tuple[subprocess.Popen, str]:
    from llamacore.rpc import RPCUnavailableError, preflight

    port = free_port()
    log = open(folder / f"{name}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "llamaserve", "rpc-worker", "--port", str(port),
                             "--threads", "1"], stdout=log, stderr=subprocess.STDOUT, env=child_env())
    endpoint = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, (folder / f"{name}.log").read_text()
        try:
            preflight(endpoint, timeout=2)
            return proc, endpoint
        except RPCUnavailableError:
            assert time.monotonic() < deadline, "the RPC worker did not start"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rpc")
    started = [start_worker(folder, f"worker{i}") for i in range(2)]
    yield [endpoint for _, endpoint in started], [proc for proc, _ in started]
    for proc, _ in started:
        proc.terminate()
        proc.wait(10)


# greedy tokens and the prompt's last logits, computed in a child interpreter (llama.cpp aborts
# the process it runs in when an RPC worker misbehaves: never the test runner)
GENERATE = """
import json, numpy as np
from llamacore import Llama
llm = Llama({path!r}, n_ctx=256, n_threads={threads}, **{kwargs!r})
out = llm.create_completion({prompt!r}, max_tokens=24, temperature=0)
tokens = llm.tokenize({prompt!r}.encode())
llm.ctx.kv_remove(0, 0, -1)
from llamacore import Batch
batch = Batch(64)
batch.add_sequence(tokens, 0, 0, logits_last=True)
llm.ctx.decode(batch)
print(json.dumps({{"text": out["choices"][0]["text"], "logits": llm.ctx.logits(len(tokens) - 1).tolist()}}))
"""


def generate(path, **kwargs) -> dict:
    proc = run_python(GENERATE.format(path=str(path), threads=N_THREADS, kwargs=kwargs, prompt=PROMPT))
    assert proc.returncode == 0, describe(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_split_across_two_workers_and_across_local_and_one_equals_local(workers, tiny_model_path):
    import numpy as np

    endpoints, _ = workers
    local = generate(tiny_model_path)
    both = generate(tiny_model_path, rpc_servers=endpoints, tensor_split=[1.0, 1.0])
    mixed = generate(tiny_model_path, rpc_servers=endpoints[:1], n_gpu_layers=1)    # one of the 2 layers remote
    assert local["text"] and both["text"] == local["text"] and mixed["text"] == local["text"]
    for run in (both, mixed):
        np.testing.assert_allclose(run["logits"], local["logits"], atol=1e-4)


def test_refused_and_wrong_endpoints_raise_before_llama_cpp_sees_them(tiny_model_path):
    from llamacore import Model
    from llamacore.rpc import RPCUnavailableError

    closed = free_port()
    with pytest.raises(RPCUnavailableError, match=f"127.0.0.1:{closed} is not reachable"):
        Model(tiny_model_path, rpc_servers=[f"127.0.0.1:{closed}"])
    with pytest.raises(ValueError, match="not host:port"):
        Model(tiny_model_path, rpc_servers=["127.0.0.1"])

    # a port where something else answers (not an RPC worker): the handshake's answer is wrong
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_junk() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(64)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(40))
    threading.Thread(target=answer_junk, daemon=True).start()
    with pytest.raises(RPCUnavailableError, match="speaks RPC protocol"):
        Model(tiny_model_path, rpc_servers=[f"127.0.0.1:{port}"])
    listener.close()


def test_a_busy_worker_is_refused_not_waited_on_forever(workers, tiny_model_path):
    from llamacore.rpc import RPCUnavailableError, preflight

    endpoints, _ = workers
    holder = subprocess.Popen([sys.executable, "-c", (
        f"from llamacore import Model; import sys, time; m = Model({str(tiny_model_path)!r}, "
        f"rpc_servers=[{endpoints[1]!r}]); print('loaded', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, env=child_env(), text=True)
    try:
        assert holder.stdout.readline().strip() == "loaded"
        started = time.monotonic()
        with pytest.raises(RPCUnavailableError, match="did not answer the handshake within 1 s"):
            preflight(endpoints[1], timeout=1)
        assert time.monotonic() - started < 3
    finally:
        holder.kill()
        holder.wait()
    preflight(endpoints[1])          # free again once its client has gone


def test_workers_listen_on_loopback_only(workers):
    _, procs = workers
    ports = {}
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":                                   # LISTEN
            address, port = local.split(":")
            ports[int(port, 16)] = address
    endpoints = workers[0]
    for endpoint in endpoints:
        assert ports[int(endpoint.rsplit(":", 1)[1])] == "0100007F"      # 127.0.0.1


def test_rpc_worker_warns_before_listening_beyond_loopback():
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the warning comes, then the bind fails
    proc = subprocess.run([sys.executable, "-m", "llamaserve", "rpc-worker", "--host", "192.0.2.1", "--port",
                           str(free_port())], capture_output=True, text=True, timeout=60, env=child_env())
    assert proc.returncode == 1, describe(proc)
    assert "no authentication and no encryption" in proc.stderr
    assert "could not listen on 192.0.2.1" in proc.stderr


@pytest.mark.server
def test_server_model_on_rpc_workers_and_a_worker_killed_mid_stream(tmp_path, workers, tiny_model_path):
    endpoints, _ = workers
    own, endpoint = start_worker(tmp_path, "victim")          # this test kills it
    config = {"defaults": {"n_ctx": 2048, "n_threads": N_THREADS},
              "models": [{"alias": "remote", "model": str(tiny_model_path), "rpc_servers": [endpoint]},
                         {"alias": "local", "model": str(tiny_model_path), "n_batch": 256}]}
    srv = ServerProcess(config, tmp_path).start()
    try:
        body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}
        remote = srv.post("/v1/completions", json={"model": "remote", **body})
        local = srv.post("/v1/completions", json={"model": "local", **body})
        assert remote.status_code == 200 and local.status_code == 200, remote.text
        assert remote.json()["choices"][0]["text"] == local.json()["choices"][0]["text"]

        chunks: list[str] = []
        with httpx.stream("POST", srv.base_url + "/v1/completions", timeout=60,
                          json={"model": "remote", **body, "max_tokens": 1800, "stream": True,
                                "ignore_eos": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    chunks.append(line[6:])
                if len(chunks) == 3:
                    own.send_signal(signal.SIGKILL)            # the RPC worker dies mid-generation
        assert chunks[-1] == "[DONE]"
        error = json.loads(chunks[-2])["error"]
        assert error["code"] == "model_crashed", error
        assert srv.get("/health").status_code == 200
        again = srv.post("/v1/completions", json={"model": "local", **body})
        assert again.status_code == 200 and again.json()["choices"][0]["text"] == local.json()["choices"][0]["text"]
        # the dead worker is named when the model tries to load again
        time.sleep(0.5)
        retry = srv.post("/v1/completions", json={"model": "remote", **body})
        assert retry.status_code in (500, 503), retry.text
        assert endpoint in retry.json()["error"]["message"] or "model_failed" == retry.json()["error"]["code"]
    finally:
        srv.stop()
        own.kill()
    assert "Traceback" not in srv.log()


def test_rpc_models_run_in_a_worker_process_whatever_the_default(tiny_model_path, tmp_path):
    from llamaserve.config.keys import DEFAULT_ISOLATION
    from llamaserve.config.parse import ConfigError, parse_config

    rpc = {"model": str(tiny_model_path), "rpc_servers": ["127.0.0.1:50052"]}
    config = parse_config({"models": [rpc, {"alias": "local", "model": str(tiny_model_path)}]}, None, tmp_path)
    assert [m.isolation for m in config.models] == ["process", None]       # None: DEFAULT_ISOLATION
    assert DEFAULT_ISOLATION == "thread"
    with pytest.raises(ConfigError, match="rpc_servers: needs isolation: process"):
        parse_config({"models": [{**rpc, "isolation": "thread"}]}, None, tmp_path)
