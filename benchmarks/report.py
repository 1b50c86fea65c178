"""Markdown report and PNG plots from a results JSON written by run.py.

Usage: python benchmarks/report.py [--readme] RESULTS.json
Rewrites RESULTS.md and RESULTS-*.png; with --readme also the latest-report block of README.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import plots
from report_load import load_rows, rss_rows
from report_rows import Row, case_result
from report_speculative import llama_speculative_rows, speculative_rows, speculative_targets


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if unit == "ms":
        return f"{x * 1000:.1f} ms"
    if unit == "MiB":       # a tenth where it matters: differences of a few MiB
        return f"{x / 2**20:.1f} MiB" if abs(x) < 100 * 2**20 else f"{x / 2**20:.0f} MiB"
    if unit == "x":
        return f"{x:.2f}x"
    return f"{x:.1f}" + (f" {unit}" if unit else "")


def _ratio(ours: float | None, peer: float | None) -> str:
    return f"{ours / peer:.3f}" if ours and peer else "n/a"


def table(rows: list[Row], better: str) -> list[str]:
    out = [f"| case | ours | peer | peer value | ratio ours/peer{f' ({better} is better)' if better else ''} |",
           "| --- | --- | --- | --- | --- |"]
    out += [f"| {what} | {_num(o, unit)} | {peer} | {_num(p, unit)} | {_ratio(o, p)} |"
            for what, o, peer, p, unit in rows]
    return out


def core_rows(core: dict) -> list[Row]:
    rows = []
    for label, rep in core.items():
        for test, r in rep["results"].items():
            q = r.get("quiet") or r["all"]
            which = "quiet rounds" if "quiet" in r else "all rounds, none quiet"
            rows.append((f"{test} {label} (tok/s, {which})", q["ours_median"], "llama-bench", q["peer_median"], ""))
            if "ratio_paired" in q:     # reports before it had only the pooled medians
                rows.append((f"{test} {label}: ours/llama-bench in each round, median of the rounds ({which})",
                             q["ratio_paired"], "parity", 1.0, "x"))
            if "control_paired" in q:   # llama-bench against itself: how far identical sides differ here
                low, high = q["control_paired_range"]
                rows.append((f"{test} {label}: control, llama-bench/llama-bench in each round, median of the rounds "
                             f"(rounds {low:.3f}-{high:.3f}; ours {q['ratio_paired_range'][0]:.3f}-"
                             f"{q['ratio_paired_range'][1]:.3f})", q["control_paired"], "parity", 1.0, "x"))
    return rows


def llm_rows(llm: dict, split: bool = True) -> list[Row]:
    """Each model's completion against its peers; with `split`, also the gap to llama-bench split
    into what a completion adds and the binding's decode (its "decode loop" side)."""
    rows = []
    for label, rep in llm.items():
        med = rep["medians"]
        name = label if "-" in label else f"{label}-f16"
        rows += [(f"generate 128, {name} (tok/s)", med["llamacore"], peer, med[peer], "")
                 for peer in med if peer not in ("llamacore", "decode loop")]
        if split and "decode loop" in med:
            rows += [(f"generate 128, {name}: completion / bare decode loop (tok/s)", med["llamacore"],
                      "llamacore decode loop", med["decode loop"], ""),
                     (f"decode loop 128, {name}: llamacore (tok/s)", med["decode loop"], "llama-bench",
                      med["llama-bench"], "")]
    return rows


def attention_rows(att: dict) -> list[Row]:
    """flash_attn "prompts" against llama-bench's two settings, then each of ours against its own."""
    rows = []
    if served := att.get("served"):
        med, name = served["medians"], Path(served["model"]).stem
        rows += [(f"served, 1 client, 64 tokens after {served['depth']}, {name}: flash_attn prompts (tok/s)",
                  med["llamaserve prompts"], peer, med[peer], "")
                 for peer in ("llama-server -fa on", "llama-server -fa off")]
    for label, rep in att["models"].items():
        med, d = rep["medians"], f"d{rep['depth']}"
        rows += [(f"{test}{n} @ {d} {label}: flash_attn prompts (tok/s)", med["prompts"][test], f"llama-bench -fa {fa}",
                  med[f"fa{fa}"][test], "") for test, n in (("tg", 32), ("pp", 512)) for fa in (1, 0)]
        rows += [(f"{test}{n} @ {d} {label}: flash_attn {mode} (tok/s)", med[mode][test], f"llama-bench -fa {fa}",
                  med[f"fa{fa}"][test], "")
                 for test, n in (("tg", 32), ("pp", 512)) for mode, fa in (("on", 1), ("off", 0))]
    return rows


def server_rows(server: dict, key: str = "tok_s", unit: str = "") -> list[Row]:
    """llamaserve vs each peer server per concurrency level: tokens/s, or ``key`` (e.g. ttft_p50)."""
    rows = []
    what = "(tok/s)" if key == "tok_s" else key.replace("ttft_", "TTFT ")
    for by in server.get("summary", {}).values():
        ours = by.get("llamaserve")
        for peer, p in by.items():
            if peer != "llamaserve" and ours:
                rows.append((f"{ours['clients']} clients {what}", ours[key], peer, p[key], unit))
    return rows


def ttft_rows(server: dict) -> list[Row]:
    return server_rows(server, "ttft_p50", "ms")


def lora_mix_rows(server: dict) -> list[Row]:
    rows = []
    for case, by in server.get("lora_summary", {}).items():
        o, p = by.get("llamaserve-lora"), by.get("llama-server-lora")
        if o and p:
            rows.append((f"{case}: {'/'.join(o['aliases'])} x {o['clients']} clients (tok/s)",
                         o["tok_s"], "llama-server", p["tok_s"], ""))
    return rows


def mixed_lora_rows(mixed: dict) -> list[Row]:
    """Per rank and client count: each mix against llama-server, then mixN/single of both."""
    rows: list[Row] = []
    uniform = mixed.get("uniform")
    if uniform:
        t = uniform["tok_s"]
        rows.append((f"in process, {uniform['sequences']} sequences on one adapter: per-sequence sets (tok/s)",
                     t["per-sequence sets"], "context-wide set (upstream path)", t["context-wide set"], ""))
    for rank, r in mixed["by_rank"].items():
        for case, by in r["summary"].items():
            o, p = by.get(f"llamaserve-r{rank}"), by.get(f"llama-server-r{rank}")
            if o and p:
                rows.append((f"rank {rank}, {case.replace('@c', ', ')} clients (tok/s)", o["tok_s"],
                             "llama-server (per-request lora)", p["tok_s"], ""))
            u = by.get(f"llama-server-unpatched-r{rank}")
            if p and u:     # what vendor/patches cost traffic that does not mix adapters
                rows.append((f"rank {rank}, {case.replace('@c', ', ')} clients: llama-server, patched build (tok/s)",
                             p["tok_s"], "llama-server built without vendor/patches", u["tok_s"], ""))
        for key, value in r["ratios"].items():
            if "/single" in key and key.startswith("llamaserve"):
                peer = r["ratios"].get(key.replace("llamaserve", "llama-server"))
                what = key.split(" ", 1)[1]
                if "paired" in what:
                    label = (f"rank {rank}, {what.rsplit(' ', 1)[1]} (TTFT p95 of each rep's rounds: median of "
                             f"the reps' ratios; target <= 1.2)")
                elif "ttft" in what:
                    label = f"rank {rank}, {what.split(' ', 1)[1]} (ratio of TTFT p95 over all reps; target <= 1.2)"
                else:
                    label = f"rank {rank}, {what} (ratio of tok/s)"
                rows.append((label, value, "llama-server, same ratio", peer, "x"))
    return rows


def prefix_rows(pre: dict) -> list[Row]:
    s, st = pre["summary"], pre["settings"]
    what = f"{st['clients']} clients, {st['prefix_words']}-word shared prompt: TTFT p50"
    return [(what, s["llamaserve"]["ttft_p50"], "same server, share_prefixes: false",
             s["llamaserve-no-sharing"]["ttft_p50"], "ms"),
            (what, s["llamaserve"]["ttft_p50"], "llama-server", s["llama-server"]["ttft_p50"], "ms")]


def isolation_rows(iso: dict) -> list[Row]:
    s, mem, cold = iso["summary"], iso["memory"], iso["cold_load_s"]
    rows: list[Row] = []
    for case in ("c1", "c8"):
        ours, peer = s.get(case, {}).get("llamaserve-process"), s.get(case, {}).get("llamaserve-thread")
        if ours and peer:
            rows.append((f"{case[1:]} clients: tokens/s", ours["tok_s"], "isolation: thread", peer["tok_s"], ""))
            rows.append((f"{case[1:]} clients: TTFT p50", ours["ttft_p50"], "isolation: thread",
                         peer["ttft_p50"], "ms"))
    rows.append(("cold load (admin load after unload)", cold["process"], "isolation: thread", cold["thread"], "ms"))
    rows.append(("RSS, server and workers, loaded", mem["process"]["loaded"], "isolation: thread",
                 mem["thread"]["loaded"], "MiB"))
    rows.append(("RSS after unload minus before load", mem["process"]["after_unload"] - mem["process"]["before_load"],
                 "isolation: thread", mem["thread"]["after_unload"] - mem["thread"]["before_load"], "MiB"))
    return rows


def rpc_rows(rpc: dict) -> list[Row]:
    rows: list[Row] = []
    for case, by_server in rpc["summary"].items():
        ours, peer, local = (by_server.get(n) for n in ("llamaserve-rpc", "llama-server-rpc", "llamaserve-local"))
        if ours and peer:
            rows.append((f"{case[1:]} clients, 2 RPC workers: tokens/s", ours["tok_s"], "llama-server --rpc",
                         peer["tok_s"], ""))
            rows.append((f"{case[1:]} clients, 2 RPC workers: TTFT p50", ours["ttft_p50"], "llama-server --rpc",
                         peer["ttft_p50"], "ms"))
        if ours and local:
            rows.append((f"{case[1:]} clients: tokens/s through RPC", ours["tok_s"], "llamaserve local",
                         local["tok_s"], ""))
    return rows


def vision_rows(vis: dict) -> list[Row]:
    """Encode + decode of one image, and its two parts, against llama-mtmd-cli's own log lines."""
    best = vis["summary"].get("quiet") or vis["summary"]["all"]
    med, n = best["median_s"], vis["settings"]["image_tokens"]
    return [(f"one image ({n} tokens): {label}", med["ours"][part], "llama-mtmd-cli", med["peer"][part], "ms")
            for part, label in (("total", "encode + decode"), ("encode", "encode"), ("decode", "decode"))]


def lora_switch_rows(sw: dict) -> list[Row]:
    served, inproc = sw["served"]["median_s"], sw["in_process"]["median_s"]
    ours, peer = served["llamaserve-lora"], served["llama-server-lora"]
    rows = [(f"served, {k}: TTFT", ours[k], "llama-server (per-request lora)", peer[k], "ms")
            for k in ("no switch", "switch")]
    if per_request := served.get("llamaserve-per-request"):
        rows += [(f"served, per-request lora_adapters, {k}: TTFT", per_request[k], "llama-server (per-request lora)",
                  peer[k], "ms") for k in ("no switch", "switch")]
    if runtime := sw.get("runtime_load"):
        rows.append((f"served, POST /admin/adapters (rank {runtime['rank']})",
                     runtime["median_s"]["POST /admin/adapters (wall)"], "llama-server: adapters load at start only",
                     None, "ms"))
    reload = inproc.get("llama-cpp-python reload with lora_path")
    rows.append(("in process, no switch: first token", inproc["llamacore no switch"], "-", None, "ms"))
    rows.append(("in process, switch: set scales + first token", inproc["llamacore switch"],
                 "llama-cpp-python: new Llama(lora_path) + first token", reload, "ms"))
    return rows


def roofline_lines(results: dict) -> list[str]:
    bw = case_result(results, "bandwidth")
    roof = results.get("roofline") or {}
    if not bw:
        return []
    out = [(f"Measured memory bandwidth (NumPy, best of 1 and {bw['threads']} threads): read "
            f"{bw['read_gbs']:.1f} GB/s, copy {bw['copy_gbs']:.1f} GB/s. A generated token reads every "
            "weight once (the token-embedding matrix only one row), so tg <= read bandwidth / bytes per token. "
            "Models that fit in the CPU caches can beat this bound."), "",
           "| model | MB read per token | bound tok/s | ours tg tok/s | ours / bound | llama-bench / bound |",
           "| --- | --- | --- | --- | --- | --- |"]
    if not roof:
        out[-2:] = ["(The table needs the `core` case: it divides our tg128 by this bound.)"]
    for label, r in roof.items():
        peer = r.get("peer_tg_tok_s")
        out.append(f"| {label} | {r['bytes_per_token'] / 1e6:.1f} | {r['bound_tok_s']:.0f} | {_num(r['tg_tok_s'])} | "
                   f"{_ratio(r['tg_tok_s'], r['bound_tok_s'])} | {_ratio(peer, r['bound_tok_s'])} |")
    return out


def headline(results: dict) -> list[Row]:
    """One or two rows per case: the figures a reader looks at first."""
    rows: list[Row] = []
    core, llm, server = (case_result(results, c) for c in ("core", "llm", "server"))
    if core:
        label = list(core)[-1]
        rows += [r for r in core_rows({label: core[label]})]
    if llm:
        mid = {k: v for k, v in llm.items() if k == "mid"} or {k: v for k, v in llm.items() if k == list(llm)[-1]}
        rows += llm_rows(mid, split=False)
    if att := case_result(results, "attention"):
        rows += attention_rows(att)[:1]
    if server:
        rows += [r for r in server_rows(server) if r[0].startswith("8 ")]
        rows += [r for r in lora_mix_rows(server) if r[0].startswith("mix4")]
    for case in ("mixed_lora", "mixed_lora_q4"):
        if mixed := case_result(results, case):
            rows += [(f"{Path(mixed['model']).stem}, {r[0]}", *r[1:]) for r in mixed_lora_rows(mixed)
                     if "mix4, 8" in r[0] and "tok/s)" in r[0]]
    if pre := case_result(results, "shared_prefix"):
        rows += prefix_rows(pre)
    if sw := case_result(results, "lora_switch"):
        rows += lora_switch_rows(sw)[1:2] + lora_switch_rows(sw)[-1:]
    if vis := case_result(results, "vision"):
        rows += vision_rows(vis)[:1]
    if spec := case_result(results, "speculative"):
        rows += [r for r in speculative_rows(spec)
                 if r[0] in ("rewrite prompt, copy model: prompt lookup (tok/s)",
                             "rewrite prompt, deep sibling pair: draft model (tok/s)")]
    rows += [r for r in load_rows(results)
             if r[0] in ("cold load + first token", "model switch: TTFT, model not loaded")]
    if rss := case_result(results, "rss_idle"):
        rows += rss_rows(rss)[2:4]
    return rows


def _loads(results: dict) -> str:
    la = results.get("load_average") or {}
    if "start" not in la:
        return "unknown"
    busy = " (other processes were running: expect noise)" if la["start"] > 0.5 else ""
    return f"{la['start']:.2f} at start{busy}, {la.get('end', 0):.2f} at end (including this run)"


def write(results: dict, json_path: Path) -> Path:
    """Write ``json_path`` with .md and the plots next to it; return the markdown path."""
    stem = json_path.with_suffix("")
    images = plots.write_all(results, stem)
    m = results["machine"]
    lines = [f"# Benchmark report {results['date'][:10]}, {m['id']}", "",
             f"{m['cpu']}, {m['cpus']} CPUs, {m['ram_gib']} GiB RAM, {m['os']}; {results['threads']} threads; "
             f"CPU only. Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) +
             f"; commit {results['git']['commit'][:10]}{' (dirty)' if results['git']['dirty'] else ''}. "
             f"Mode: {results['mode']}; `{results['command']}` took {results['seconds'] / 60:.1f} min; "
             f"1-minute load average {_loads(results)}.", "",
             ("Medians over alternating runs of each side; ratio = ours / peer. For tokens/s higher is "
              "better (a ratio above 1 means we are faster); for times and memory lower is better."), ""]
    lines += [f"- note: {n}" for n in results["notes"]]
    lines += [f"- **{name} failed**: {e['error']}" for name, e in results["cases"].items() if "error" in e]
    lines += ["", "## Headline", "", *table(headline(results), ""), ""]
    sections = [
        ("core", "Binding: prompt and generation tokens/s vs llama-bench", core_rows, "higher"),
        ("llm", "High-level generate vs llama-cpp-python and llama-bench", llm_rows, "higher"),
        ("attention", "After a long context: flash attention for prompts only (ours) vs llama-bench's on and off",
         attention_rows, "higher"),
        ("server", "Serving: aggregate tokens/s by concurrent clients", server_rows, "higher"),
        ("server", "Serving: time to first token", ttft_rows, "lower"),
        ("server", "Mixed LoRA: 8 clients over 1, 2 and 4 adapters of one base", lora_mix_rows, "higher"),
        ("mixed_lora", "Mixed adapters in one batch: by adapter count and rank", mixed_lora_rows, "higher"),
        ("mixed_lora_q4", "Mixed adapters in one batch on a quantized (memory-bound) base", mixed_lora_rows,
         "higher"),
        ("shared_prefix", "Shared prompt prefixes", prefix_rows, "lower"),
        ("lora_switch", "LoRA switch latency", lora_switch_rows, "lower"),
        ("isolation", "Process isolation (ours) vs thread (peer): throughput, TTFT, cold load, memory",
         isolation_rows, ""),
        ("rpc", "A model split across two loopback RPC workers", rpc_rows, ""),
        ("vision", "Image prompt processing (encode + decode) vs llama-mtmd-cli", vision_rows, "lower"),
        ("speculative", "Speculative decoding at 1 client: prompt lookup and a draft model vs llama-server",
         speculative_rows, "higher"),
        ("llama_speculative", "Speculative decoding in Llama: prompt lookup and a draft model vs "
         "llama-cpp-python's Llama", llama_speculative_rows, "higher"),
        ("rss_idle", "Server memory (RSS) before load, loaded, after idle unload", rss_rows, "lower"),
    ]
    for case, title, rows, better in sections:
        if res := case_result(results, case):
            lines += [f"## {title}", "", *table(rows(res), better), ""]
            if case == "speculative":
                lines += speculative_targets(res)
            if case.startswith("mixed_lora"):
                fresh = ("new prompts every round" if res["settings"].get("fresh_prompts")
                         else "one prompt set, repeated")
                lines += [f"Base: `{Path(res['model']).name}`; {fresh}.", ""]
            if case == "vision":
                lines += [f"Peer / ours (encode + decode, {res['which']}): **{res['ratio_peer_over_ours']:.3f}** "
                          f"(target >= {res['target']}; a time, so above 1 means we are faster).", ""]
            if case in images:
                lines += [f"![{title}]({images.pop(case).name})", ""]
    if rows := load_rows(results):
        lines += ["## Cold load and model switch", "", *table(rows, "lower"), ""]
    if roof := roofline_lines(results):
        lines += ["## Physical bound for generation", "", *roof, ""]
    for name, e in results["cases"].items():
        if res := e.get("result"):
            notes = res.get("notes") or [res.get("note")] + [v.get("note") for v in res.values() if isinstance(v, dict)]
            lines += [f"- {name}: {n}" for n in notes if n]
    lines += ["", "Seconds per case: " + ", ".join(f"{n} {e['seconds']:.0f}" for n, e in results["cases"].items())]
    md = json_path.with_suffix(".md")
    md.write_text("\n".join(lines) + "\n")
    return md


README = Path(__file__).resolve().parent / "README.md"
MARKERS = ("<!-- latest report: written by report.py -->", "<!-- end of latest report -->")


def update_readme(results: dict, json_path: Path, readme: Path = README) -> None:
    """Put the headline table and the plots of ``json_path`` between the README's markers."""
    rel = json_path.resolve().parent.relative_to(readme.resolve().parent)
    stem = json_path.stem
    m = results["machine"]
    header = (f"[{stem}.md]({rel}/{stem}.md) ({results['date'][:10]}, {m['cpu']}, {m['cpus']} CPUs, "
              f"{m['ram_gib']} GiB; commit {results['git']['commit'][:10]}; all samples in "
              f"[{stem}.json]({rel}/{stem}.json)):")
    elsewhere = sorted({n.split("on another CPU (", 1)[1].split(")", 1)[0] for n in results["notes"]
                        if "on another CPU (" in n})
    if elsewhere:                # a --merge rerun on a machine of the same id with another CPU
        header += f" some cases were rerun on {', '.join(elsewhere)}: the report's notes say which."
    block = [MARKERS[0], "", header, "", *table(headline(results), ""), ""]
    block += [f"![{p.stem[len(stem) + 1:]}]({rel}/{p.name})" for p in sorted(json_path.parent.glob(f"{stem}-*.png"))]
    text = readme.read_text()
    start, end = text.index(MARKERS[0]), text.index(MARKERS[1])
    readme.write_text(text[:start] + "\n".join(block) + "\n\n" + text[end:])


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        if arg != "--readme":
            res = json.loads(Path(arg).read_text())
            print(write(res, Path(arg)))
            if "--readme" in sys.argv:
                update_readme(res, Path(arg))
