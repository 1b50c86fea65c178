"""Shared prefixes: clients arriving together with one long system prompt and different questions.

Three servers side by side: llamaserve (sequences share the KV cells of a common prefix),
llamaserve with ``share_prefixes: false`` (each sequence computes its whole prompt) and
llama-server (its prompt cache reuses a slot's own previous prompt, not another slot's). Each
round sends --clients concurrent streamed completions whose prompts are the same system text of
about --prefix tokens followed by a short question of their own, after a warm-up round with other
prefixes (so no server starts with the round's prefix cached). Reported: TTFT p50/p95 and the
ratios ours/no-sharing and ours/llama-server (lower is better), plus whether the greedy answers of
the three servers are identical.

Usage: python benchmarks/bench_prefix.py [--model small] [--clients 8] [--prefix 1500] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import servers
from models import SPECS, ensure_model
from server_rounds import make_client, med, percentile, run_report

N_GEN = 16
WORDS = ("the", "little", "dog", "ran", "to", "a", "big", "red", "house", "and", "saw", "cat", "sun", "tree")


def system_prompt(round_id: int, n_words: int) -> str:
    """A different system text per round (so caches from earlier rounds do not help), about n_words long."""
    words = [WORDS[(i * 7 + round_id * 3 + i // 5) % len(WORDS)] for i in range(n_words)]
    return f"Story {round_id}: " + " ".join(words) + "."


async def one(client, server: servers.Server, prompt: str) -> dict:
    model, extra = server.targets["base"]
    started = time.perf_counter()
    ttft, text = None, []
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=N_GEN, temperature=0,
                                             stream=True, extra_body=extra)
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            ttft = ttft if ttft is not None else time.perf_counter() - started
            text.append(chunk.choices[0].text)
    return {"ttft": ttft, "text": "".join(text)}


async def round_(client, server: servers.Server, round_id: int, args) -> dict:
    system = system_prompt(round_id, args.prefix)
    prompts = [f"{system}\nQuestion {i}: what did the {WORDS[i % len(WORDS)]} do?\nAnswer:"
               for i in range(args.clients)]
    results = await asyncio.gather(*(one(client, server, p) for p in prompts))
    ttfts = [r["ttft"] for r in results if r["ttft"] is not None]
    return {"server": server.name, "round": round_id, "ttft_p50": percentile(ttfts, 50),
            "ttft_p95": percentile(ttfts, 95), "texts": [r["text"] for r in results]}


async def amain(args) -> dict:
    path = ensure_model(args.model, "f16")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_prefix."))
    n_ctx = 2 * args.prefix + 256
    trio = [servers.llamaserve(path, workdir, threads=args.threads, parallel=args.clients, n_ctx=n_ctx),
            servers.llamaserve(path, workdir, threads=args.threads, parallel=args.clients, n_ctx=n_ctx,
                               name="llamaserve-no-sharing", share_prefixes=False),
            servers.llama_server(path, workdir, threads=args.threads, parallel=args.clients, n_ctx=n_ctx)]
    rounds: list[dict] = []
    with servers.ServerSet() as group:
        clients = {}
        for s in trio:
            group.add(s)
            print(f"started {s.name}: {' '.join(s.cmd)}", flush=True)
            clients[s.name] = make_client(s)
            await round_(clients[s.name], s, 10_000, args)          # warm-up with another prefix
        try:
            for rep in range(args.reps):
                for k in range(len(trio)):
                    s = trio[(rep + k) % len(trio)]
                    r = await round_(clients[s.name], s, rep, args)
                    rounds.append(r)
                    print(f"  rep {rep} {s.name:<24} TTFT p50 {r['ttft_p50'] * 1000:8.1f} ms  "
                          f"p95 {r['ttft_p95'] * 1000:8.1f} ms", flush=True)
        finally:
            for c in clients.values():
                await c.close()
    summary = {s.name: {"ttft_p50": med([r["ttft_p50"] for r in rounds if r["server"] == s.name]),
                        "ttft_p95": med([r["ttft_p95"] for r in rounds if r["server"] == s.name])} for s in trio}
    same = all(len({json.dumps(r["texts"]) for r in rounds if r["round"] == rep}) == 1 for rep in range(args.reps))
    ours, plain, peer = (summary[s.name]["ttft_p50"] for s in trio)
    report = {"model": str(path), "settings": {"clients": args.clients, "prefix_words": args.prefix,
                                               "max_tokens": N_GEN, "reps": args.reps, "threads": args.threads},
              "summary": summary, "identical_answers": same, "rounds": rounds,
              "ratios": {"ttft_p50 ours/no-sharing": ours / plain if ours and plain else None,
                         "ttft_p50 ours/llama-server": ours / peer if ours and peer else None}}
    print(f"\nTTFT p50: ours {ours * 1000:.1f} ms, without sharing {plain * 1000:.1f} ms, "
          f"llama-server {peer * 1000:.1f} ms; answers identical across servers: {same}")
    for key, value in report["ratios"].items():
        print(f"  {key:<32} {value:.3f}  (target <= 0.333)")
    return report


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small", choices=sorted(SPECS))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=1500, help="words of shared system prompt (about one token each)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workdir", help="where server configs and logs go (default: a new temp dir)")
    ap.add_argument("--json", type=Path, help="write the report here")
    return run_report(amain, ap.parse_args(argv))


if __name__ == "__main__":
    try:
        main()
    finally:
        servers.stop_all()
