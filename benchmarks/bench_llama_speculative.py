"""Speculative decoding in the library: llamacore.Llama vs llama-cpp-python's Llama, side by side.

One stream, greedy, N_GEN tokens per completion from a token-id prompt, through `create_completion`
on each side: plain; prompt lookup with `LlamaPromptLookupDecoding(max_ngram_size=2,
num_pred_tokens=10)` (llama-cpp-python's class and defaults, and llamacore's of the same name); and
on llamacore a draft model (`draft_model=Llama(DRAFT)`: llama-cpp-python has no draft-model class).
llama-cpp-python is its own Python from the pinned sdist over this build's libllama
(vendor/lcp_python.py), so both sides run one C library and the figures compare the Python layers.

Each side is a child process (benchmarks/llama_side.py) that keeps its model loaded; the rounds
rotate the order of the sides, the prompt's KV is reused between rounds on every side (both reuse
the longest common prefix), and tokens/s is completion tokens over the call's wall time (medians
over rounds; each ratio is the median over rounds of the two sides' ratio in that round). Whether
each side's greedy text equals its library's plain decoding (and llamacore's) is reported: across
the two libraries near-ties of these random-weight models may break differently.

Workloads (benchmarks/bench_speculative.py's prompts): "rewrite" (the model's own text, lightly
changed, to rewrite) on the f16 target and on its "copy" model (attention outputs zeroed: it repeats
its context, so prompt lookup finds long matches), "story" (nothing repeats), and "rewrite" on the
"sibling pair" (speculative_models.py: a target and a draft an eighth of its cost that agree on
about 80% of tokens; the quantized target as draft costs too much to pay).

Usage: python benchmarks/bench_llama_speculative.py [--model mid] [--reps 5] [--n-gen 160] [--threads N]
       [--draft-dtype auto|q4_0|q8_0|q5_0] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from bench_speculative import CHANGE_EVERY, INSTRUCTION, REWRITE_TAIL, STORY
from llama_side import Side, lcp_environment
from models import ensure_model  # also puts the checkout on sys.path
from peer_tools import ROOT
from sides import paired_ratio
from speculative_models import copy_model, draft_model, sibling_pair

N_CTX = 1024


def prompts(model: Path, threads: int, n_gen: int) -> dict[str, list[int]]:
    """The rewrite prompt (the model's own greedy text, every CHANGE_EVERY-th token changed) and the story."""
    from llamacore import Llama

    llm = Llama(str(model), n_ctx=N_CTX, n_threads=threads, verbose=False)
    head = llm.tokenize(INSTRUCTION.encode(), add_bos=True)
    text = llm.tokenize(llm.create_completion(head, max_tokens=n_gen + 8, temperature=0.0)["choices"][0]["text"]
                        .encode(), add_bos=False)
    change = llm.tokenize(b" Anna", add_bos=False)[-1]
    text = [change if i % CHANGE_EVERY == CHANGE_EVERY // 2 else t for i, t in enumerate(text)]
    tail = llm.tokenize(REWRITE_TAIL.encode(), add_bos=False)
    llm.close()
    return {"rewrite": head + text + tail, "story": Llama(str(model), vocab_only=True, verbose=False)
            .tokenize(STORY.encode(), add_bos=True)}


def run_workload(label: str, model: Path, draft: Path, prompt: list[int], args, lcp_env) -> dict:
    cfg = {"model": str(model), "draft": str(draft), "threads": args.threads, "n_ctx": N_CTX}
    ours_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    modes = {"llamacore plain": ("llamacore", "plain"), "llamacore lookup": ("llamacore", "lookup"),
             "llamacore draft": ("llamacore", "draft")}
    if lcp_env is not None:
        modes |= {"llama-cpp-python plain": ("llama_cpp", "plain"), "llama-cpp-python lookup": ("llama_cpp", "lookup")}
    sides = {name: Side(name, impl, {**cfg, "mode": mode}, lcp_env if impl == "llama_cpp" else ours_env)
             for name, (impl, mode) in modes.items()}
    try:
        texts = {name: s.complete(prompt, args.n_gen)["text"] for name, s in sides.items()}   # untimed
        samples: dict[str, list[dict]] = {name: [] for name in sides}
        names = list(sides)
        for r in range(args.reps):
            for name in names[r % len(names):] + names[:r % len(names)]:
                got = sides[name].complete(prompt, args.n_gen)
                samples[name].append(got)
    finally:
        for s in sides.values():
            s.close()
    out: dict = {"prompt_tokens": len(prompt), "sides": {}}
    for name, got in samples.items():
        drafted = sum(g["drafted"] for g in got)
        own_plain = texts[name.rsplit(" ", 1)[0] + " plain"]
        out["sides"][name] = {"tok_s": statistics.median(g["n"] / g["wall_s"] for g in got),
                              "n": got[0]["n"], "acceptance": (sum(g["accepted"] for g in got) / drafted
                                                               if drafted else None),
                              # greedy text equal to its own library's plain decoding, every round
                              "as_plain": all(g["text"] == own_plain for g in got),
                              "as_llamacore_plain": all(g["text"] == texts["llamacore plain"] for g in got)}
    def paired(a: str, b: str) -> float | None:
        return paired_ratio(*([g["n"] / g["wall_s"] for g in samples[side]] for side in (a, b)))

    out["speedup"] = {name: paired(name, name.rsplit(" ", 1)[0] + " plain") for name in samples}
    if lcp_env is not None:
        out["llamacore/llama-cpp-python"] = {m: paired(f"llamacore {m}", f"llama-cpp-python {m}")
                                             for m in ("plain", "lookup")}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mid")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n-gen", type=int, default=160)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--draft-dtype", default="auto")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    target, copy = ensure_model(args.model, "f16"), copy_model(args.model)
    draft, note = draft_model(args.model, args.draft_dtype)
    with tempfile.TemporaryDirectory() as tmp:
        lcp_env = lcp_environment(Path(tmp))
        report: dict = {"model": target.name, "copy_model": copy.name, "draft_model": draft.name, "n_gen": args.n_gen,
                        "threads": args.threads, "reps": args.reps, "notes": [note] if note else []}
        if lcp_env is None:
            report["notes"].append("llama-cpp-python's sdist is not cached: its sides are left out")
        texts = prompts(target, args.threads, args.n_gen)
        copy_texts = prompts(copy, args.threads, args.n_gen)
        sibling, sibling_draft = sibling_pair(args.model)
        sibling_texts = prompts(sibling, args.threads, args.n_gen)
        report["workloads"] = {
            "rewrite": run_workload("rewrite", target, draft, texts["rewrite"], args, lcp_env),
            "story": run_workload("story", target, draft, texts["story"], args, lcp_env),
            "rewrite, copy model": run_workload("rewrite, copy model", copy, draft, copy_texts["rewrite"], args,
                                                lcp_env),
            # the draft-model workload: a draft that costs an eighth of the target and mostly agrees
            "rewrite, sibling pair": run_workload("rewrite, sibling pair", sibling, sibling_draft,
                                                  sibling_texts["rewrite"], args, lcp_env),
        }
        report["sibling_draft_model"] = sibling_draft.name
    show(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return report


def show(report: dict) -> None:
    print(f"model {report['model']}, draft {report['draft_model']}, {report['n_gen']} tokens, "
          f"{report['threads']} threads, medians of {report['reps']}")
    for w, r in report["workloads"].items():
        print(f"\n{w} ({r['prompt_tokens']} prompt tokens)")
        for name, s in r["sides"].items():
            acc = f", acceptance {s['acceptance']:.2f}" if s["acceptance"] is not None else ""
            same = "" if s["as_plain"] else " (text differs from its plain decoding)"
            print(f"  {name:26s} {s['tok_s']:7.1f} tok/s  x{r['speedup'][name]:.2f} of plain{acc}{same}")
        for m, x in r.get("llamacore/llama-cpp-python", {}).items():
            print(f"  llamacore/llama-cpp-python {m}: {x:.3f}")
    for n in report["notes"]:
        print("note:", n)


if __name__ == "__main__":
    main()
