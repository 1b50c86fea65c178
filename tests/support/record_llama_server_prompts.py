"""Record the prompts llama-server renders for every template llama.cpp ships x every shape in
chat_shapes.SHAPES (its POST /apply-template, --jinja --chat-template-file), as sha256 digests in
tests/llamacore/chat/llama_server_prompts.json; the parity test renders the same here and compares.

    python tests/support/record_llama_server_prompts.py [path/to/llama-server]

Run it when the vendored llama.cpp changes (the default server is the one benchmarks/ build from the
same tree, build/peer-tools/bin/llama-server).
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from chat_shapes import MODEL, PROMPTS, SHAPES, TEMPLATES  # noqa: E402
from helpers import REPO_ROOT  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(server: Path, template: Path) -> dict[str, str]:
    port = free_port()
    proc = subprocess.Popen([str(server), "-m", str(MODEL), "--jinja", "--chat-template-file", str(template),
                             "--port", str(port), "-c", "512", "-np", "1", "--no-webui"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                return {name: "server-error" for name in SHAPES}
            time.sleep(0.05)
        out = {}
        for name, body in SHAPES.items():
            r = httpx.post(url + "/apply-template", json=body, timeout=30)
            out[name] = (hashlib.sha256(r.json()["prompt"].encode()).hexdigest() if r.status_code == 200
                         else "error")
        return out
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    server = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "build" / "peer-tools" / "bin" / "llama-server"
    table = {t.name: record(server, t) for t in sorted(TEMPLATES.glob("*.jinja"))}
    PROMPTS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{len(table)} templates x {len(SHAPES)} shapes -> {PROMPTS}")


if __name__ == "__main__":
    main()
