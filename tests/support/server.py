"""Run a real llamaserve process on a free loopback port for tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m llamaserve --config FILE` on 127.0.0.1; stopped with SIGTERM.

    The config is written as YAML, or as JSON when ``name`` ends in .json.
    """

    def __init__(self, config: dict, directory: Path, name: str = "llamaserve.yaml") -> None:
        self.port = free_port()
        self.config_path = directory / name
        config = {**config, "host": "127.0.0.1", "port": self.port}
        text = json.dumps(config, indent=2) if name.endswith(".json") else yaml.safe_dump(config)
        self.config_path.write_text(text)
        self.log_path = directory / (name + ".log")
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api_key = config.get("api_key")
        self.proc: subprocess.Popen | None = None
        # the command line after `python -m llamaserve` (a test may replace it, e.g. with `demo`)
        self.command = ["--config", str(self.config_path)]

    def start(self, timeout: float = 60) -> ServerProcess:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "llamaserve", *self.command],
                                     stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server did not become healthy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else 0

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.base_url + path, headers=self.headers(), timeout=60, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        kw.setdefault("headers", self.headers())
        return httpx.post(self.base_url + path, timeout=120, **kw)

    def admin_state(self, alias: str) -> dict:
        return next(m for m in self.get("/admin/models").json()["data"] if m["alias"] == alias)
