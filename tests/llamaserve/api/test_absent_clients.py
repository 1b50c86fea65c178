"""Slow and absent clients (hostile clients, findings 3 and 4): a client that never reads its stream
holds bytes, not the model (another model's load evicts it), and loses its connection after
send_timeout; a non-streamed request whose client leaves is cancelled and its slot freed."""

from __future__ import annotations

import json
import re
import socket
import time

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path, tiny_model_f16_path):
    config = {"max_loaded_models": 1, "parallel": 1, "max_queue": 4, "send_timeout": "2s",
              "defaults": {"n_ctx": 4096, "n_threads": N_THREADS},
              "models": [{"alias": "a", "model": str(tiny_model_path)},
                         {"alias": "b", "model": str(tiny_model_f16_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("absent")).start()
    yield proc
    proc.stop()


def raw_request(srv, body: dict, rcvbuf: int = 4096, path: str = "/v1/completions") -> socket.socket:
    """A request sent on a socket whose receive window is tiny and that is never read."""
    port = int(srv.base_url.rsplit(":", 1)[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return sock


def active(srv) -> float:
    text = httpx.get(srv.base_url + "/metrics", timeout=30).text
    return float(re.search(r"^llamaserve_active_sequences (\S+)$", text, re.M).group(1))


def cancelled(srv) -> float:
    text = httpx.get(srv.base_url + "/metrics", timeout=30).text
    return float(re.search(r"^llamaserve_cancelled_requests_total (\S+)$", text, re.M).group(1))


def test_an_unread_stream_does_not_pin_its_model(srv):
    """Finding: the model stayed in use while the socket was open, so no other model could load."""
    sock = raw_request(srv, {"model": "a", "prompt": "Once", "max_tokens": 1500, "ignore_eos": True,
                             "temperature": 0, "stream": True})
    try:
        time.sleep(1.0)
        start = time.monotonic()
        other = httpx.post(srv.base_url + "/v1/completions", timeout=60,
                           json={"model": "b", "prompt": "Hi", "max_tokens": 4, "temperature": 0})
        assert other.status_code == 200 and time.monotonic() - start < 15
    finally:
        sock.close()


def test_a_client_that_reads_nothing_is_dropped_after_send_timeout(srv):
    # 20 probabilities a token: some 6 MB, more than the socket and the server's buffers hold
    sock = raw_request(srv, {"model": "a", "prompt": "Once", "n_predict": 3000, "ignore_eos": True,
                             "temperature": 0, "stream": True, "n_probs": 20}, path="/completion")
    try:
        time.sleep(10)                     # generation (a few seconds), then 2 s of no progress
        sock.settimeout(10)
        received = b""
        while chunk := sock.recv(65536):   # what was buffered, then the server's close
            received += chunk
        assert received.startswith(b"HTTP/1.1 200") and b'"stop":true' not in received
    finally:
        sock.close()


def test_a_non_streamed_request_whose_client_left_is_cancelled(srv):
    """Finding: it decoded 8,000 tokens to nobody and held its slot; llama-server cancels these."""
    before = cancelled(srv)
    sock = raw_request(srv, {"model": "a", "prompt": "Once", "max_tokens": 3000, "ignore_eos": True,
                             "temperature": 0}, rcvbuf=65536)
    deadline = time.monotonic() + 30           # decoding (model a may have to load again first)
    while active(srv) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    sock.close()
    start = time.monotonic()
    quick = httpx.post(srv.base_url + "/v1/completions", timeout=60,       # parallel 1: it needs that slot
                       json={"model": "a", "prompt": "Hi", "max_tokens": 2, "temperature": 0})
    assert quick.status_code == 200 and time.monotonic() - start < 3
    deadline = time.monotonic() + 2            # counted as the cancelled generation winds down
    while cancelled(srv) < before + 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cancelled(srv) == before + 1
