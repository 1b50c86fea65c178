"""Generation speed of the high-level API: llamacore.Llama vs llama-cpp-python's Llama vs llama-bench tg.

Each side generates a fixed 128 tokens greedily from an empty prompt on the same model and threads
(flash attention off on every side, llama-cpp-python's default). The prompt is the BOS token alone,
so a completion decodes what llama-bench's tg128 decodes: 128 single tokens from an empty cache
(BOS, then 127 generated; the 128th is sampled, not decoded). A fourth side splits llamacore's gap
to llama-bench in two: "decode loop" is llama-bench's tg done through llamacore on the same context
(bench_core.gen: those 128 decodes with random tokens and no sampling), so completion / decode loop
is what the completion adds (sampling, text, the response) and decode loop / llama-bench is the
binding's decode against llama.cpp's own. The prompt cache
is reset before every run so each run does the same work. Rounds alternate the sides; medians
of tokens/s are compared. llama-cpp-python is the installed package when there is one, else its own
Python from the pinned sdist over this build's libllama, in a child process (vendor/lcp_python.py);
it is skipped with a note when neither is there.

Models are sizes (f16) or size-dtype labels: tiny,small-q4_0,mid.

Usage: python benchmarks/bench_llm.py [--models tiny,small,mid] [--threads N] [--reps N] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_core import Settings, gen, run_peer
from llama_side import Side, lcp_environment
from models import ensure_model  # also puts the checkout on sys.path
from peer_tools import ensure_tool
from sides import alternate, medians, ratios

from llamacore import Llama

PROMPT = ""     # BOS alone: the decodes of llama-bench tg128 (a prompt's decode is not tg)
N_GEN = 128


def after_warmup(runs: int, run: Callable[[], float]) -> list[float]:
    """The tokens/s of `runs` calls of `run`, after one warmup call."""
    return [run() for _ in range(runs + 1)][1:]


def _all_generated(n: int) -> int:
    if n != N_GEN:
        raise RuntimeError(f"generated {n} tokens instead of {N_GEN} (EOS sampled)")
    return n


def timed_runs(llm, runs: int, **kw) -> list[float]:
    """Tokens/s of `runs` completions of N_GEN tokens, each from an empty cache."""
    def one() -> float:
        llm.reset()
        start = time.perf_counter()
        result = llm.create_completion(PROMPT, max_tokens=N_GEN, temperature=0, **kw)
        return _all_generated(result["usage"]["completion_tokens"]) / (time.perf_counter() - start)
    return after_warmup(runs, one)


def decode_loop_runs(llm: Llama, runs: int) -> list[float]:
    """Tokens/s of `runs` bare decode loops of N_GEN random tokens on `llm`'s context; the cache is
    cleared before and after each, so the next completion starts empty."""
    rng = random.Random(0)

    def one() -> float:
        tokens = [rng.randrange(llm.model.n_vocab) for _ in range(N_GEN)]
        llm.reset()
        start = time.perf_counter()
        gen(llm.ctx, tokens)
        elapsed = time.perf_counter() - start
        llm.reset()
        return N_GEN / elapsed
    return after_warmup(runs, one)


def child_runs(side: Side, runs: int) -> list[float]:
    """timed_runs for llama-cpp-python in a child process (each run resets its cache first)."""
    def one() -> float:
        got = side.complete(PROMPT, N_GEN, reset=True)
        return _all_generated(got["n"]) / got["wall_s"]
    return after_warmup(runs, one)


def bench_model(label: str, threads: int, reps: int, runs: int, lcp_env: dict[str, str] | None) -> dict:
    size, _, dtype = label.partition("-")
    path = ensure_model(size, dtype or "f16")
    ours = Llama(path, n_ctx=512, n_batch=512, n_threads=threads, flash_attn=False)
    sides = {"llamacore": lambda: timed_runs(ours, runs, ignore_eos=True),
             "decode loop": lambda: decode_loop_runs(ours, runs)}
    child, note = None, None
    if importlib.util.find_spec("llama_cpp"):
        import llama_cpp
        peer = llama_cpp.Llama(str(path), n_ctx=512, n_batch=512, n_threads=threads, flash_attn=False,
                               verbose=False)
        sides["llama-cpp-python"] = lambda: timed_runs(peer, runs)
    elif lcp_env is not None:
        child = Side("llama-cpp-python", "llama_cpp", {"model": str(path), "mode": "plain", "draft": None,
                                                       "threads": threads, "n_ctx": 512}, lcp_env)
        try:
            child.complete(PROMPT, 1, reset=True)
            sides["llama-cpp-python"] = lambda: child_runs(child, runs)
        except RuntimeError as exc:     # e.g. ggml's repacked quantized weights crash on some AMX CPUs
            note = f"llama-cpp-python failed on {label}: {exc}; compared with llama-bench only"
            print(f"note: {note}")
            child = None
    bench = ensure_tool("llama-bench")
    settings = Settings(threads=threads, flash_attn="off", runs=runs, n_prompt=0, n_gen=N_GEN)
    sides["llama-bench"] = lambda: run_peer(bench, path, settings)[f"tg{N_GEN}"]
    try:
        samples = alternate(sides, reps)
    finally:
        if child is not None:
            child.close()
    med = medians(samples)
    return {"model": str(path), "medians": med, "samples": samples,
            "ratios": {**ratios(med, "llamacore"), "decode loop/llama-bench": med["decode loop"] / med["llama-bench"]},
            **({"note": note} if note else {})}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny,small,mid")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        lcp_env = None if importlib.util.find_spec("llama_cpp") else lcp_environment(Path(tmp))
        if lcp_env is not None:
            print("note: llama-cpp-python is its own Python from the pinned sdist over this build's libllama")
        elif not importlib.util.find_spec("llama_cpp"):
            print("note: llama-cpp-python is not installed nor its sdist cached; comparing with llama-bench only")
        for size in args.models.split(","):
            res = report[size] = bench_model(size, args.threads, args.reps, args.runs, lcp_env)
            print(f"\n{size}: " + "  ".join(f"{k} {v:.1f} tok/s" for k, v in res["medians"].items()))
            print("  " + "  ".join(f"{k} = {v:.3f}" for k, v in res["ratios"].items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
