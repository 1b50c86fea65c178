"""One side of the Llama benchmarks: a `Llama` (llamacore's, or llama-cpp-python's when run with
vendor/lcp_python.py's environment) in a child process answering timed completion requests, one
JSON line each; `Side` is the parent's handle on it.

stdin: a first line {"model", "mode": plain|lookup|draft, "draft", "threads", "n_ctx"}, then lines
{"prompt": [token ids] or text, "n_gen": N, "reset": bool}; stdout: one JSON line per request
{"text", "n", "wall_s", "drafted", "accepted"} (the draft counts where the Llama reports them).
"reset" empties the KV cache first, so the prompt is evaluated again. A line {"load": prompt}
instead times a new Llama of the first line's settings: {"load_s", "first_token_s"} (its
constructor, and the constructor plus one generated token), then drops it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lcp_environment(dest: Path) -> dict[str, str] | None:
    """The environment of a llama-cpp-python side (extracted under dest), or None without its sdist."""
    spec = importlib.util.spec_from_file_location("_llamacore_lcp_python", ROOT / "vendor/lcp_python.py")
    lcp_python = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lcp_python)
    if not lcp_python.sdist_path().exists():
        return None
    return lcp_python.environment(dest)


class Side:
    """A child process holding one Llama."""

    def __init__(self, name: str, impl: str, cfg: dict, env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=env.get("PYTHONPATH", str(ROOT)))
        self._send({**cfg, "impl": impl})
        if not self._recv().get("ready"):
            raise RuntimeError(f"{name} did not start")

    def _send(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def _recv(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited with {self.proc.wait()}")
        return json.loads(line)

    def complete(self, prompt: list[int] | str, n_gen: int, reset: bool = False) -> dict:
        self._send({"prompt": prompt, "n_gen": n_gen, "reset": reset})
        return self._recv()

    def load(self, prompt: str) -> dict:
        self._send({"load": prompt})
        return self._recv()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def build(cfg: dict):
    impl = cfg["impl"]
    if impl == "llama_cpp":
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    else:
        from llamacore import Llama
        from llamacore.llama_speculative import LlamaPromptLookupDecoding
    draft = None
    if cfg["mode"] == "lookup":             # llama-cpp-python's defaults on both sides
        draft = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=10)
    elif cfg["mode"] == "draft":
        draft = Llama(cfg["draft"], n_ctx=cfg["n_ctx"], n_threads=cfg["threads"], verbose=False)
    return Llama(cfg["model"], n_ctx=cfg["n_ctx"], n_batch=512, n_threads=cfg["threads"],
                 n_threads_batch=cfg["threads"], flash_attn=False, draft_model=draft, verbose=False)


def timed_load(cfg: dict, prompt: str) -> dict:
    started = time.perf_counter()
    llm = build(cfg)
    loaded = time.perf_counter() - started
    llm.create_completion(prompt, max_tokens=1, temperature=0.0)
    first = time.perf_counter() - started
    llm.close()
    return {"load_s": loaded, "first_token_s": first}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    llm = build(cfg)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if "load" in req:
            print(json.dumps(timed_load(cfg, req["load"])), flush=True)
            continue
        before = (getattr(llm, "n_drafted", 0), getattr(llm, "n_accepted", 0))
        if req.get("reset"):
            llm.reset()
        started = time.perf_counter()
        out = llm.create_completion(req["prompt"], max_tokens=req["n_gen"], temperature=0.0)
        wall = time.perf_counter() - started
        print(json.dumps({"text": out["choices"][0]["text"], "n": out["usage"]["completion_tokens"],
                          "wall_s": wall, "drafted": getattr(llm, "n_drafted", 0) - before[0],
                          "accepted": getattr(llm, "n_accepted", 0) - before[1]}), flush=True)


if __name__ == "__main__":
    main()
