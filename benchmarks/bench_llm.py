"""Generation speed of the high-level API: llamacore.Llama vs llama-cpp-python's Llama vs llama-bench tg.

Each side generates a fixed 128 tokens greedily from the same short prompt on the same model
and threads (flash attention off on every side, llama-cpp-python's default). A fourth side splits
llamacore's gap to llama-bench in two: "decode loop" is llama-bench's tg done through llamacore on
the same context (bench_core.gen: 128 single-token decodes from an empty cache, no prompt, no
sampling), so completion / decode loop is what the completion adds (its prompt, sampling, text)
and decode loop / llama-bench is the binding's decode against llama.cpp's own. The prompt cache
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
import statistics
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

PROMPT = "Once upon a time, in a small village by the sea,"
N_GEN = 128


def prompt_seconds(llm: Llama, runs: int) -> float:
    """Median seconds to decode PROMPT into an empty cache: the part of a completion's time that
    llama-bench's tg does not have."""
    tokens = llm.tokenize(PROMPT.encode())
    times = []
    for _ in range(runs):
        llm.reset()
        start = time.perf_counter()
        llm.eval(tokens)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    # the decode steps alone: a completion's time less its prompt's decode, over its N_GEN - 1 steps
    # (the first token comes from the prompt's logits), against llama-bench's N_GEN steps from empty
    steps = (N_GEN - 1) / (N_GEN / med["llamacore"] - prompt_seconds(ours, 2 * runs + 1))
    return {"model": str(path), "medians": med, "samples": samples,
            "ratios": {**ratios(med, "llamacore"), "decode loop/llama-bench": med["decode loop"] / med["llama-bench"]},
            "steps_per_s": steps, "steps_ratio": steps / med["llama-bench"], **({"note": note} if note else {})}


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
            print("  " + "  ".join(f"{k} = {v:.3f}" for k, v in res["ratios"].items())
                  + f"  (decode steps alone: {res['steps_per_s']:.1f}/s = {res['steps_ratio']:.3f} of llama-bench)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
