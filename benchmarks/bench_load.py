"""Loading and unloading: cold load time, model switch latency, and memory after idle unload.

* cold load: ``llamacore.Llama(path)`` (Model + Context) vs llama-cpp-python's ``Llama(path)``, same
  n_ctx and threads, timed to the end of the constructor and to the first generated token (with
  mmap, weights are paged in by the first decode); each in a child process of its own, llama-cpp-
  python's own Python over this build's libllama. Process-cold, not disk-cold: the file sits in
  the OS page cache after the first load (dropping it needs root and disturbs other users).
* model switch: llamaserve with ``max_loaded_models: 1`` and two models (f16 and q8_0 of one
  size); one client alternates a, a, b, b, ... and the time to first token of a request that
  must evict one model and load the other is compared with one that finds its model loaded.
  llama-server serves one model per process and cannot switch; llama-cpp-python's equivalent is
  a new ``Llama`` (its cold load + first token above).
* memory: resident set size (VmRSS) of the llamaserve process with ``idle_unload: 2s`` before the
  first request, with the model loaded, and after it was unloaded for idleness; llama-server with
  ``--sleep-idle-seconds 2`` (it loads at start, then sleeps, freeing the model) alongside. The
  difference after unload is split by /proc/PID/smaps_rollup: anonymous memory (what the process
  holds: heap, arenas, stacks) and the rest (clean pages of library code run for the first time,
  which the kernel reclaims under pressure), and the mappings that changed most are named; a second
  load and unload shows whether it grows. llamaserve hands back the extension's code pages after an
  unload (madvise MADV_PAGEOUT), which the kernel does only for pages no other process maps: run in
  a process that has decoded with llamacore itself, the extension's resident pages grew by 2.3 MiB
  over the load and unload, where run alone they shrank by 3.2 MiB, so `python -m benchmarks` runs
  this case first.

Usage: python benchmarks/bench_load.py [--model small|mid] [--threads N] [--reps N] [--json OUT]
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import servers
from llama_side import ROOT, Side, lcp_environment
from models import ensure_model  # also puts the checkout on sys.path
from server_rounds import PROMPT, make_client, one_request, switch_ttfts
from sides import alternate, medians, ratios, script_main

IDLE_UNLOAD_S = 2.0


def cold_load(path: Path, threads: int, reps: int) -> dict:
    """Each side in a child process (llama_side.py) that keeps its interpreter and imports warm and
    times new Llama objects; llama-cpp-python is its own Python over this build's libllama
    (vendor/lcp_python.py), so the two Python layers' load paths are compared over one C library."""
    cfg = {"model": str(path), "mode": "plain", "draft": None, "threads": threads, "n_ctx": 512}
    with tempfile.TemporaryDirectory() as tmp:
        envs = {"llamacore": {**os.environ, "PYTHONPATH": str(ROOT)}}
        note = None
        if (lcp_env := lcp_environment(Path(tmp))) is not None:
            envs["llama-cpp-python"] = lcp_env
        else:
            note = "llama-cpp-python's sdist is not cached: only llamacore is measured"
        sides = {name: Side(name, "llamacore" if name == "llamacore" else "llama_cpp", cfg, env)
                 for name, env in envs.items()}
        try:
            got = alternate({name: (lambda s=s: [s.load(PROMPT)]) for name, s in sides.items()}, reps)
        finally:
            for s in sides.values():
                s.close()
    out: dict = {"note": note}
    for what, key in (("load", "load_s"), ("load_first_token", "first_token_s")):
        samples = {name: [g[key] for g in v] for name, v in got.items()}
        med = medians(samples)
        out[what] = {"samples_s": samples, "median_s": med, "ratios": ratios(med, "llamacore")}
    return out


def model_switch(size: str, threads: int, reps: int, workdir: Path) -> dict:
    a, b = ensure_model(size, "f16"), ensure_model(size, "q8_0")
    with servers.ServerSet() as group:
        s = group.add(servers.llamaserve(a, workdir, threads=threads, name="llamaserve-switch",
                                         others={"other": b}, max_loaded_models=1))
        samples = asyncio.run(switch_ttfts(s, "base", "other", reps))
    return {"models": [str(a), str(b)], "samples_s": samples, "median_s": medians(samples),
            "note": "llama-server cannot switch models (one per process); compare llama-cpp-python's "
                    "cold load + first token"}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def anon_bytes(pid: int) -> int:
    """Anonymous resident memory (heap, arenas, thread stacks): what a process holds, unlike the
    clean file-backed pages of the libraries' code, which the kernel takes back under pressure."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_by_mapping(pid: int) -> Counter[str]:
    """Resident KiB per mapped file (anonymous mappings as "[anon]", the heap as "[heap]")."""
    out: Counter[str] = Counter()
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].endswith(":"):          # a mapping's header: range perms offset dev inode [path]
            name = fields[5] if len(fields) > 5 else "[anon]"
        elif fields[:1] == ["Rss:"]:
            out[name] += int(fields[1])
    return out


def grown_mappings(before: Counter[str], after: Counter[str], top: int = 6) -> dict[str, int]:
    """The mappings whose resident size changed most, in KiB (+ grew, - shrank): what the
    difference after unload is made of."""
    change = {name: after[name] - before[name] for name in before.keys() | after.keys() if after[name] != before[name]}
    return dict(sorted(change.items(), key=lambda kv: -abs(kv[1]))[:top])


def _request(server: servers.Server) -> None:
    async def go() -> None:
        client = make_client(server)
        try:
            r = await one_request(client, server, "base", 0, 8)
        finally:
            await client.close()
        if r["error"]:
            raise RuntimeError(f"{server.name}: {r['error']}\n{server.log_tail()}")
    asyncio.run(go())


def _wait_unloaded(server: servers.Server, timeout: float = 30.0) -> float:
    """Seconds until llamaserve reports no loaded model (its /metrics gauge)."""
    t0 = time.monotonic()
    with httpx.Client(timeout=5) as http:
        while time.monotonic() - t0 < timeout:
            text = http.get(server.base_url + "/metrics").text
            if any(line.startswith("llamaserve_loaded_models ") and float(line.split()[1]) == 0
                   for line in text.splitlines()):
                return time.monotonic() - t0
            time.sleep(0.25)
    raise RuntimeError(f"{server.name} did not unload within {timeout:.0f}s")


def rss_idle(path: Path, threads: int, workdir: Path) -> dict:
    out: dict = {}
    with servers.ServerSet() as group:
        s = group.add(servers.llamaserve(path, workdir, threads=threads, name="llamaserve-idle",
                                         idle_unload=IDLE_UNLOAD_S))
        pid = s.proc.pid
        before, anon_before, maps_before = rss_bytes(pid), anon_bytes(pid), rss_by_mapping(pid)
        _request(s)
        loaded = sum(rss_bytes(p) for p in [pid, *servers.descendant_pids(pid)])    # the model's worker too
        _wait_unloaded(s)
        time.sleep(0.5)
        out["llamaserve"] = {"before_load": before, "loaded": loaded, "after_idle_unload": rss_bytes(pid)}
        anon = {"before_load": anon_before, "after_idle_unload": anon_bytes(pid)}
        grown = grown_mappings(maps_before, rss_by_mapping(pid))
        _request(s)                     # a second load and unload: what the first left is not a leak
        _wait_unloaded(s)
        time.sleep(0.5)
        out["llamaserve"]["after_second_unload"] = rss_bytes(pid)
        anon["after_second_unload"] = anon_bytes(pid)
        s.stop()
        p = group.add(servers.llama_server(path, workdir, threads=threads, name="llama-server-idle",
                                           extra_args=["--sleep-idle-seconds", f"{IDLE_UNLOAD_S:g}"]))
        _request(p)
        loaded = rss_bytes(p.proc.pid)
        time.sleep(IDLE_UNLOAD_S + 3)
        out["llama-server"] = {"before_load": None, "loaded": loaded, "after_idle_unload": rss_bytes(p.proc.pid)}
    ours = out["llamaserve"]
    return {"model": str(path), "model_bytes": path.stat().st_size, "idle_unload_s": IDLE_UNLOAD_S,
            "rss_bytes": out, "after_minus_before": ours["after_idle_unload"] - ours["before_load"],
            "anon_bytes": anon, "anon_after_minus_before": anon["after_idle_unload"] - anon["before_load"],
            "second_minus_first": ours["after_second_unload"] - ours["after_idle_unload"],
            "changed_mappings_kib": grown,
            "ratio_after_idle": ours["after_idle_unload"] / out["llama-server"]["after_idle_unload"],
            "note": "llama-server loads at start (no 'before load'); --sleep-idle-seconds frees the model"}


def run(size: str = "small", threads: int | None = None, reps: int = 3, workdir: Path | None = None,
        cases: tuple[str, ...] = ("cold_load", "model_switch", "rss_idle")) -> dict:
    threads = threads or os.cpu_count() or 1
    workdir = workdir or Path(tempfile.mkdtemp(prefix="bench_load."))
    path = ensure_model(size, "f16")
    out: dict = {"model": str(path), "threads": threads, "reps": reps}
    if "cold_load" in cases:
        out["cold_load"] = cold_load(path, threads, reps)
    if "model_switch" in cases:
        out["model_switch"] = model_switch(size, threads, reps, workdir)
    if "rss_idle" in cases:
        out["rss_idle"] = rss_idle(path, threads, workdir)
    return out


def _show(report: dict) -> None:
    for what in ("load", "load_first_token"):
        print(what, {k: f"{v * 1000:.1f} ms" for k, v in report["cold_load"][what]["median_s"].items()})
    print("model switch TTFT", {k: f"{v * 1000:.1f} ms" for k, v in report["model_switch"]["median_s"].items()})
    print("RSS MiB", {name: {k: v and round(v / 2**20) for k, v in d.items()}
                      for name, d in report["rss_idle"]["rss_bytes"].items()})


def main(argv: list[str] | None = None) -> dict:
    return script_main(__doc__, run, 3, _show, argv)


if __name__ == "__main__":
    main()
