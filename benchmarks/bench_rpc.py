"""A model split across ggml RPC workers: llamaserve vs llama.cpp's server on the same loopback workers.

Two ``llamaserve rpc-worker`` processes on 127.0.0.1 hold the model's layers (tensor_split 1,1,
every layer offloaded). An RPC worker serves one client at a time, so the sides take turns (the
order rotates every rep): llamaserve with ``rpc_servers``, llama-server with ``--rpc`` and ``-ngl 99
-ts 1,1``, and llamaserve without RPC (the local baseline). Each side: rounds of 1 and 4 streaming
clients (bench_server's rounds: 64 tokens each, ignore_eos, temperature 0); aggregate tokens/s and
TTFT p50, medians over reps. Ratios: llamaserve/llama-server through the workers (target >= 0.97)
and RPC/local for each server.

Usage: python benchmarks/bench_rpc.py [--model small|mid|PATH] [--threads N] [--reps 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import servers
from models import SPECS, ensure_model  # also puts the checkout on sys.path
from peer_tools import ROOT
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

from llamacore.rpc import RPCUnavailableError, preflight

N_CTX = 256
PARALLEL = 4
CLIENTS = (1, 4)


def start_workers(n: int, threads: int, workdir: Path) -> list[tuple[subprocess.Popen, str]]:
    """`n` RPC workers on free loopback ports, each answering the handshake."""
    started = []
    for i in range(n):
        port = servers.free_port()
        log = open(workdir / f"rpc-worker{i}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", "llamaserve", "rpc-worker", "--host", "127.0.0.1",
                                 "--port", str(port), "--threads", str(threads)], stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        endpoint = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"rpc worker {i} exited: {(workdir / f'rpc-worker{i}.log').read_text()}")
            try:
                preflight(endpoint, timeout=2)
                break
            except RPCUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        started.append((proc, endpoint))
    return started


def sides(path: Path, workdir: Path, threads: int, endpoints: list[str]) -> dict:
    """name -> a function making that side's server (not started)."""
    split = ",".join("1" for _ in endpoints)
    return {
        "llamaserve-rpc": lambda: servers.llamaserve(
            path, workdir, threads=threads, parallel=PARALLEL, n_ctx=N_CTX, name="llamaserve-rpc",
            isolation="process", defaults={"rpc_servers": endpoints, "tensor_split": [1.0] * len(endpoints)}),
        "llama-server-rpc": lambda: servers.llama_server(
            path, workdir, threads=threads, parallel=PARALLEL, n_ctx=N_CTX, name="llama-server-rpc",
            extra_args=["--rpc", ",".join(endpoints), "-ngl", "99", "-ts", split]),
        "llamaserve-local": lambda: servers.llamaserve(
            path, workdir, threads=threads, parallel=PARALLEL, n_ctx=N_CTX, name="llamaserve-local"),
    }


async def amain(args) -> dict:
    path = ensure_model(args.model, args.dtype) if args.model in SPECS else Path(args.model)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_rpc."))
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": str(path), "settings": {"threads": args.threads, "workers": 2, "parallel": PARALLEL,
                                                     "clients": CLIENTS, "reps": args.reps}}
    workers = start_workers(2, max(1, args.threads // 2), workdir)
    try:
        makers = sides(path, workdir, args.threads, [e for _, e in workers])
        names = list(makers)
        cases = [(f"c{c}", ["base"], c) for c in CLIENTS]
        rounds: list[dict] = []
        for rep in range(args.reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                with servers.ServerSet() as group:     # one side at a time: a worker serves one client
                    server = group.add(makers[name]())
                    await warm_started(server, ["base"])
                    for r in await bench([(server, cases)], 1, args):
                        rounds.append({**r, "rep": rep})
    finally:
        for proc, _ in workers:
            proc.terminate()
            proc.wait(10)
    summary = summarize(rounds)
    report["rounds"], report["summary"] = rounds, summary
    print_table("Generation through 2 loopback RPC workers (medians over reps)", summary, args.noise)
    ratios = {}
    for case in summary:
        ratios[f"llamaserve/llama-server through RPC @{case}"] = ratio(summary, case, "llamaserve-rpc",
                                                                        "llama-server-rpc")
        ratios[f"llamaserve RPC/local @{case}"] = ratio(summary, case, "llamaserve-rpc", "llamaserve-local")
    report["ratios"] = ratios
    report["targets"] = {k: 0.97 for k in ratios if k.startswith("llamaserve/llama-server")}
    for key, value in ratios.items():
        print(f"  {key:<48} {value:.3f}" if value else f"  {key:<48} n/a")
    return report


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_options(ap)
    ap.add_argument("--reps", type=int, default=3, help="turns of each side")
    add_round_options(ap, retries=2)
    # the RPC workers' CPU time is the side's own work, which the rounds' noise check counts as "other"
    ap.set_defaults(noise=1.0)
    return run_report(amain, ap.parse_args(argv))


if __name__ == "__main__":
    try:
        main()
    finally:
        servers.stop_all()
