"""pp512 / tg128 throughput of llamacore versus llama.cpp's own ``llama-bench``.

Our side mirrors llama-bench's test_prompt/test_gen exactly: a fresh context per test
(n_ctx = n_prompt + n_gen), one untimed warmup (a full prompt / one generated token), then
timed runs that each start from a cleared KV cache. pp decodes n_prompt random tokens (BOS
first) in one batch with only the last output; tg decodes n_gen single random tokens, each
with an output and no sampling. The two sides alternate for ``--reps`` rounds of ``--runs``
timed runs; medians and bests of the per-run tokens/s are compared, over all rounds and over
the "quiet" rounds in which other processes used (almost) no CPU. Each also gets the median over
rounds of the round's ours/peer ratio (sides.paired_ratio), which cancels the machine's slower drifts
that a ratio of the pooled medians keeps.

With ``--control`` each round also runs llama-bench a second time ("control") and reports its ratio
to the first run as ours is reported: two sides that are the same program, so how far that ratio
strays from 1.0 is how far this machine lets identical sides differ. Our side calls the same C
functions as llama-bench, so a ratio of ours within the control's spread is no measured difference.

Usage: python benchmarks/bench_core.py [--model small|mid|PATH] [--dtype f16|q8_0|q4_0]
       [--threads N] [--reps N] [--runs N] [--fa auto|on|off] [--idle-wait S] [--quiet CORES]
       [--control] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from models import SPECS, ensure_model  # also puts the checkout on sys.path
from peer_tools import ForeignLoad, ensure_tool, repack_args, wait_for_idle_cpus
from sides import paired_ratio

import llamacore
from llamacore import Batch, Context, Model


@dataclass(frozen=True)
class Settings:
    """Everything both sides must agree on."""

    n_prompt: int = 512
    n_gen: int = 128
    threads: int = os.cpu_count() or 1
    n_batch: int = 512
    n_ubatch: int = 512
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    ngl: int = 0
    runs: int = 5


def _context(model: Model, s: Settings, n_ctx: int) -> Context:
    return Context(model, n_ctx=n_ctx, n_batch=s.n_batch, n_ubatch=s.n_ubatch,
                   n_threads=s.threads, n_threads_batch=s.threads, flash_attn=s.flash_attn,
                   type_k=s.type_k, type_v=s.type_v, no_perf=True)


def _tokens(model: Model, n: int, rng: random.Random) -> list[int]:
    """n random tokens, BOS first when the model adds one (drawn before timing: Python's RNG
    costs ~0.8 us a token, C's std::rand in llama-bench almost nothing)."""
    first = model.token_bos if model.add_bos else rng.randrange(model.n_vocab)
    return [first] + [rng.randrange(model.n_vocab) for _ in range(n - 1)]


def _prompt(ctx: Context, tokens: list[int]) -> None:
    """llama-bench test_prompt with n <= n_batch: one batch, output for the last token only."""
    batch = Batch(len(tokens))
    batch.add_sequence(tokens, 0, 0, logits_last=True)
    ctx.decode(batch)


def gen(ctx: Context, tokens: list[int]) -> None:
    """llama-bench test_gen: single-token decodes with an output each, no sampling."""
    pos = ctx.kv_pos_max(0) + 1
    batch = Batch(1)
    for token in tokens:
        batch.clear()
        batch.add(token, pos, 0, True)
        ctx.decode(batch)
        pos += 1


def run_ours(model: Model, s: Settings, seed: int) -> dict[str, list[float]]:
    """Tokens/s of each timed run of pp and tg through llamacore."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {}
    for name, n, test, warm in ((f"pp{s.n_prompt}", s.n_prompt, _prompt, s.n_prompt),
                                (f"tg{s.n_gen}", s.n_gen, gen, 1)):
        ctx = _context(model, s, n_ctx=n)  # llama-bench: n_ctx = n_prompt + n_gen of the test
        ctx.kv_clear()
        test(ctx, _tokens(model, warm, rng))
        samples = []
        for _ in range(s.runs):
            ctx.kv_clear()
            tokens = _tokens(model, n, rng)
            t0 = time.perf_counter_ns()
            test(ctx, tokens)
            samples.append(n * 1e9 / (time.perf_counter_ns() - t0))
        out[name] = samples
        del ctx
    return out


def peer_command(bench: Path, model_path: Path, s: Settings) -> list[str]:
    """The llama-bench command line for settings ``s``."""
    return [str(bench), "-m", str(model_path), "-p", str(s.n_prompt), "-n", str(s.n_gen),
            "-t", str(s.threads), "-b", str(s.n_batch), "-ub", str(s.n_ubatch),
            "-fa", s.flash_attn, "-ctk", s.type_k, "-ctv", s.type_v, "-ngl", str(s.ngl),
            "-r", str(s.runs), "-o", "json", *repack_args(model_path)]


def llama_bench_json(cmd: list[str]) -> list[dict]:
    """Run a llama-bench command line ending in ``-o json``: its tests; its stderr's end on failure."""
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def run_peer(bench: Path, model_path: Path, s: Settings) -> dict[str, list[float]]:
    """Tokens/s of each timed run of pp and tg reported by llama-bench."""
    out = {}
    for test in llama_bench_json(peer_command(bench, model_path, s)):
        name = f"pp{test['n_prompt']}" if test["n_prompt"] else f"tg{test['n_gen']}"
        out[name] = [float(x) for x in test["samples_ts"]]
    return out


Rounds = list[dict]  # per round: {"first": side, "load": {side: cores}, "ts": {side: {test: [t/s]}}}
SIDES = ("ours", "peer", "control")  # control: llama-bench again, when asked for


def _paired(subset: Rounds, side: str, test: str) -> dict[str, float | None]:
    """``side``/peer per round: the median of the rounds and the lowest and highest round."""
    med = statistics.median
    ours, peer = ([med(r["ts"][name][test]) for r in subset] for name in (side, "peer"))
    per_round = [x / y for x, y in zip(ours, peer)]
    return {"median": paired_ratio(ours, peer), "low": min(per_round), "high": max(per_round)}


def summarize(rounds: Rounds, quiet: float) -> dict[str, dict]:
    """Print and return medians, bests and ratios (ours / peer) per test.

    "quiet" uses only rounds where other processes took < ``quiet`` cores on both sides.
    """
    med = statistics.median
    calm = [r for r in rounds if max(r["load"].values()) < quiet]
    print(f"\n{'test':<7}{'rounds':<7}{'ours med':>10}{'peer med':>10}{'ratio':>7}"
          f"{'ours best':>11}{'peer best':>11}{'ratio':>7}{'paired':>8}")
    results: dict[str, dict] = {}
    for test in rounds[0]["ts"]["ours"]:
        for label, subset in (("all", rounds), ("quiet", calm)):
            if not subset:
                continue
            ours = [x for r in subset for x in r["ts"]["ours"][test]]
            peer = [x for r in subset for x in r["ts"]["peer"][test]]
            paired = _paired(subset, "ours", test)
            res = {"rounds": len(subset), "ours_median": med(ours), "peer_median": med(peer),
                   "ratio": med(ours) / med(peer), "ours_best": max(ours), "peer_best": max(peer),
                   "ratio_best": max(ours) / max(peer), "ratio_paired": paired["median"],
                   "ratio_paired_range": [paired["low"], paired["high"]]}
            line = (f"{test:<7}{label + ' ' + str(len(subset)):<7}{res['ours_median']:>10.1f}"
                    f"{res['peer_median']:>10.1f}{res['ratio']:>7.3f}{res['ours_best']:>11.1f}"
                    f"{res['peer_best']:>11.1f}{res['ratio_best']:>7.3f}{res['ratio_paired']:>8.3f}"
                    f" (rounds {paired['low']:.3f}-{paired['high']:.3f})")
            if "control" in subset[0]["ts"]:
                control = _paired(subset, "control", test)
                res["control_paired"] = control["median"]
                res["control_paired_range"] = [control["low"], control["high"]]
                line += f"; control {control['median']:.3f} ({control['low']:.3f}-{control['high']:.3f})"
            results.setdefault(test, {})[label] = res
            print(line)
    if not calm:
        print(f"(no quiet round: other processes always took >= {quiet} cores)")
    return results


def print_round(i: int, r: dict) -> None:
    """One line per round: per-test median ratio and the foreign load on each side."""
    med = statistics.median
    parts = [f"{t} {med(r['ts'][side][t]) / med(r['ts']['peer'][t]):.3f}" + ("" if side == "ours" else " (control)")
             for side in r["ts"] if side != "peer" for t in r["ts"][side]]
    loads = ", ".join(f"{side} {cores:.2f}" for side, cores in r["load"].items())
    print(f"round {i + 1} ({r['first']} first): ratio to peer " + ", ".join(parts)
          + f"; other load {loads} cores", flush=True)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small", help="small | mid | path to a GGUF")
    ap.add_argument("--dtype", default="f16", choices=("f16", "q8_0", "q4_0"))
    ap.add_argument("--threads", type=int, default=Settings.threads)
    ap.add_argument("--reps", type=int, default=3, help="alternating rounds (ours, peer)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per side and round (-r)")
    ap.add_argument("--fa", default="auto", choices=("auto", "on", "off"), help="flash attention")
    ap.add_argument("--idle-wait", type=float, default=60.0,
                    help="max seconds to wait for idle CPUs before each side's run (0: never)")
    ap.add_argument("--quiet", type=float, default=0.25,
                    help="a round is quiet when other processes used fewer cores than this")
    ap.add_argument("--control", action="store_true",
                    help="also run llama-bench a second time in each round: the spread of identical sides")
    ap.add_argument("--json", type=Path, help="write all samples and results here")
    args = ap.parse_args(argv)

    path = ensure_model(args.model, args.dtype) if args.model in SPECS else Path(args.model)
    bench = ensure_tool("llama-bench")
    s = Settings(threads=args.threads, flash_attn=args.fa, runs=args.runs)
    model = Model(path, n_gpu_layers=s.ngl)
    print(f"model {path.name}: {model.n_params / 1e6:.1f}M params, {model.size / 2**20:.0f} MiB; "
          f"llamacore {llamacore.llama_cpp_version()}")
    print("peer: " + " ".join(peer_command(bench, path, s)))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; each side first waits "
          f"up to {args.idle_wait:g}s for {s.threads} idle CPUs (busy cores stall spinning threads)")

    rounds: Rounds = []
    sides = SIDES if args.control else SIDES[:2]
    for i in range(args.reps):
        order = sides[i % len(sides):] + sides[:i % len(sides)]  # each side first in turn
        r: dict = {"first": order[0], "load": {}, "ts": {}}
        for side in order:
            if args.idle_wait > 0:
                wait_for_idle_cpus(s.threads, timeout=args.idle_wait)
            with ForeignLoad() as load:
                r["ts"][side] = run_ours(model, s, seed=i) if side == "ours" else run_peer(bench, path, s)
            r["load"][side] = load.cores
        rounds.append(r)
        print_round(i, r)

    report = {"model": str(path), "settings": vars(s) | {"reps": args.reps},
              "results": summarize(rounds, args.quiet), "rounds": rounds}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
