"""The report's rows for the speculative-decoding cases (bench_speculative, bench_llama_speculative)."""

from __future__ import annotations

from report_rows import Row

SPEC_MODES = {"plain": "plain decoding", "ngram": "prompt lookup", "draft": "draft model"}
SPEC_PEERS = {"plain": "llama-server", "ngram": "llama-server ngram-simple", "draft": "llama-server draft-simple"}
SPEC_WORKLOADS = {"random/rewrite": "rewrite prompt", "random/story": "non-repetitive prompt",
                  "copy/rewrite": "rewrite prompt, copy model", "sibling/rewrite": "rewrite prompt, sibling pair",
                  "sibling/story": "non-repetitive prompt, sibling pair",
                  "deep/rewrite": "rewrite prompt, deep sibling pair",
                  "deep/story": "non-repetitive prompt, deep sibling pair"}


def llama_speculative_rows(spec: dict) -> list[Row]:
    """Per workload: Llama tok/s and speedup over plain, llamacore against llama-cpp-python."""
    rows: list[Row] = []
    for workload, r in spec["workloads"].items():
        sides, speedup = r["sides"], r["speedup"]
        for mode, what in (("plain", "plain"), ("lookup", "prompt lookup"), ("draft", "draft model")):
            ours, peer = sides.get(f"llamacore {mode}"), sides.get(f"llama-cpp-python {mode}")
            if ours:
                rows.append((f"{workload}: {what} (tok/s)", ours["tok_s"], "llama-cpp-python Llama",
                             peer and peer["tok_s"], ""))
            if ours and mode != "plain":
                rows.append((f"{workload}: {what} / plain (speedup)", speedup[f"llamacore {mode}"],
                             "llama-cpp-python, same ratio", speedup.get(f"llama-cpp-python {mode}"), "x"))
    return rows


def speculative_rows(spec: dict) -> list[Row]:
    """Per workload: tok/s of each mode against llama-server's, speedups over plain, acceptance (%)."""
    rows: list[Row] = []
    ratios = spec["ratios"]
    for key, by in spec["summary"].items():
        label = SPEC_WORKLOADS.get(key, key)
        for mode, what in SPEC_MODES.items():
            if o := by.get(f"llamaserve-{mode}"):
                p = by.get(f"llama-server-{mode}")
                rows.append((f"{label}: {what} (tok/s)", o["tok_s"], SPEC_PEERS[mode], p and p["tok_s"], ""))
        for mode in ("ngram", "draft"):
            if f"llamaserve-{mode}" in by:
                rows.append((f"{label}: {SPEC_MODES[mode]} / plain (speedup)",
                             ratios.get(f"{key}: llamaserve {mode}/plain"), "llama-server, same ratio",
                             ratios.get(f"{key}: llama-server {mode}/plain"), "x"))
        for mode in ("ngram", "draft"):
            if o := by.get(f"llamaserve-{mode}"):
                p = by.get(f"llama-server-{mode}")
                pct = [x["acceptance"] * 100 if x and x["acceptance"] is not None else None for x in (o, p)]
                rows.append((f"{label}: {SPEC_MODES[mode]}, accepted / drafted tokens", pct[0], SPEC_PEERS[mode],
                             pct[1], "%"))
    return rows


def speculative_targets(spec: dict) -> list[str]:
    parts = [f"{t['what']} **{t['value']:.2f}**x (target >= {t['target']}, {'met' if t['met'] else 'not met'})"
             if t["value"] is not None else f"{t['what']} n/a" for t in spec["targets"]]
    tail = ""
    costs = spec.get("draft_costs", {})
    for key, what in (("random", "the quantized target as draft"), ("sibling", "the sibling draft"),
                      ("deep", "the deep sibling's draft")):
        if cost := costs.get(key):
            tail += (f" A token of {what} costs {cost['ratio']:.2f} of a target token (llama-bench tg32: "
                     f"{cost['target_tok_s']:.1f} vs {cost['draft_tok_s']:.1f} tok/s).")
    return ["Targets, llamaserve's tokens/s over its plain decoding: " + "; ".join(parts) + "." + tail, ""]
