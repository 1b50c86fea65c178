"""Client side of the server benchmarks: streamed requests, timed rounds of concurrent clients, CPU
accounting per round, and medians over rounds.

A round sends N concurrent streaming /v1/completions requests through the real ``openai``
AsyncOpenAI client and records aggregate generated tokens/s (all tokens / wall time) and the
time to first non-empty text chunk (TTFT) of every request.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from pathlib import Path
from typing import Self

import httpx
import servers
from openai import AsyncOpenAI
from peer_tools import cpu_busy

PROMPT = "Once upon a time"
N_GEN = 64
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
    # A connection per request: llama-server (cpp-httplib) closes a kept-alive connection after
    # 100 requests, and a request sent on it just then fails; a loopback connect costs ~0.1 ms.
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
    return AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                       timeout=REQUEST_TIMEOUT,
                       http_client=httpx.AsyncClient(limits=limits, timeout=REQUEST_TIMEOUT))


async def one_request(client: AsyncOpenAI, server: servers.Server, alias: str, index: int,
                      max_tokens: int, tag: str = "") -> dict:
    """One streamed completion of "<tag>Once upon a time <index>": TTFT, generated tokens (usage,
    else text chunks), errors."""
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
            model=model, prompt=f"{tag}{PROMPT} {index}", max_tokens=max_tokens, temperature=0, stream=True,
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
                    max_tokens: int = N_GEN, tag: str = "") -> dict:
    """n_clients concurrent requests, client i on aliases[i % len(aliases)]; with a `tag`, client i's
    prompt is led by "i/" and the tag, so the prompts of one round share no more than their first token.

    This process's cyclic garbage collector is off during the round: a full collection of its heap
    (the benchmark's results so far, the openai client's modules) held the GIL for 60-150 ms about
    once in 30 rounds, and every stream of that round, on any server, then showed the pause in its
    time to first token (the round's TTFT p95 became the pause)."""
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        tasks = [asyncio.create_task(one_request(client, server, aliases[i % len(aliases)], i, max_tokens,
                                                 f"{i}/{tag}" if tag else ""))
                 for i in range(n_clients)]
        done, pending = await asyncio.wait(tasks, timeout=ROUND_TIMEOUT)
        wall = time.perf_counter() - started
    finally:
        gc.enable()
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
    """CPU-seconds used by process pid (all its threads) and its live children (model workers)."""
    total = 0.0
    for p in [pid, *servers.descendant_pids(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


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


async def warm_started(server: servers.Server, aliases: list[str]) -> dict[str, str]:
    """For a server just started: print its command line, then warm it up (see ``warmup``) on a
    client of its own; its warmup texts by alias."""
    print(f"started {server.name}: {' '.join(server.cmd)}", flush=True)
    client = make_client(server)
    try:
        return await warmup(client, server, aliases)
    finally:
        await client.close()


async def bench(groups: list[tuple[servers.Server, list[tuple[str, list[str], int]]]], reps: int,
                args, fresh_prompts: bool = False) -> list[dict]:
    """Rounds for every (server, cases); the servers' order rotates from one case/rep to the next.
    The first server's cases set the order; another server runs those of its own list.

    With `fresh_prompts`, client i's prompt in every round starts with i and the round's number (the
    same on each server), so no round reuses KV cached by an earlier one and the prompts of one round
    share only their first token: a case whose requests the servers cache differently (by adapter
    set) is then not timed against another that hits its cache, and a single-adapter round does not
    copy one client's prompt into the others' sequences where a mixed round (other adapters) could
    not."""
    clients = {s.name: make_client(s) for s, _ in groups}
    rounds = []
    try:
        cases = groups[0][1]
        n = 0
        for rep in range(reps):
            for case in cases:
                order = groups[n % len(groups):] + groups[:n % len(groups)]
                n += 1
                for server, own in order:
                    if case not in own:
                        continue
                    label, aliases, n_clients = case
                    for attempt in range(args.retries + 1):
                        _idle(args)
                        tag = f"{n}.{attempt} " if fresh_prompts else ""
                        with CpuMeter(server) as cpu:
                            r = await run_round(clients[server.name], server, aliases, n_clients, tag=tag)
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
    """case -> server -> medians over reps (TTFT: percentiles over all their requests)."""
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
                     # percentiles over every request of the rounds: one round's p95 of 8 requests
                     # is its slowest request, and the median of those is a noisy statistic
                     ttft_p50=percentile(ttfts(rs), 50), ttft_p95=percentile(ttfts(rs), 95),
                     errors=sum(len(r["errors"]) for r in rs), short=sum(r["short_requests"] for r in rs),
                     other_cpu_frac=max(r["cpu"]["other_frac"] for r in rs))
    return out


def ttfts(rounds: list[dict]) -> list[float]:
    return [q["ttft"] for r in rounds for q in r.get("requests", ()) if q.get("ttft") is not None]


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


async def switch_ttfts(server: servers.Server, a: str, b: str, reps: int) -> dict[str, list[float]]:
    """One client sends a, a, b, b, ... (``reps`` times, then a; max_tokens 2): TTFT of each request
    whose alias differs from the previous request's ("switch") and of each that repeats it."""
    client = make_client(server)
    got: dict[str, list[float]] = {"switch": [], "no switch": []}
    try:
        prev = None
        for i, alias in enumerate([a, a, b, b] * reps + [a]):
            r = await one_request(client, server, alias, i, 2)
            if r["error"] or r["ttft"] is None:
                raise RuntimeError(f"{server.name}: {r['error'] or 'no text'}\n{server.log_tail()}")
            if prev is not None:
                got["switch" if alias != prev else "no switch"].append(r["ttft"])
            prev = alias
    finally:
        await client.close()
    return got


# -- command lines -----------------------------------------------------------------------------


def add_model_options(ap) -> None:
    """--model (small | mid | a GGUF path), --dtype and --threads, as the serving benchmarks take them."""
    ap.add_argument("--model", default="small", help="small | mid | path to a GGUF")
    ap.add_argument("--dtype", default="f16", choices=("f16", "q8_0", "q4_0"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)


def add_round_options(ap, retries: int = 3) -> None:
    """The options `bench` and `run_report` read: idle wait, noise threshold, retries, workdir, json."""
    ap.add_argument("--idle-wait", type=float, default=10.0,
                    help="max seconds to wait for idle CPUs before each round (0: never)")
    ap.add_argument("--noise", type=float, default=0.05,
                    help="a round during which other processes used more than this fraction of the CPUs "
                         "(and over 0.05 CPU-seconds) is discarded and rerun")
    ap.add_argument("--retries", type=int, default=retries, help="reruns of a noisy round (the last one is kept)")
    ap.add_argument("--workdir", help="where server configs and logs go (default: a new temp dir)")
    ap.add_argument("--json", type=Path, help="write settings, every round and the summaries here")


def run_report(amain, args) -> dict:
    """Run a benchmark's async main and write its report to --json when given."""
    import json

    report = asyncio.run(amain(args))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {args.json}")
    return report
