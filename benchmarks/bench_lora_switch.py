"""LoRA switch latency: time to the first token right after changing adapters, vs without a change.

In process: ``llamacore.Llama`` loads two adapters once and switches by changing their scales
(``set_lora_adapter_scale``; nothing reloads); each timed call resets the prompt cache and asks
for one token, with or without swapping the scales first. llama-cpp-python cannot change
adapters of a loaded model: its equivalent is constructing a new ``Llama(lora_path=...)``, timed
up to the first token (the model file is in the page cache).

Served: llamaserve with aliases "l1" and "l2" (two adapters on one loaded base) and llama-server
with both adapters loaded and per-request ``"lora"`` scales. One client sends requests
l1, l1, l2, l2, l1, ... (max_tokens 2); a request whose adapter differs from the previous one's
is a switch. Time to first token (TTFT) medians of switch and no-switch requests are compared.

Usage: python benchmarks/bench_lora_switch.py [--model small|mid] [--threads N] [--reps N] [--json OUT]
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import tempfile
import time
from pathlib import Path

import servers
from models import ensure_loras, ensure_model  # also puts the checkout on sys.path
from server_rounds import PROMPT, switch_ttfts
from sides import alternate, medians, script_main

from llamacore import Llama


def _first_token(llm, **kw) -> float:
    llm.reset()
    t0 = time.perf_counter()
    llm.create_completion(PROMPT, max_tokens=1, temperature=0, **kw)
    return time.perf_counter() - t0


def in_process(path: Path, loras: dict[str, Path], threads: int, reps: int) -> dict:
    """Seconds to the first token: ours with and without a scale swap, llama-cpp-python's reload."""
    a, b = str(loras["l1"]), str(loras["l2"])
    ours = Llama(path, n_ctx=256, n_threads=threads, n_threads_batch=threads, flash_attn=False,
                 lora_adapters={a: 1.0, b: 0.0})
    _first_token(ours)                                             # warmup

    def switch() -> float:
        t0 = time.perf_counter()
        old, new = (a, b) if ours.lora_adapters[a] else (b, a)
        ours.set_lora_adapter_scale(old, 0.0)
        ours.set_lora_adapter_scale(new, 1.0)
        return time.perf_counter() - t0 + _first_token(ours)

    sides = {"llamacore no switch": lambda: _first_token(ours), "llamacore switch": switch}
    note = None
    if importlib.util.find_spec("llama_cpp"):
        import llama_cpp

        def reload() -> float:
            t0 = time.perf_counter()
            peer = llama_cpp.Llama(str(path), n_ctx=256, n_threads=threads, n_threads_batch=threads,
                                   flash_attn=False, lora_path=b, verbose=False)
            return time.perf_counter() - t0 + _first_token(peer)

        sides["llama-cpp-python reload with lora_path"] = reload
    else:
        note = "llama-cpp-python not installed: its reload is not measured"
    samples = alternate(sides, reps)
    med = medians(samples)
    out = {"samples_s": samples, "median_s": med,
           "switch_cost_s": med["llamacore switch"] - med["llamacore no switch"], "note": note}
    if "llama-cpp-python reload with lora_path" in med:
        out["ratio"] = med["llamacore switch"] / med["llama-cpp-python reload with lora_path"]
    return out


def served(path: Path, loras: dict[str, Path], threads: int, reps: int, workdir: Path) -> dict:
    """TTFT of switch and no-switch requests on llamaserve and llama-server, servers taking turns."""
    two = {k: loras[k] for k in ("l1", "l2")}
    out: dict = {}
    with servers.ServerSet() as group:
        for s in (servers.llamaserve(path, workdir, threads=threads, loras=two, name="llamaserve-lora"),
                  servers.llama_server(path, workdir, threads=threads, loras=two, name="llama-server-lora")):
            group.add(s)
            asyncio.run(switch_ttfts(s, "l1", "l2", 1))             # warmup (llamaserve loads lazily)
            out[s.name] = {"switch": [], "no switch": []}
        for rep in range(reps):
            order = group.servers if rep % 2 == 0 else group.servers[::-1]
            for s in order:
                for k, v in asyncio.run(switch_ttfts(s, "l1", "l2", 1)).items():
                    out[s.name][k] += v
    summary = {name: medians(v) for name, v in out.items()}
    ours, peer = summary["llamaserve-lora"], summary["llama-server-lora"]
    return {"samples_s": out, "median_s": summary,
            "ratio_switch": ours["switch"] / peer["switch"],
            "ratio_no_switch": ours["no switch"] / peer["no switch"]}


def run(size: str = "small", threads: int | None = None, reps: int = 5, workdir: Path | None = None) -> dict:
    threads = threads or os.cpu_count() or 1
    path = ensure_model(size, "f16")
    loras = ensure_loras(size)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="bench_lora_switch."))
    return {"model": str(path), "threads": threads, "reps": reps,
            "in_process": in_process(path, loras, threads, reps),
            "served": served(path, loras, threads, reps, workdir)}


def _show(report: dict) -> None:
    for where in ("in_process", "served"):
        med = report[where]["median_s"]
        rows = med.items() if where == "in_process" else ((f"{n} {k}", v) for n, d in med.items() for k, v in d.items())
        for name, value in rows:
            print(f"{where:<11} {name:<42} {value * 1000:8.1f} ms")


def main(argv: list[str] | None = None) -> dict:
    return script_main(__doc__, run, 5, _show, argv)


if __name__ == "__main__":
    main()
