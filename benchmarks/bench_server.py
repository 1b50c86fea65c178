"""Serving throughput: llamaserve vs llama.cpp's llama-server (vs llama-cpp-python's server).

Every server runs the same model with the same threads, 8 parallel sequences of 256 tokens of
context each, flash attention off, on 127.0.0.1. The client is the real ``openai`` AsyncOpenAI:
a round sends N concurrent streaming /v1/completions requests ("Once upon a time <i>",
max_tokens 64, temperature 0; ``ignore_eos`` where the server has it, so each request yields 64
tokens). Per round: aggregate generated tokens/s = all generated tokens / wall time of the round,
and the time to first non-empty text chunk (TTFT) of every request (p50 / p95). Each server gets
one untimed warmup request first (llamaserve loads its model lazily). For each concurrency level
the servers alternate order between rounds; ``--reps`` rounds each, medians reported.

Mixed LoRA (llamaserve, and llama-server via its per-request ``"lora"`` field): 4 random adapters
for the model's spec; 8 clients all on one adapter alias ("single"), spread over 2 and over 4
adapter aliases ("mix2", "mix4"), plus "base" (no adapter). Aggregate tokens/s of mixed vs single.

The CPUs are shared with the client and, on a busy machine, with other processes; ggml's worker
threads spin at barriers, so anything else running stalls decoding. Before each round the CPUs
must be idle (at most --idle-wait s); a round during which other processes used more than
--noise of the CPUs is recorded as discarded and rerun (up to --retries times).

Usage: python benchmarks/bench_server.py [--model small|mid|PATH] [--dtype f16] [--threads N]
       [--clients 1,4,8,16] [--reps 3] [--lora-reps N] [--quick] [--no-lora] [--idle-wait S]
       [--noise F] [--retries N] [--workdir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Self

import httpx
import servers
from models import CACHE, SPECS, ensure_model  # also puts the checkout on sys.path
from openai import AsyncOpenAI
from peer_tools import cpu_busy

from llamacore.tiny_models import write_lora

PROMPT = "Once upon a time"
N_GEN = 64
N_CTX = 256
PARALLEL = 8
LORA_CLIENTS = 8
LORA_CASES = {"base": ["base"], "single": ["l1"], "mix2": ["l1", "l2"], "mix4": ["l1", "l2", "l3", "l4"]}
REQUEST_TIMEOUT = 120.0      # seconds, per request
ROUND_TIMEOUT = 300.0        # seconds, per round (all its requests)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of values; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# -- client ------------------------------------------------------------------------------------


def make_client(server: servers.Server) -> AsyncOpenAI:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    return AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                       timeout=REQUEST_TIMEOUT,
                       http_client=httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT))


async def one_request(client: AsyncOpenAI, server: servers.Server, alias: str, index: int,
                      max_tokens: int) -> dict:
    """One streamed completion: TTFT, generated tokens (usage, else text chunks), errors."""
    model, extra = server.targets[alias]
    extra = dict(extra)
    if server.name.startswith("llama-cpp-python"):
        extra["logit_bias"] = {"2": -100}            # no ignore_eos there: ban </s> instead
    started = time.perf_counter()
    ttft = usage_tokens = None
    chunks = 0
    text = []
    try:
        stream = await client.completions.create(
            model=model, prompt=f"{PROMPT} {index}", max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body=extra)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                if ttft is None:
                    ttft = time.perf_counter() - started
                chunks += 1
                text.append(chunk.choices[0].text)
            if getattr(chunk, "usage", None) is not None:
                usage_tokens = chunk.usage.completion_tokens
        error = None
    except Exception as exc:  # noqa: BLE001 -- a failed request is recorded, the round goes on
        error = f"{type(exc).__name__}: {exc}"
    return {"alias": alias, "ttft": ttft, "tokens": usage_tokens if usage_tokens is not None else chunks,
            "usage_tokens": usage_tokens, "chunks": chunks, "elapsed": time.perf_counter() - started,
            "text": "".join(text), "error": error}


async def run_round(client: AsyncOpenAI, server: servers.Server, aliases: list[str], n_clients: int,
                    max_tokens: int = N_GEN) -> dict:
    """n_clients concurrent requests, client i on aliases[i % len(aliases)]."""
    started = time.perf_counter()
    tasks = [asyncio.create_task(one_request(client, server, aliases[i % len(aliases)], i, max_tokens))
             for i in range(n_clients)]
    done, pending = await asyncio.wait(tasks, timeout=ROUND_TIMEOUT)
    wall = time.perf_counter() - started
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    reqs = [t.result() for t in tasks if t in done]
    ttfts = [r["ttft"] for r in reqs if r["ttft"] is not None]
    tokens = sum(r["tokens"] for r in reqs)
    errors = [r["error"] for r in reqs if r["error"]] + [f"timed out after {ROUND_TIMEOUT:.0f}s"] * len(pending)
    return {"server": server.name, "clients": n_clients, "aliases": aliases, "wall_s": wall, "tokens": tokens,
            "tok_s": tokens / wall, "ttft_p50": percentile(ttfts, 50), "ttft_p95": percentile(ttfts, 95),
            "short_requests": sum(1 for r in reqs if r["tokens"] != max_tokens), "errors": errors,
            "requests": [{k: v for k, v in r.items() if k != "text"} for r in reqs]}


# -- phases ------------------------------------------------------------------------------------


def _idle(args) -> None:
    """Wait (at most --idle-wait s) until other processes leave the CPUs idle: ggml's worker threads
    spin at barriers, so a core taken by anything else stalls every decode step."""
    if args.idle_wait <= 0:
        return
    deadline = time.monotonic() + args.idle_wait
    while (busy := cpu_busy(0.5)) > 0.1 and time.monotonic() < deadline:
        pass
    if busy > 0.1:
        print(f"  (CPUs still {busy:.0%} busy after {args.idle_wait:g}s; this round will be noisy)", flush=True)


_TICK = os.sysconf("SC_CLK_TCK")


def _busy_cpu_s() -> float:
    """CPU-seconds all CPUs spent busy since boot (/proc/stat)."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICK


def _proc_cpu_s(pid: int) -> float:
    """CPU-seconds used by process pid (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class CpuMeter:
    """Who used the CPUs during a round: the server, this client process, and everything else."""

    def __init__(self, server: servers.Server) -> None:
        self.pid = server.proc.pid if server.proc else None

    def _sample(self) -> tuple[float, float, float]:
        try:
            server = _proc_cpu_s(self.pid) if self.pid else 0.0
            t = os.times()
            return _busy_cpu_s(), server, t.user + t.system
        except (OSError, ValueError, IndexError):
            return 0.0, 0.0, 0.0

    def __enter__(self) -> Self:
        self.start, self.t0 = self._sample(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        end, wall = self._sample(), time.perf_counter() - self.t0
        busy, server, client = (b - a for a, b in zip(self.start, end))
        n = os.cpu_count() or 1
        self.result = {"server_cpu_s": server, "client_cpu_s": client,
                       "other_cpu_s": max(busy - server - client, 0.0),
                       "other_frac": max(busy - server - client, 0.0) / max(wall * n, 1e-9)}


async def warmup(client: AsyncOpenAI, server: servers.Server, aliases: list[str]) -> dict[str, str]:
    """One untimed full-length request per server (and a short one per alias); texts by alias."""
    texts = {}
    first = await one_request(client, server, aliases[0], 0, N_GEN)
    if first["error"]:
        raise RuntimeError(f"{server.name} warmup failed: {first['error']}\n{server.log_tail()}")
    for alias in aliases:
        r = await one_request(client, server, alias, 0, 8)
        if r["error"]:
            raise RuntimeError(f"{server.name} warmup of {alias} failed: {r['error']}\n{server.log_tail()}")
        texts[alias] = r["text"]
    return texts


async def bench(groups: list[tuple[servers.Server, list[tuple[str, list[str], int]]]], reps: int,
                args) -> list[dict]:
    """Rounds for every (server, cases); the servers' order rotates from one case/rep to the next."""
    clients = {s.name: make_client(s) for s, _ in groups}
    rounds = []
    try:
        cases = groups[0][1]
        n = 0
        for rep in range(reps):
            for case in cases:
                order = groups[n % len(groups):] + groups[:n % len(groups)]
                n += 1
                for server, _ in order:
                    label, aliases, n_clients = case
                    for attempt in range(args.retries + 1):
                        _idle(args)
                        with CpuMeter(server) as cpu:
                            r = await run_round(clients[server.name], server, aliases, n_clients)
                        # jiffy resolution: a few ticks of "other" CPU in a short round is not noise
                        noisy = cpu.result["other_frac"] > args.noise and cpu.result["other_cpu_s"] > 0.05
                        r.update(case=label, rep=rep, cpu=cpu.result, attempt=attempt,
                                 discarded=noisy and attempt < args.retries)
                        rounds.append(r)
                        _print_round(r, server, n_clients)
                        if not r["discarded"]:
                            break
    finally:
        for c in clients.values():
            await c.close()
    return rounds


def _print_round(r: dict, server: servers.Server, n_clients: int) -> None:
    note = f" errors={len(r['errors'])}: {r['errors'][0]}" if r["errors"] else ""
    note += f" short={r['short_requests']}" if r["short_requests"] else ""
    c = r["cpu"]
    note += (f"  cpu: server {c['server_cpu_s']:.1f}s client {c['client_cpu_s']:.1f}s "
             f"other {c['other_cpu_s']:.2f}s")
    note += "  -> discarded (other processes were busy), retrying" if r["discarded"] else ""
    print(f"  rep {r['rep']} {r['case']:<7} c={n_clients:<3} {server.name:<18} {r['tok_s']:8.1f} tok/s  "
          f"p50 {_ms(r['ttft_p50'])} p95 {_ms(r['ttft_p95'])} ms  wall {r['wall_s']:.2f}s{note}", flush=True)


def _ms(x: float | None) -> str:
    return f"{x * 1000:7.1f}" if x is not None else "      -"


def summarize(rounds: list[dict]) -> dict[str, dict[str, dict]]:
    """case -> server -> medians over reps."""
    out: dict[str, dict[str, dict]] = {}
    for r in rounds:
        if r.get("discarded"):
            continue
        out.setdefault(r["case"], {}).setdefault(r["server"], {"rounds": []})["rounds"].append(r)
    for case in out.values():
        for d in case.values():
            rs = d.pop("rounds")
            d.update(clients=rs[0]["clients"], aliases=rs[0]["aliases"], reps=len(rs),
                     tok_s=med([r["tok_s"] for r in rs]), tok_s_all=[r["tok_s"] for r in rs],
                     ttft_p50=med([r["ttft_p50"] for r in rs]), ttft_p95=med([r["ttft_p95"] for r in rs]),
                     errors=sum(len(r["errors"]) for r in rs), short=sum(r["short_requests"] for r in rs),
                     other_cpu_frac=max(r["cpu"]["other_frac"] for r in rs))
    return out


def ratio(summary: dict, case: str, a: str, b: str) -> float | None:
    x, y = summary.get(case, {}).get(a), summary.get(case, {}).get(b)
    if not x or not y or not x["tok_s"] or not y["tok_s"]:
        return None
    return x["tok_s"] / y["tok_s"]


def print_table(title: str, summary: dict, noise: float) -> None:
    print(f"\n{title}")
    print(f"{'case':<8}{'clients':>8}  {'server':<20}{'tok/s':>9}{'p50 TTFT ms':>13}{'p95 TTFT ms':>13}"
          f"  per-round tok/s")
    for case, d in summary.items():
        for name, s in d.items():
            extra = f"  errors={s['errors']}" if s["errors"] else ""
            extra += f"  short={s['short']}" if s["short"] else ""
            extra += (f"  (other processes used up to {s['other_cpu_frac']:.0%} of the CPUs: noisy)"
                      if s["other_cpu_frac"] > noise else "")
            print(f"{case:<8}{s['clients']:>8}  {name:<20}{s['tok_s']:9.1f}{_ms(s['ttft_p50']):>13}"
                  f"{_ms(s['ttft_p95']):>13}  " + " ".join(f"{x:.1f}" for x in s["tok_s_all"]) + extra)


def ensure_loras(size: str) -> dict[str, Path]:
    """Four adapters (seeds 1..4) for the SPECS[size] model, cached next to the models."""
    out = {}
    for k in range(1, 5):
        path = CACHE / f"{size}-lora{k}.gguf"
        if not path.is_file():
            CACHE.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            write_lora(tmp, SPECS[size], seed=k)
            tmp.replace(path)
        out[f"l{k}"] = path
    return out


def _check_same_text(texts: dict[str, dict[str, str]], notes: list[str]) -> None:
    """Greedy outputs must agree across servers (same model, adapters and prompt); note where not."""
    names = list(texts)
    for other in names[1:]:
        for alias, text in texts[names[0]].items():
            if alias in texts[other] and texts[other][alias] != text:
                note = (f"greedy output for {alias!r} differs: {names[0]} {text!r} vs {other} "
                        f"{texts[other][alias]!r}")
                notes.append(note)
                print("WARNING " + note)


def fmt(x: float | None, target: float | None = None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3f}" + (f" (target >= {target:g}: {'PASS' if x >= target else 'MISS'})" if target else "")


# -- main --------------------------------------------------------------------------------------


async def amain(args) -> dict:
    path = ensure_model(args.model, args.dtype) if args.model in SPECS else Path(args.model)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_server."))
    notes: list[str] = []
    report: dict = {"model": str(path), "workdir": str(workdir),
                    "settings": {"threads": args.threads, "parallel": PARALLEL, "n_ctx_per_seq": N_CTX,
                                 "max_tokens": N_GEN, "prompt": PROMPT, "clients": args.clients,
                                 "reps": args.reps, "lora_reps": args.lora_reps, "cpus": os.cpu_count()},
                    "notes": notes}
    print(f"model {path.name}, threads {args.threads}, {PARALLEL} parallel x {N_CTX} ctx, max_tokens {N_GEN}; "
          f"logs and configs in {workdir}")

    with servers.ServerSet() as group:
        main: list[servers.Server] = [
            servers.llamaserve(path, workdir, threads=args.threads, parallel=PARALLEL, n_ctx=N_CTX),
            servers.llama_server(path, workdir, threads=args.threads, parallel=PARALLEL, n_ctx=N_CTX),
        ]
        try:
            main.append(servers.llama_cpp_python(path, workdir, threads=args.threads, n_ctx=N_CTX))
        except servers.ServerUnavailable as exc:
            note = f"llama-cpp-python server not available: {exc}"
            notes.append(note)
            print(note)
        texts = {}
        for s in list(main):
            try:
                group.add(s)
            except RuntimeError as exc:
                if s.name != "llama-cpp-python":
                    raise
                last = str(exc).strip().splitlines()[-1]
                note = f"llama-cpp-python server not available: it failed to start: {last}"
                notes.append(note)
                print(note)
                main.remove(s)
                continue
            print(f"started {s.name}: {' '.join(s.cmd)}", flush=True)
            client = make_client(s)
            try:
                texts[s.name] = await warmup(client, s, ["base"])
            finally:
                await client.close()
        report["warmup_texts"] = texts
        _check_same_text(texts, notes)
        report["servers"] = {s.name: {"cmd": s.cmd, "log": str(s.log_path)} for s in main}
        cases = [(f"c{c}", ["base"], c) for c in args.clients]
        print(f"\n{len(cases)} concurrency levels x {args.reps} reps x {len(main)} servers", flush=True)
        rounds = await bench([(s, cases) for s in main], args.reps, args)
    report["rounds"] = rounds
    summary = summarize(rounds)
    report["summary"] = summary

    lora_summary: dict = {}
    if args.no_lora:
        notes.append("LoRA phase skipped (--no-lora)")
    elif args.model not in SPECS:
        notes.append("LoRA phase skipped: adapters are generated only for the named specs (small, mid)")
    else:
        loras = ensure_loras(args.model)
        with servers.ServerSet() as group:
            lora_servers = [
                servers.llamaserve(path, workdir, threads=args.threads, parallel=PARALLEL, n_ctx=N_CTX,
                                   loras=loras, name="llamaserve-lora"),
                servers.llama_server(path, workdir, threads=args.threads, parallel=PARALLEL, n_ctx=N_CTX,
                                     loras=loras, name="llama-server-lora"),
            ]
            texts = {}
            for s in lora_servers:
                group.add(s)
                print(f"started {s.name}: {' '.join(s.cmd)}", flush=True)
                client = make_client(s)
                try:
                    texts[s.name] = await warmup(client, s, ["base", *loras])
                finally:
                    await client.close()
                distinct = len(set(texts[s.name].values()))
                if distinct < 1 + len(loras):
                    note = (f"{s.name}: only {distinct} distinct warmup outputs over base+{len(loras)} adapters; "
                            f"adapters may not be applied")
                    notes.append(note)
                    print("WARNING " + note)
            _check_same_text(texts, notes)
            report["lora_servers"] = {s.name: {"cmd": s.cmd, "log": str(s.log_path)} for s in lora_servers}
            report["lora_warmup_texts"] = texts
            cases = [(label, aliases, LORA_CLIENTS) for label, aliases in LORA_CASES.items()]
            print(f"\nmixed LoRA: {len(cases)} cases x {args.lora_reps} reps x {len(lora_servers)} servers",
                  flush=True)
            lora_rounds = await bench([(s, cases) for s in lora_servers], args.lora_reps, args)
        report["lora_rounds"] = lora_rounds
        lora_summary = summarize(lora_rounds)
        report["lora_summary"] = lora_summary

    print_table("Aggregate generated tokens/s and TTFT (medians over reps)", summary, args.noise)
    if lora_summary:
        print_table(f"Mixed LoRA, {LORA_CLIENTS} clients (single = all on l1; mixN = spread over N adapter aliases)",
                    lora_summary, args.noise)

    c8 = "c8" if "c8" in summary else f"c{max(args.clients)}"
    ratios = {
        f"llamaserve/llama-server@{c8}": ratio(summary, c8, "llamaserve", "llama-server"),
        f"llamaserve/llama-cpp-python@{c8}": ratio(summary, c8, "llamaserve", "llama-cpp-python"),
    }
    targets = {f"llamaserve/llama-server@{c8}": 0.9, f"llamaserve/llama-cpp-python@{c8}": 3.0}
    for name in ("llamaserve-lora", "llama-server-lora"):
        for mix in ("mix2", "mix4"):
            key = f"{name} {mix}/single"
            a, b = lora_summary.get(mix, {}).get(name), lora_summary.get("single", {}).get(name)
            ratios[key] = a["tok_s"] / b["tok_s"] if a and b and b["tok_s"] else None
            targets[key] = 0.7 if name == "llamaserve-lora" else None
        a, b = lora_summary.get("single", {}).get(name), lora_summary.get("base", {}).get(name)
        ratios[f"{name} single/base"] = a["tok_s"] / b["tok_s"] if a and b and b["tok_s"] else None
    ratios["llamaserve-lora/llama-server-lora mix4"] = ratio(lora_summary, "mix4", "llamaserve-lora",
                                                               "llama-server-lora")
    print("\nRatios of aggregate tokens/s:")
    for key, value in ratios.items():
        print(f"  {key:<44} {fmt(value, targets.get(key))}")
    for note in notes:
        print(f"note: {note}")
    report["ratios"] = ratios
    report["targets"] = targets
    return report


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small", help="small | mid | path to a GGUF")
    ap.add_argument("--dtype", default="f16", choices=("f16", "q8_0", "q4_0"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--clients", default="1,4,8,16", help="comma-separated concurrency levels")
    ap.add_argument("--reps", type=int, default=3, help="rounds per server and concurrency level")
    ap.add_argument("--lora-reps", type=int, help="rounds per server and LoRA case (default: --reps)")
    ap.add_argument("--quick", action="store_true", help="clients 1,8 and 1 rep")
    ap.add_argument("--no-lora", action="store_true", help="skip the mixed-LoRA phase")
    ap.add_argument("--idle-wait", type=float, default=10.0,
                    help="max seconds to wait for idle CPUs before each round (0: never)")
    ap.add_argument("--noise", type=float, default=0.05,
                    help="a round during which other processes used more than this fraction of the CPUs "
                         "(and over 0.05 CPU-seconds) is discarded and rerun")
    ap.add_argument("--retries", type=int, default=3, help="reruns of a noisy round (the last one is kept)")
    ap.add_argument("--workdir", help="where server configs and logs go (default: a new temp dir)")
    ap.add_argument("--json", type=Path, help="write settings, every round and the summaries here")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.reps = "1,8", 1
    args.clients = [int(x) for x in str(args.clients).split(",") if x.strip()]
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 64:
        ap.error("--clients must be 1..64 each")
    if not 1 <= args.reps <= 20:
        ap.error("--reps must be 1..20")
    args.lora_reps = args.lora_reps or args.reps
    report = asyncio.run(amain(args))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    try:
        main()
    finally:
        servers.stop_all()
