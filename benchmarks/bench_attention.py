"""Attention after a long context: flash attention on, off and for prompts only, vs llama-bench.

On the CPU, llama.cpp's flash attention makes prompts faster and generation slower as the
context grows (README, `flash_attn`). llamacore's ``flash_attn="prompts"`` (vendor/patches/0005)
uses it for batches of 16 tokens or more and plain attention for smaller ones. Measured: a
prompt of 512 tokens and 32 generated tokens after a context of --depth tokens (llama-bench's
``-d``), ours in process with flash_attn on, off and prompts, llama-bench with ``-fa 1`` (what
llama.cpp's ``auto`` picks on the CPU, so llama-server's default) and ``-fa 0``. Rounds rotate
the sides; medians of tokens/s. As in bench_core, tokens are random and decoding has no sampling.

Served (--served MODEL, one label): one client sends one --depth-token prompt (token ids) to
``/completion`` again and again, 64 tokens each, greedy, ``ignore_eos``; both servers keep the
prompt's KV between requests, so each request generates after --depth tokens of context.
Generation tokens/s from each server's own ``timings`` ((predicted_n - 1) / predicted_ms): llamaserve
with ``flash_attn: prompts`` against llama-server ``-fa on`` and ``-fa off``, one slot each.

Usage: python benchmarks/bench_attention.py [--models small-f16,mid-q4_0] [--depth 1536] [--reps 3]
       [--runs 3] [--threads N] [--served mid-q4_0] [--workdir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import bench_core
import httpx
import servers
from models import ensure_model  # also puts the checkout on sys.path
from peer_tools import ensure_tool, repack_args

from llamacore import Batch, Context, Model

N_PROMPT, N_GEN, N_BATCH = 512, 32, 512
MODES = ("on", "off", "prompts")


def _decode(ctx: Context, tokens: list[int], pos: int, batch: Batch) -> None:
    """`tokens` at positions from `pos`, in batches of N_BATCH, an output for the last of each."""
    for first in range(0, len(tokens), N_BATCH):
        batch.clear()
        batch.add_sequence(tokens[first:first + N_BATCH], pos + first, 0, logits_last=True)
        ctx.decode(batch)


def ours(model: Model, mode: str, depth: int, threads: int, runs: int, rng: random.Random) -> dict[str, list[float]]:
    """Tokens/s of each run of pp (one batch) and tg (one token a step) after `depth` tokens."""
    ctx = Context(model, n_ctx=depth + N_PROMPT, n_batch=N_BATCH, n_ubatch=N_BATCH, n_threads=threads,
                  n_threads_batch=threads, flash_attn=mode, no_perf=True)
    batch = Batch(N_BATCH)
    _decode(ctx, [rng.randrange(model.n_vocab) for _ in range(depth)], 0, batch)
    out: dict[str, list[float]] = {"pp": [], "tg": []}
    # each test's runs together, the first one untimed, as llama-bench runs them: the first tokens
    # generated after a prompt batch are slower (the first about 2x, back to normal after ~15)
    for test, n in (("pp", N_PROMPT), ("tg", N_GEN)):
        for run in range(runs + 1):
            tokens = [rng.randrange(model.n_vocab) for _ in range(n)]
            ctx.kv_remove(0, depth, -1)
            start = time.perf_counter()
            if test == "pp":
                _decode(ctx, tokens, depth, batch)
            else:
                bench_core.gen(ctx, tokens)          # from the position after the depth
            if run:
                out[test].append(n / (time.perf_counter() - start))
    return out


def peer(bench: Path, path: Path, depth: int, threads: int, runs: int) -> dict[str, dict[str, list[float]]]:
    """llama-bench's tokens/s per run, by -fa value ("fa1", "fa0") and test ("pp", "tg")."""
    cmd = [str(bench), "-m", str(path), "-p", str(N_PROMPT), "-n", str(N_GEN), "-d", str(depth), "-fa", "0,1",
           "-t", str(threads), "-b", str(N_BATCH), "-ub", str(N_BATCH), "-r", str(runs), "-o", "json",
           *repack_args(path)]
    out: dict[str, dict[str, list[float]]] = {"fa0": {}, "fa1": {}}
    for test in bench_core.llama_bench_json(cmd):
        fa = "fa1" if test["flash_attn"] in (1, True, "1", "on", "enabled") else "fa0"
        out[fa]["pp" if test["n_prompt"] else "tg"] = [float(x) for x in test["samples_ts"]]
    return out


def bench_model(label: str, depth: int, threads: int, reps: int, runs: int) -> dict:
    size, _, dtype = label.partition("-")
    path = ensure_model(size, dtype or "f16")
    model = Model(str(path))
    bench = ensure_tool("llama-bench")
    rng = random.Random(0)
    samples: dict[str, dict[str, list[float]]] = {k: {"pp": [], "tg": []} for k in (*MODES, "fa1", "fa0")}
    sides = [*MODES, "llama-bench"]
    for r in range(reps):
        for side in sides[r % len(sides):] + sides[:r % len(sides)]:
            got = peer(bench, path, depth, threads, runs) if side == "llama-bench" else \
                {side: ours(model, side, depth, threads, runs, rng)}
            for name, tests in got.items():
                for test, values in tests.items():
                    samples[name][test] += values
    med = {name: {test: statistics.median(v) for test, v in tests.items()} for name, tests in samples.items()}
    return {"model": str(path), "depth": depth, "medians": med, "samples": samples}


def served(label: str, depth: int, threads: int, reps: int, workdir: Path) -> dict:
    """Generation tokens/s after `depth` tokens of context, per server (medians over `reps` rounds)."""
    size, _, dtype = label.partition("-")
    path = ensure_model(size, dtype or "f16")
    rng = random.Random(1)
    prompt = [rng.randrange(Model(str(path), vocab_only=True).n_vocab) for _ in range(depth)]
    n_ctx = depth + 128
    sides = {"llamaserve prompts": servers.llamaserve(path, workdir, threads=threads, parallel=1, n_ctx=n_ctx,
                                                       name="llamaserve-fa-prompts",
                                                       defaults={"flash_attn": "prompts"}),
             "llama-server -fa on": servers.llama_server(path, workdir, threads=threads, parallel=1, n_ctx=n_ctx,
                                                         name="llama-server-fa-on", extra_args=["-fa", "on"]),
             "llama-server -fa off": servers.llama_server(path, workdir, threads=threads, parallel=1, n_ctx=n_ctx,
                                                          name="llama-server-fa-off")}
    body = {"model": "base", "prompt": prompt, "n_predict": 64, "temperature": 0, "ignore_eos": True,
            "cache_prompt": True}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    with servers.ServerSet() as owned, httpx.Client(timeout=600.0) as http:
        for server in sides.values():
            owned.add(server)
            http.post(server.base_url + "/completion", json=body).raise_for_status()   # the prompt's KV
        names = list(sides)
        for r in range(reps):
            for name in names[r % len(names):] + names[:r % len(names)]:
                resp = http.post(sides[name].base_url + "/completion", json=body)
                resp.raise_for_status()
                t = resp.json()["timings"]
                samples[name].append(1e3 * (t["predicted_n"] - 1) / t["predicted_ms"])
    return {"model": str(path), "depth": depth, "medians": {k: statistics.median(v) for k, v in samples.items()},
            "samples": samples}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="small-f16,mid-q4_0")
    ap.add_argument("--depth", type=int, default=1536)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--served", help="also serve this model (a size-dtype label) to one client")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    report: dict = {"models": {label: bench_model(label, args.depth, args.threads, args.reps, args.runs)
                               for label in args.models.split(",")}}
    if args.served:
        with tempfile.TemporaryDirectory() as tmp:
            got = served(args.served, args.depth, args.threads, 2 * args.reps + 1, args.workdir or Path(tmp))
        print(f"\nserved {args.served}, 64 tokens after {args.depth} (tok/s): "
              + ", ".join(f"{k} {v:.1f}" for k, v in got["medians"].items()))
        report["served"] = got
    for label, res in report["models"].items():
        med = res["medians"]
        print(f"\n{label} after {res['depth']} tokens (tok/s):")
        for name in (*MODES, "fa1", "fa0"):
            shown = f"flash_attn {name}" if name in MODES else f"llama-bench -fa {name[-1]}"
            print(f"  {shown:<22} pp{N_PROMPT} {med[name]['pp']:8.1f}   tg{N_GEN} {med[name]['tg']:7.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
