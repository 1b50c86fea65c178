"""What drafting costs, for the speculative benchmark (benchmarks/bench_speculative.py): a draft
token against a target token, and a verify batch of k rows against a one-row decode; and the most
that drafting can gain from those costs and an acceptance rate.

A step that drafts n tokens decodes n + 1 rows of the target at once (the last accepted token and
the drafts, each with logits). With each draft token accepted independently with probability a,
the step yields E(n) = (1 - a^(n+1)) / (1 - a) tokens and costs n*c + v(n+1) target tokens, where
c is a draft token's cost and v(k) a k-row batch's, so drafting gains at most E(n) / (n*c + v(n+1)).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench_core import llama_bench_json  # its `models` import puts the checkout on sys.path
from peer_tools import ensure_tool, repack_args

from llamacore import Batch, Context, Model


def draft_cost(target: Path, draft: Path, threads: int, wait_idle: Callable[[], None]) -> dict:
    """Generation tokens/s of target and draft alone (llama-bench tg32, mean of 3 runs, each after
    `wait_idle()`) and their ratio."""
    out = {}
    for key, path in (("target_tok_s", target), ("draft_tok_s", draft)):
        wait_idle()
        out[key] = llama_bench_json([str(ensure_tool("llama-bench")), "-m", str(path), "-p", "0", "-n", "32", "-r", "3",
                                     "-t", str(threads), "-o", "json", *repack_args(path)])[0]["avg_ts"]
    out["ratio"] = out["target_tok_s"] / out["draft_tok_s"]
    return out


def verify_cost(target: Path, threads: int, depth: int, rows: int = 5, rounds: int = 60) -> dict:
    """v(k) for k = 1..rows: the time to decode k rows with logits after `depth` cached tokens, over one
    row's. In one process, the batch sizes alternate in rotating order each round, and v(k) is the
    median of the rounds' k-row / one-row ratios: a shared machine's slowdowns, which last seconds,
    hit a round's decodes alike, where separate runs of each size would not resolve 10%."""
    model = Model(target)
    ctx = Context(model, n_ctx=depth + rows, n_batch=depth, n_ubatch=depth, n_threads=threads,
                  n_threads_batch=threads, no_perf=True)
    rng = random.Random(0)
    prompt = Batch(depth)
    prompt.add_sequence([rng.randrange(model.n_vocab) for _ in range(depth)], 0, 0, logits_last=True)
    ctx.decode(prompt)

    def seconds(k: int) -> float:
        batch = Batch(k)
        for i in range(k):
            batch.add(rng.randrange(model.n_vocab), depth + i, 0, True)
        start = time.perf_counter()
        ctx.decode(batch)
        elapsed = time.perf_counter() - start
        ctx.kv_remove(0, depth, -1)
        return elapsed

    sizes = list(range(1, rows + 1))
    for k in sizes:                     # warm up every graph shape once
        seconds(k)
    times: dict[int, list[float]] = {k: [] for k in sizes}
    for r in range(rounds):
        for k in sizes[r % rows:] + sizes[:r % rows]:
            times[k].append(seconds(k))
    one = times[1]
    return {"rounds": rounds, "depth": depth,
            "ms": {k: 1e3 * statistics.median(t) for k, t in times.items()},
            "v": {k: statistics.median(a / b for a, b in zip(t, one)) for k, t in times.items()}}


def agreement(draft: Path, prompt: list[int], answer: list[int], threads: int) -> float:
    """How often the draft's greedy token equals the target's next one while the draft reads the
    target's own greedy `answer` after `prompt` (teacher-forced): the per-token acceptance that
    draft_bound assumes. Accepted / drafted tokens is lower than this: a draft's tokens after its
    first refused one are refused too."""
    model = Model(draft)
    tokens = prompt + answer[:-1]
    ctx = Context(model, n_ctx=len(tokens), n_batch=len(tokens), n_ubatch=len(tokens), n_threads=threads,
                  n_threads_batch=threads, no_perf=True)
    batch = Batch(len(tokens))
    for i, token in enumerate(tokens):
        batch.add(token, i, 0, i >= len(prompt) - 1)
    ctx.decode(batch)
    guesses = ctx.all_logits().argmax(axis=1)
    return sum(int(g) == t for g, t in zip(guesses, answer)) / len(answer)


def draft_bound(acceptance: float, token_cost: float, v: dict[int, float]) -> tuple[float, int]:
    """The most drafting gains over plain decoding, max over n of E(n) / (n*c + v(n+1)) with c =
    `token_cost` (a draft token's cost in target tokens), and that n (0: every n loses)."""
    best = (1.0, 0)
    for n in range(1, len(v)):
        tokens = (1 - acceptance ** (n + 1)) / (1 - acceptance) if acceptance < 1 else n + 1.0
        best = max(best, (tokens / (n * token_cost + v[n + 1]), n))
    return best
