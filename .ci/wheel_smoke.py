"""Smoke test of an installed llamacore wheel (run by .ci/wheel with the fresh venv's python, outside
the checkout): load a model, generate, start llamaserve on it and answer one request.

Usage: python wheel_smoke.py MODEL.gguf
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import llamacore

model = sys.argv[1]

where = Path(llamacore.__file__).resolve()
assert "site-packages" in where.parts, f"llamacore imported from {where}, not from the installed wheel"

from llamacore import Llama  # noqa: E402  (loads the native library: only once the wheel's location is checked)

llm = Llama(model, n_ctx=128, n_threads=2)
out = llm("Hello", max_tokens=4, temperature=0)
assert out["usage"]["completion_tokens"] >= 1, out
print("generate: ok", repr(out["choices"][0]["text"]))

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
llamaserve = Path(sys.executable).with_name("llamaserve")
server = subprocess.Popen([str(llamaserve), "--model", model, "--alias", "tiny", "--host", "127.0.0.1",
                           "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
base = f"http://127.0.0.1:{port}"
try:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"llamaserve did not start:\n{server.stdout.read().decode()}") from None
            time.sleep(0.2)
    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 3}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        reply = json.load(r)
    assert reply["object"] == "text_completion" and reply["usage"]["completion_tokens"] >= 1, reply
    print("llamaserve: ok", repr(reply["choices"][0]["text"]))
    with urllib.request.urlopen(base + "/", timeout=10) as r:       # the chat page, shipped as package data
        page = r.read().decode()
    assert r.headers["Content-Type"].startswith("text/html") and "/v1/chat/completions" in page, page[:200]
    print("chat page: ok", len(page), "bytes")
finally:
    server.terminate()
    server.wait(timeout=30)
print("wheel smoke test passed", os.path.basename(str(where.parent.parent)))
