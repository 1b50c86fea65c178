"""The speculative benchmark's figures from its requests (benchmarks/bench_speculative.py): medians
per workload and side, speedups over plain decoding, and the issue's targets."""

from __future__ import annotations

import statistics

from sides import paired_ratio

TARGETS = {"prompt lookup": 1.8, "draft model": 1.5, "non-repetitive": 0.95}
MODES = ("plain", "ngram", "draft")
SERVERS = ("llamaserve", "llama-server")


def summarize(rounds: list[dict]) -> dict:
    """"group/workload" -> side -> medians, acceptance, and whether its tokens equal plain llamaserve's."""
    out: dict[str, dict[str, dict]] = {}
    kept = [r for r in rounds if not r["discarded"]]
    for r in kept:
        out.setdefault(f"{r['group']}/{r['workload']}", {}).setdefault(r["side"], []).append(r)
    for _key, by_side in out.items():
        reference = by_side["llamaserve-plain"][0]["tokens"]
        for side, rs in by_side.items():
            drafted, accepted = sum(r["drafted"] for r in rs), sum(r["accepted"] for r in rs)
            firsts = [next((i for i, (a, b) in enumerate(zip(reference, r["tokens"])) if a != b), None)
                      for r in rs]
            by_side[side] = {
                "reps": len(rs), "tok_s": statistics.median(r["tok_s"] for r in rs),
                "tok_s_by_rep": {r["rep"]: r["tok_s"] for r in rs}, "tokens": rs[0]["n"],
                "drafted_per_request": drafted / len(rs), "acceptance": accepted / drafted if drafted else None,
                "same_tokens_as_plain": all(r["tokens"] == reference for r in rs),
                "first_difference": min((i for i in firsts if i is not None), default=None),
                "max_other_cpu": max(r["cpu"]["other_frac"] for r in rs)}
    return out


def paired(a: dict | None, b: dict | None) -> float | None:
    """Side a's tokens/s over side b's, paired by rep (sides.paired_ratio)."""
    if a is None or b is None:
        return None
    reps = [rep for rep in a["tok_s_by_rep"] if rep in b["tok_s_by_rep"]]
    return paired_ratio([a["tok_s_by_rep"][rep] for rep in reps], [b["tok_s_by_rep"][rep] for rep in reps])


def ratios(summary: dict) -> dict[str, float | None]:
    """"group/workload: SERVER mode/plain" and "group/workload: mode ours/llama-server", paired by rep."""
    out: dict[str, float | None] = {}
    for key, by in summary.items():
        for server in SERVERS:
            for mode in ("ngram", "draft"):
                if f"{server}-{mode}" in by or f"llamaserve-{mode}" in by:
                    out[f"{key}: {server} {mode}/plain"] = paired(by.get(f"{server}-{mode}"), by.get(f"{server}-plain"))
        for mode in MODES:
            if f"llamaserve-{mode}" in by:
                out[f"{key}: {mode} ours/llama-server"] = paired(by[f"llamaserve-{mode}"],
                                                                 by.get(f"llama-server-{mode}"))
    return out


def targets(r: dict) -> list[dict]:
    """Our ratios against the issue's targets."""
    def row(what: str, key: str, target: float) -> dict:
        value = r.get(key)
        return {"what": what, "ratio": key, "value": value, "target": target,
                "met": value is not None and value >= target}
    return [row("prompt lookup, rewrite prompt (copy model)", "copy/rewrite: llamaserve ngram/plain",
                TARGETS["prompt lookup"]),
            row("draft model, rewrite prompt (deep sibling pair)", "deep/rewrite: llamaserve draft/plain",
                TARGETS["draft model"]),
            row("draft model, non-repetitive prompt (deep sibling pair)", "deep/story: llamaserve draft/plain",
                TARGETS["non-repetitive"]),
            row("draft costing a quarter of a target token, rewrite prompt (sibling pair)",
                "sibling/rewrite: llamaserve draft/plain", TARGETS["non-repetitive"]),
            row("draft costing a quarter of a target token, non-repetitive prompt (sibling pair)",
                "sibling/story: llamaserve draft/plain", TARGETS["non-repetitive"]),
            row("prompt lookup, non-repetitive prompt", "random/story: llamaserve ngram/plain",
                TARGETS["non-repetitive"]),
            row("prompt lookup, rewrite prompt the model does not copy", "random/rewrite: llamaserve ngram/plain",
                TARGETS["non-repetitive"]),
            row("expensive draft (quantized target), rewrite prompt", "random/rewrite: llamaserve draft/plain",
                TARGETS["non-repetitive"]),
            row("expensive draft (quantized target), non-repetitive prompt", "random/story: llamaserve draft/plain",
                TARGETS["non-repetitive"])]


def percent(x: float | None) -> str:
    return f"{100 * x:.0f}%" if x is not None else "n/a"


def show(report: dict) -> None:
    print(f"\n{'workload':<16}{'side':<22}{'tok/s':>8}{'acceptance':>12}  same as plain  per-rep tok/s")
    for key, by in report["summary"].items():
        for side, s in by.items():
            print(f"{key:<16}{side:<22}{s['tok_s']:8.1f}{percent(s['acceptance']):>12}  "
                  f"{str(s['same_tokens_as_plain']):<13}  {' '.join(f'{x:.1f}' for x in s['tok_s_by_rep'].values())}")
    print()
    for key, value in report["ratios"].items():
        print(f"  {key:<48} {value:.3f}" if value is not None else f"  {key:<48} n/a")
    for t in report["targets"]:
        value = f"{t['value']:.3f}" if t["value"] is not None else "n/a"
        print(f"  target: {t['what']:<46} {value} (>= {t['target']}) {'met' if t['met'] else 'NOT met'}")
    for n in report["notes"]:
        print(f"  note: {n}")
