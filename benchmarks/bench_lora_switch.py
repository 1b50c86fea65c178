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
The same llamaserve process is also driven with per-request selection, model "base" and
``"lora_adapters": {name: 1.0}`` ("llamaserve-per-request"), the form that matches
llama-server's per-request ``lora``.

Runtime load: on a llamaserve with ``adapters_dir`` holding a rank-8 adapter, the wall time of
``POST /admin/adapters`` (file loaded onto the already loaded base, alias registered) and the load
time the server reports, each add followed by a DELETE so the next add loads the file again.

Usage: python benchmarks/bench_lora_switch.py [--model small|mid] [--threads N] [--reps N] [--json OUT]
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
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
        ours = servers.llamaserve(path, workdir, threads=threads, loras=two, name="llamaserve-lora")
        for alias, file in two.items():     # per-request selection on the base, by the adapter's name (its stem)
            ours.targets[f"req-{alias}"] = ("base", {"ignore_eos": True, "lora_adapters": {file.stem: 1.0}})
        # (server, first alias, second alias, series name): the per-request series shares our process
        rounds = [(ours, "l1", "l2", ours.name), (ours, "req-l1", "req-l2", "llamaserve-per-request")]
        peer = servers.llama_server(path, workdir, threads=threads, loras=two, name="llama-server-lora")
        rounds.append((peer, "l1", "l2", peer.name))
        for s in (ours, peer):
            group.add(s)
        for s, a, b, name in rounds:
            asyncio.run(switch_ttfts(s, a, b, 1))                     # warmup (llamaserve loads lazily)
            out[name] = {"switch": [], "no switch": []}
        for rep in range(reps):
            for s, a, b, name in rounds if rep % 2 == 0 else rounds[::-1]:
                for k, v in asyncio.run(switch_ttfts(s, a, b, 1)).items():
                    out[name][k] += v
    summary = {name: medians(v) for name, v in out.items()}
    mine, per_request, theirs = (summary[n] for n in ("llamaserve-lora", "llamaserve-per-request",
                                                      "llama-server-lora"))
    return {"samples_s": out, "median_s": summary,
            "ratio_switch": mine["switch"] / theirs["switch"],
            "ratio_no_switch": mine["no switch"] / theirs["no switch"],
            "per_request_ratio_switch": per_request["switch"] / theirs["switch"],
            "per_request_ratio_no_switch": per_request["no switch"] / theirs["no switch"],
            # what a switch adds over repeating the adapter, on each side
            "switch_cost_s": {n: m["switch"] - m["no switch"] for n, m in summary.items()}}


def runtime_load(path: Path, size: str, threads: int, reps: int, workdir: Path, rank: int = 8) -> dict:
    """Seconds of POST /admin/adapters for a rank-`rank` adapter onto the loaded base: client wall time
    and the load time the server reports; a DELETE after each add frees the file again."""
    folder = workdir / "runtime-adapters"
    folder.mkdir(parents=True, exist_ok=True)
    adapter = folder / f"r{rank}.gguf"
    shutil.copyfile(ensure_loras(size, count=1, rank=rank)["l1"], adapter)
    wall, server = [], []
    with servers.ServerSet() as group:
        s = group.add(servers.llamaserve(path, workdir, threads=threads, name="llamaserve-runtime",
                                         adapters_dir=str(folder)))
        with httpx.Client(base_url=s.base_url, timeout=60) as http:
            http.post("/v1/completions", json={"model": "base", "prompt": PROMPT, "max_tokens": 1}).raise_for_status()
            for i in range(reps + 1):                                   # the first add is a warmup
                t0 = time.perf_counter()
                r = http.post("/admin/adapters", json={"path": adapter.name, "alias": f"r{rank}-{i}", "base": "base"})
                elapsed = time.perf_counter() - t0
                r.raise_for_status()
                http.post("/v1/completions", json={"model": f"r{rank}-{i}", "prompt": PROMPT,
                                                   "max_tokens": 1}).raise_for_status()
                http.delete(f"/admin/adapters/r{rank}-{i}").raise_for_status()
                if i:
                    wall.append(elapsed)
                    server.append(r.json()["load_seconds"])
    return {"rank": rank, "adapter_bytes": adapter.stat().st_size, "samples_s": {"wall": wall, "server": server},
            "median_s": {"POST /admin/adapters (wall)": statistics.median(wall),
                         "adapter load (server)": statistics.median(server)}}


def run(size: str = "small", threads: int | None = None, reps: int = 5, workdir: Path | None = None) -> dict:
    threads = threads or os.cpu_count() or 1
    path = ensure_model(size, "f16")
    loras = ensure_loras(size)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="bench_lora_switch."))
    return {"model": str(path), "threads": threads, "reps": reps,
            "in_process": in_process(path, loras, threads, reps),
            "served": served(path, loras, threads, reps, workdir),
            "runtime_load": runtime_load(path, size, threads, reps, workdir)}


def _show(report: dict) -> None:
    for where in ("in_process", "served", "runtime_load"):
        med = report[where]["median_s"]
        rows = ((f"{n} {k}", v) for n, d in med.items() for k, v in d.items()) if where == "served" else med.items()
        for name, value in rows:
            print(f"{where:<12} {name:<42} {value * 1000:8.2f} ms")
    for name, cost in report["served"]["switch_cost_s"].items():
        print(f"{'served':<12} {name + ' switch cost':<42} {cost * 1000:8.2f} ms")


def main(argv: list[str] | None = None) -> dict:
    return script_main(__doc__, run, 5, _show, argv)


if __name__ == "__main__":
    main()
