"""Process isolation vs thread: what a worker process per model costs, side by side in one run.

Two llamaserve servers on the same model and settings, one with ``isolation: thread`` (the
engine on a thread of the server) and one with ``isolation: process`` (the engine in a worker
process; token ids cross a socket pair, one frame per engine step):

* throughput and TTFT: rounds of 1 and 8 concurrent streaming clients (bench_server's rounds,
  servers alternating), aggregate tokens/s and TTFT p50;
* cold load: ``POST /admin/models/base/load`` after an unload, wall time (median of --reps);
* memory: RSS of the server and its descendants (with process isolation: the worker fork server,
  started with the server, and the model's worker) before the first load, loaded, and after the
  model was unloaded.

The default isolation is chosen by this measurement: process when it keeps >= 97% of thread's
throughput at 8 clients and adds at most 2 ms to TTFT p50.

Usage: python benchmarks/bench_isolation.py [--model small|mid|PATH] [--threads N] [--reps N]
       [--idle-wait S] [--json OUT]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import servers
from models import SPECS, ensure_model  # also puts the checkout on sys.path
from server_rounds import (
    add_model_options,
    add_round_options,
    bench,
    print_table,
    ratio,
    run_report,
    summarize,
    warm_started,
)

N_CTX = 256
PARALLEL = 8
MODES = ("thread", "process")


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its live children."""
    total = 0
    for p in [pid, *servers.descendant_pids(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def settled_rss(pid: int, timeout: float = 15.0) -> int:
    """`tree_rss` once it stops growing (llamaserve starts its worker fork server in the background)."""
    last, deadline = tree_rss(pid), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = tree_rss(pid)
        if abs(now - last) < 2**20:
            return now
        last = now
    return last


def load_times(server: servers.Server, reps: int) -> list[float]:
    """Wall seconds of an admin load after an unload, `reps` times."""
    out = []
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        for _ in range(reps):
            http.post("/admin/models/base/unload").raise_for_status()
            t0 = time.perf_counter()
            http.post("/admin/models/base/load").raise_for_status()
            out.append(time.perf_counter() - t0)
    return out


def memory(server: servers.Server) -> dict:
    """RSS before any load is taken by the caller; here: loaded, and after an unload."""
    pid = server.proc.pid
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        http.post("/admin/models/base/load").raise_for_status()
        loaded = tree_rss(pid)
        http.post("/admin/models/base/unload").raise_for_status()
    time.sleep(0.5)
    return {"loaded": loaded, "after_unload": tree_rss(pid)}


async def amain(args) -> dict:
    path = ensure_model(args.model, args.dtype) if args.model in SPECS else Path(args.model)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_isolation."))
    report: dict = {"model": str(path), "settings": {"threads": args.threads, "parallel": PARALLEL, "n_ctx": N_CTX,
                                                     "reps": args.reps, "load_reps": args.load_reps}}
    group_servers = {}
    with servers.ServerSet() as group:
        rss_before = {}
        for mode in MODES:
            s = group.add(servers.llamaserve(path, workdir, threads=args.threads, parallel=PARALLEL, n_ctx=N_CTX,
                                             isolation=mode, name=f"llamaserve-{mode}"))
            rss_before[mode] = settled_rss(s.proc.pid)
            group_servers[mode] = s
        report["memory"] = {mode: {"before_load": rss_before[mode], **memory(s)} for mode, s in group_servers.items()}
        report["cold_load_s"] = {mode: statistics.median(load_times(s, args.load_reps))
                                 for mode, s in group_servers.items()}
        for s in group_servers.values():
            await warm_started(s, ["base"])
        cases = [(f"c{c}", ["base"], c) for c in (1, 8)]
        rounds = await bench([(s, cases) for s in group_servers.values()], args.reps, args)
    summary = summarize(rounds)
    report["rounds"], report["summary"] = rounds, summary
    print_table("Process vs thread isolation (medians over reps)", summary, args.noise)
    p50 = {c: {m: summary.get(c, {}).get(f"llamaserve-{m}", {}).get("ttft_p50") for m in MODES} for c in ("c1", "c8")}
    ratios = {f"process/thread tok/s @{c}": ratio(summary, c, "llamaserve-process", "llamaserve-thread")
              for c in ("c1", "c8")}
    ttft_added = {c: (v["process"] - v["thread"]) * 1000 if v["process"] and v["thread"] else None
                  for c, v in p50.items()}
    cold = report["cold_load_s"]
    report.update(ratios=ratios, ttft_p50_added_ms=ttft_added,
                  cold_load_ratio=cold["process"] / cold["thread"])
    keep, added = ratios["process/thread tok/s @c8"], ttft_added["c1"]
    report["process_meets_default_rule"] = bool(keep and keep >= 0.97 and added is not None and added <= 2.0)
    for key, value in ratios.items():
        print(f"  {key:<30} {value:.3f}" if value else f"  {key:<30} n/a")
    print(f"  TTFT p50 added by process (ms): {ttft_added}")
    print(f"  cold load s: {cold}  (process/thread {report['cold_load_ratio']:.2f})")
    for mode, m in report["memory"].items():
        print(f"  {mode}: RSS before {m['before_load'] / 2**20:.1f} MiB, loaded {m['loaded'] / 2**20:.1f} MiB, "
              f"after unload {m['after_unload'] / 2**20:.1f} MiB")
    print(f"  process meets the default rule (>= 0.97 at c8, <= 2 ms TTFT): {report['process_meets_default_rule']}")
    return report


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_options(ap)
    ap.add_argument("--reps", type=int, default=3, help="rounds per server and client count")
    ap.add_argument("--load-reps", type=int, default=5, help="unload + load cycles per server")
    add_round_options(ap, retries=3)
    return run_report(amain, ap.parse_args(argv))


if __name__ == "__main__":
    try:
        main()
    finally:
        servers.stop_all()
