"""Serving throughput: llamaserve vs llama.cpp's llama-server (vs llama-cpp-python's server).

Every server runs the same model with the same threads, 8 parallel sequences of 256 tokens of
context each, flash attention off, on 127.0.0.1. The client is the real ``openai`` AsyncOpenAI:
a round sends N concurrent streaming /v1/completions requests ("Once upon a time <i>",
max_tokens 64, temperature 0; ``ignore_eos`` where the server has it, so each request yields 64
tokens). Per round: aggregate generated tokens/s = all generated tokens / wall time of the round,
and the time to first non-empty text chunk (TTFT) of every request (p50 / p95). Each server gets
one untimed warmup request first (llamaserve loads its model lazily). For each concurrency level
the servers alternate order between rounds; ``--reps`` rounds each (1 client: three times as many,
its rounds being short and cheap), medians reported.

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
import os
import tempfile
from pathlib import Path

import servers
from models import SPECS, ensure_loras, ensure_model  # also puts the checkout on sys.path
from server_rounds import (
    N_GEN,
    PROMPT,
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
ONE_CLIENT_REPS = 3         # the 1-client level runs this many times --reps rounds
PARALLEL = 8
LORA_CLIENTS = 8
LORA_CASES = {"base": ["base"], "single": ["l1"], "mix2": ["l1", "l2"], "mix4": ["l1", "l2", "l3", "l4"]}


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
            texts[s.name] = await warm_started(s, ["base"])
        report["warmup_texts"] = texts
        _check_same_text(texts, notes)
        report["servers"] = {s.name: {"cmd": s.cmd, "log": str(s.log_path)} for s in main}
        rounds = []
        if 1 in args.clients:       # one stream's round is 64 tokens, ~0.1 s: noisy alone, cheap to repeat
            print(f"\n1 client x {ONE_CLIENT_REPS * args.reps} reps x {len(main)} servers", flush=True)
            rounds += await bench([(s, [("c1", ["base"], 1)]) for s in main], ONE_CLIENT_REPS * args.reps, args)
        cases = [(f"c{c}", ["base"], c) for c in args.clients if c > 1]
        if cases:
            print(f"\n{len(cases)} concurrency levels x {args.reps} reps x {len(main)} servers", flush=True)
            rounds += await bench([(s, cases) for s in main], args.reps, args)
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
                texts[s.name] = await warm_started(s, ["base", *loras])
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
    add_model_options(ap)
    ap.add_argument("--clients", default="1,4,8,16", help="comma-separated concurrency levels")
    ap.add_argument("--reps", type=int, default=3, help="rounds per server and concurrency level")
    ap.add_argument("--lora-reps", type=int, help="rounds per server and LoRA case (default: --reps)")
    ap.add_argument("--quick", action="store_true", help="clients 1,8 and 1 rep")
    ap.add_argument("--no-lora", action="store_true", help="skip the mixed-LoRA phase")
    add_round_options(ap, retries=3)
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.reps = "1,8", 1
    args.clients = [int(x) for x in str(args.clients).split(",") if x.strip()]
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 64:
        ap.error("--clients must be 1..64 each")
    if not 1 <= args.reps <= 20:
        ap.error("--reps must be 1..20")
    args.lora_reps = args.lora_reps or args.reps
    return run_report(amain, args)


if __name__ == "__main__":
    try:
        main()
    finally:
        servers.stop_all()
