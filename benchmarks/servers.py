"""Start and stop the OpenAI-compatible servers that bench_server.py compares, on loopback only.

Each server runs as a child process on a free 127.0.0.1 port, with its output in a log file,
and counts as started once ``GET /health`` answers 200 (llama-server answers 503 while it
loads). Every server started here is stopped when its ``ServerSet`` closes, at interpreter
exit, and on SIGTERM/SIGINT/SIGHUP: SIGTERM first, SIGKILL after a grace period. Should the
benchmark itself be killed (SIGKILL), each server still gets SIGTERM (PR_SET_PDEATHSIG).

Servers:
  * llamaserve  — ``python -m llamaserve --config FILE`` (this checkout)
  * llama-server — llama.cpp's own server, built from the vendored tree (peer_tools)
  * llama-cpp-python — ``python -m llama_cpp.server``, only where ``import llama_cpp.server`` works
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx
import yaml
from peer_tools import ROOT, ensure_tool, repack

HOST = "127.0.0.1"
_RUNNING: list[Server] = []       # every server still running, for the exit handlers


class ServerUnavailable(RuntimeError):
    """A server cannot be run here (missing package or binary); the message says why."""


try:
    _LIBC = ctypes.CDLL(None, use_errno=True)     # loaded up front: the child only calls into it
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the benchmark dies, even by SIGKILL (Linux only)."""
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(1, int(signal.SIGTERM))       # PR_SET_PDEATHSIG


def descendant_pids(pid: int) -> list[int]:
    """Live descendants of `pid` (llamaserve's fork server and model workers with isolation: process)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        out += children
        todo += children
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass(eq=False)
class Server:
    """One server process: its command line, port and log; ``start`` waits for /health."""

    name: str
    cmd: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    # bench alias ("base", "l1", ...) -> ("model" field, extra JSON fields) of a request for it
    targets: dict[str, tuple[str, dict]] = field(default_factory=dict)
    health_path: str = "/health"                                # answers 200 once ready
    proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 120.0) -> Server:
        log = self.log_path.open("wb")
        try:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                                         cwd=ROOT, start_new_session=True,
                                         preexec_fn=_die_with_parent)  # noqa: PLW1509 -- no imports or locks in it
        finally:
            log.close()
        _RUNNING.append(self)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if http.get(self.base_url + self.health_path).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} did not become healthy in {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, grace: float = 15.0) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                proc.terminate()
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self in _RUNNING:
            _RUNNING.remove(self)


def stop_all() -> None:
    for server in list(_RUNNING):  # noqa: PERF101 -- stop() removes from _RUNNING
        try:
            server.stop(grace=5.0)
        except Exception as exc:  # noqa: BLE001 -- keep stopping the others
            print(f"[servers] stopping {server.name} failed: {exc}", file=sys.stderr)


def _on_signal(signum, frame) -> None:
    stop_all()
    raise SystemExit(128 + signum)


atexit.register(stop_all)
for _sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _on_signal)
# SIGINT raises KeyboardInterrupt, which unwinds through ServerSet.__exit__ and atexit.


class ServerSet:
    """Context manager owning some servers: stops all of them on exit, whatever happened."""

    def __init__(self) -> None:
        self.servers: list[Server] = []

    def __enter__(self) -> Self:
        return self

    def add(self, server: Server, timeout: float = 120.0) -> Server:
        self.servers.append(server)
        return server.start(timeout)

    def __exit__(self, *exc) -> None:
        for server in self.servers:
            server.stop()


# -- the three servers ---------------------------------------------------------------------------


def llamaserve(model: Path, workdir: Path, *, threads: int, parallel: int = 8, n_ctx: int = 256,
               max_queue: int = 64, loras: dict[str, Path] | None = None, name: str = "llamaserve",
               others: dict[str, Path] | None = None, isolation: str | None = None, defaults: dict | None = None,
               **settings) -> Server:
    """llamaserve with alias "base" (and one alias per entry of ``loras``, adapter at 1.0, same base).

    ``others`` adds aliases of other model files; ``isolation`` (thread | process) goes into the
    defaults (None: the server's default), as do ``defaults``; ``settings`` are further top-level config keys
    (``max_loaded_models``, ``idle_unload``, ...).
    """
    port = free_port()
    models = [{"alias": "base", "model": str(model)}]
    models += [{"alias": alias, "model": str(model), "lora_adapters": {str(path): 1.0}}
               for alias, path in (loras or {}).items()]
    models += [{"alias": alias, "model": str(path)} for alias, path in (others or {}).items()]
    config = {
        "host": HOST, "port": port, "parallel": parallel, "max_queue": max_queue,
        "idle_unload": None,          # never unload between the benchmark's rounds
        "defaults": {"n_ctx": n_ctx, "n_threads": threads, "n_threads_batch": threads, "flash_attn": False,
                     **({"isolation": isolation} if isolation else {}), **(defaults or {})},
        "models": models, **settings,
    }
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return Server(name, [sys.executable, "-m", "llamaserve", "--config", str(path)], port,
                  workdir / f"{name}.log", env={"PYTHONPATH": str(ROOT)},
                  targets={a: (a, {"ignore_eos": True}) for a in ["base", *(loras or {}), *(others or {})]})


def llama_server(model: Path, workdir: Path, *, threads: int, parallel: int = 8, n_ctx: int = 256,
                 loras: dict[str, Path] | None = None, name: str = "llama-server",
                 extra_args: list[str] | None = None, upstream: bool = False) -> Server:
    """llama.cpp's server: ``parallel`` slots sharing one unified KV pool of ``n_ctx`` x ``parallel``
    cells (as llamaserve's default), fa off; with ``upstream``, built without vendor/patches.

    With ``loras`` every request names its adapter scales: ``"lora": [{"id": i, "scale": 1.0}]``
    for adapter i, all at 0.0 for "base" (see Server.targets).
    """
    binary = ensure_tool("llama-server", upstream=upstream)
    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", HOST, "--port", str(port),
           "-np", str(parallel), "-c", str(n_ctx * parallel), "--kv-unified", "--cont-batching",
           "-t", str(threads), "-tb", str(threads), "-fa", "off", "-ngl", "0", "--no-webui",
           "--alias", "base", *(extra_args or [])]
    targets = {"base": ("base", {"ignore_eos": True})}
    for i, alias in enumerate(loras or {}):
        targets[alias] = ("base", {"ignore_eos": True, "lora": [{"id": i, "scale": 1.0}]})
    if loras:
        # one --lora with comma-separated paths: given several times, only the last one is loaded
        cmd += ["--lora", ",".join(str(p) for p in loras.values())]
        # --lora-init-without-apply only skips applying them at load: a request without a "lora"
        # field still gets every adapter at its --lora scale (1.0), so base requests list all at 0.
        cmd.append("--lora-init-without-apply")
        targets["base"] = ("base", {"ignore_eos": True,
                                    "lora": [{"id": i, "scale": 0.0} for i in range(len(loras))]})
    workdir.mkdir(parents=True, exist_ok=True)
    # one repack setting for every file it loads (a draft model too): off if any of them needs it off
    files = [model] + [Path(extra_args[i + 1]) for i, a in enumerate(extra_args or []) if a in ("-md", "--model-draft")]
    env = {} if all(repack(f) for f in files) else {"LLAMA_ARG_REPACK": "0"}
    return Server(name, cmd, port, workdir / f"{name}.log", targets=targets, env=env)


def llama_cpp_python(model: Path, workdir: Path, *, threads: int, n_ctx: int = 256,
                     name: str = "llama-cpp-python") -> Server:
    """llama-cpp-python's server (one sequence at a time); ServerUnavailable if it cannot import."""
    try:  # the app module pulls in the server extra's packages (fastapi, sse-starlette, ...)
        importlib.import_module("llama_cpp.server.app")
    except Exception as exc:  # noqa: BLE001 -- ImportError or a broken optional dependency
        raise ServerUnavailable(f"{type(exc).__name__}: {exc}") from None
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", HOST, "--port", str(port),
           "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", str(n_ctx),
           "--model_alias", "base"]
    workdir.mkdir(parents=True, exist_ok=True)
    # llama-cpp-python has no /health route: it is ready once /v1/models answers.
    return Server(name, cmd, port, workdir / f"{name}.log", targets={"base": ("base", {})},
                  health_path="/v1/models")
