"""Speculative decoding at 1 client: prompt lookup and a draft model, llamaserve vs llama-server.

Six servers, each with one slot (``parallel: 1`` / ``-np 1``) on the same target model: llamaserve
plain, with ``speculative: {draft_model: ngram, n_draft: 8, ngram_size: 3}`` and with
``speculative: {draft_model: DRAFT, n_draft: 8, p_min: 0.0}``; llama-server plain, with
``--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8`` (its prompt
lookup: the last 3 tokens looked up in the history, up to 8 drafted) and with ``-md DRAFT --spec-type
draft-simple --spec-draft-n-max 8 --spec-draft-n-min 0 --spec-draft-p-min 0.0`` (this llama.cpp removed
``--draft-max``/``--draft-min``, and ``-md`` without ``--spec-type`` loads the draft but never drafts).
One client sends non-streamed ``/completion`` requests (both servers' native route): the prompt as token
ids, ``n_predict`` --n-gen, temperature 0, ``ignore_eos`` (every answer has the same length). Generation
tokens/s per request = (predicted_n - 1) / predicted_ms of the server's own llama.cpp-style ``timings``
(the first token comes from the prompt's batch, so both servers are counted the same way). Each rep sends
every workload to every side, the side order rotating; tokens/s are medians over reps, and each ratio
(a mode over plain, ours over llama-server) is the median over reps of the two sides' ratio in that
rep, which cancels this machine's slow drifts (speculative_summary.paired). A request during which other
processes took more than --noise of the CPUs is rerun (--retries). Greedy answers must not depend on
speculation: every side's tokens are compared with the plain llamaserve answer of the same workload.

Acceptance (accepted / drafted tokens): llamaserve's ``/metrics`` gauges
``llamaserve_speculative_draft_tokens`` and ``..._accepted_tokens`` before and after each request;
llama-server's ``timings.draft_n`` and ``draft_n_accepted``.

Workloads. Random-weight models do not copy their context as trained models do (measured here: on
"small" and "mid" greedy answers do not fall into loops within 400 tokens, and a text in the prompt is
not repeated), so two target models:

* ``random``: the --model f16 file. "rewrite": a prompt asking to rewrite a text with small changes,
  the text being the model's own greedy answer to the instruction (every 24th token changed), then
  "Rewritten text:" ending with the instruction's last token; "story": a short prompt that repeats
  nothing. Prompt lookup finds little here (reported as measured); the draft model (the same random
  weights quantized) agrees with the target on most tokens, so the draft-model figures are meaningful.
* ``copy``: the same f16 file with every ``attn_output`` weight zeroed (the same shapes, bytes and
  arithmetic, so the same speed per token): each next token then depends on the last token only, so
  the greedy answer to the "rewrite" prompt is the text in the prompt, as a trained model rewriting a
  text copies most of it. This is the prompt-lookup workload; plain and prompt lookup only.
* ``sibling``: a target and a draft made to agree as a trained family does (speculative_models.py:
  the target is the f16 model with the residual contributions of blocks 1.. damped, the draft its
  block 0 alone in pure q5_0, about an eighth of a target token's bytes; the draft's greedy token
  equals the target's on about 80% of tokens). Its draft costs a quarter of a target token; plain
  and draft.
* ``deep``: the same construction from the "deep" model (the "mid" blocks, 32 of them): the draft
  (one block) agrees on about 80% of tokens and costs about a twentieth of a target token, as a
  trained draft does against its target. This is the draft-model workload; plain and draft.

On ``random`` the draft model (the target's own weights quantized, below) costs more than half a
target step and agrees on about half the tokens: drafting cannot pay there, and the case shows
that it backs off (tokens/s must stay >= 0.95x of plain).

The draft model: ``--draft-dtype`` (default q4_0). On some Intel AMX CPUs ggml's AMX path for
q4_0/q8_0/K-quant weights crashes (SIGSEGV in ggml_backend_amx_mul_mat; llama.cpp issue 20824).
llamacore leaves the AMX buffers off for quantized models on AMX CPUs and the peers get the same
(peer_tools.repack: llama-server gets it for both files when either is quantized);
"auto" still probes the q4_0 file in a subprocess first and falls back to q5_0 with every tensor
q5_0 (``llama-quantize --pure``: no AMX kernel for it), with a note. Both servers get the same
draft file.

Costs (speculative_cost.py): a draft token's against a target token's (llama-bench tg32 of each), and
a k-row verify batch's against a one-row decode on each sibling target, v(k), measured in one
process; with the draft's teacher-forced agreement with the target's plain answer (the per-token
acceptance) they bound what drafting can gain (reported as notes).

Targets (issue; reported, never asserted): rewrite prompt, prompt lookup >= 1.8x the tokens/s of
plain decoding (copy model), a draft model >= 1.5x (deep sibling pair); never below 0.95x where
drafting cannot pay or pays little (a non-repetitive prompt, a text the model does not copy, an
expensive draft: the quantized target, the sibling pair's draft at a quarter of a target token).

Usage: python benchmarks/bench_speculative.py [--model small|mid] [--reps 5] [--n-gen 160]
       [--draft-dtype auto|q4_0|q8_0|q5_0] [--groups random,copy,sibling,deep] [--threads N] [--idle-wait S]
       [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import machine
import servers
from models import SPECS, ensure_model  # also puts the checkout on sys.path
from peer_tools import cpu_busy, ensure_tool
from server_rounds import CpuMeter
from speculative_cost import agreement, draft_bound, draft_cost, verify_cost
from speculative_models import DEEP, copy_model, draft_model, sibling_pair
from speculative_summary import MODES, percent, ratios, show, summarize, targets

N_DRAFT, NGRAM_SIZE, P_MIN = 8, 3, 0.0
N_CTX = 1024
CHANGE_EVERY = 24                   # "small changes": every 24th token of the text in the rewrite prompt
INSTRUCTION = "Rewrite the text below with small changes: keep every sentence, change only the names.\n\nText:"
REWRITE_TAIL = "\n\nRewritten text:"
STORY = "Write a short story about a lighthouse keeper who finds a strange map."
GROUPS = {"random": {"workloads": ("rewrite", "story"), "modes": MODES},
          "copy": {"workloads": ("rewrite",), "modes": ("plain", "ngram")},
          "sibling": {"workloads": ("rewrite", "story"), "modes": ("plain", "draft")},
          "deep": {"workloads": ("rewrite", "story"), "modes": ("plain", "draft")}}


def _log(msg: str) -> None:
    print(f"[speculative] {msg}", file=sys.stderr, flush=True)


# -- servers -----------------------------------------------------------------------------------


def peer_flags() -> dict[str, list[str] | None]:
    """llama-server's flags for prompt lookup and a draft model in this version (None: not supported)."""
    text = subprocess.run([str(ensure_tool("llama-server")), "--help"], capture_output=True, text=True,
                          check=False).stdout
    ngram = (["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(NGRAM_SIZE),
              "--spec-ngram-simple-size-m", str(N_DRAFT)] if "ngram-simple" in text else None)
    if "--spec-draft-n-max" in text:        # -md alone loads the draft model but drafts nothing: name the type
        draft = ["--spec-type", "draft-simple", "--spec-draft-n-max", str(N_DRAFT), "--spec-draft-n-min", "0",
                 "--spec-draft-p-min", str(P_MIN)]
    else:                                   # older llama.cpp: -md drafts with these
        draft = ["--draft-max", str(N_DRAFT), "--draft-min", "0", "--draft-p-min", str(P_MIN)]
    return {"ngram": ngram, "draft": draft}


def make_servers(group: str, model: Path, draft: Path, workdir: Path, threads: int,
                 flags: dict) -> dict[str, servers.Server]:
    """side name ("llamaserve-ngram", ...) -> server, for the group's modes."""
    spec = {"ngram": {"draft_model": "ngram", "n_draft": N_DRAFT, "ngram_size": NGRAM_SIZE},
            "draft": {"draft_model": str(draft), "n_draft": N_DRAFT, "p_min": P_MIN}}
    out = {}
    for mode in GROUPS[group]["modes"]:
        defaults = {"speculative": spec[mode]} if mode != "plain" else None
        out[f"llamaserve-{mode}"] = servers.llamaserve(model, workdir, threads=threads, parallel=1, n_ctx=N_CTX,
                                                       name=f"llamaserve-{mode}-{group}", defaults=defaults)
        if mode != "plain" and flags[mode] is None:
            continue
        extra = {"plain": [], "ngram": flags["ngram"], "draft": ["-md", str(draft), *(flags["draft"] or [])]}[mode]
        out[f"llama-server-{mode}"] = servers.llama_server(model, workdir, threads=threads, parallel=1, n_ctx=N_CTX,
                                                           name=f"llama-server-{mode}-{group}", extra_args=extra)
    return out


_METRIC = re.compile(r'^llamaserve_speculative_(draft|accepted)_tokens\{model="base"\} (\S+)$', re.M)


def spec_counts(http: httpx.Client, server: servers.Server) -> tuple[float, float]:
    """llamaserve's (drafted, accepted) totals of model "base"; (0, 0) before any draft."""
    got = dict(_METRIC.findall(http.get(server.base_url + "/metrics").text))
    return float(got.get("draft", 0)), float(got.get("accepted", 0))


def complete(http: httpx.Client, server: servers.Server, prompt: list[int], n_gen: int) -> dict:
    """One non-streamed /completion: generation tokens/s from the server's timings, its tokens, drafts."""
    ours = server.name.startswith("llamaserve")
    before = spec_counts(http, server) if ours else (0.0, 0.0)
    body = {"model": "base", "prompt": prompt, "n_predict": n_gen, "temperature": 0, "ignore_eos": True,
            "return_tokens": True, "cache_prompt": True}
    started = time.perf_counter()
    resp = http.post(server.base_url + "/completion", json=body)
    wall = time.perf_counter() - started
    if resp.status_code != 200:
        raise RuntimeError(f"{server.name}: HTTP {resp.status_code} {resp.text[:300]}\n{server.log_tail()}")
    data = resp.json()
    t = data["timings"]
    n, ms = int(t["predicted_n"]), float(t["predicted_ms"])
    if ours:
        after = spec_counts(http, server)
        drafted, accepted = after[0] - before[0], after[1] - before[1]
    else:
        drafted, accepted = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
    return {"tokens": data.get("tokens") or [], "n": n, "predicted_ms": ms,
            "tok_s": 1e3 * (n - 1) / ms if n > 1 and ms > 0 else None,
            "reported_tok_s": t.get("predicted_per_second"), "prompt_ms": t.get("prompt_ms"), "wall_s": wall,
            "drafted": drafted, "accepted": accepted}


# -- prompts -----------------------------------------------------------------------------------


def prompts(model: Path, http: httpx.Client, plain: servers.Server, n_gen: int) -> dict[str, list[int]]:
    """Token-id prompts: "rewrite" (the model's own answer to INSTRUCTION, lightly changed, to rewrite)
    and "story" (nothing repeats)."""
    from llamacore import Model

    vocab = Model(model, vocab_only=True)
    head = vocab.tokenize(INSTRUCTION, add_special=True)
    text = complete(http, plain, head, n_gen + 8)["tokens"]
    change = vocab.tokenize(" Anna", add_special=False)[-1]
    text = [change if i % CHANGE_EVERY == CHANGE_EVERY // 2 else tok for i, tok in enumerate(text)]
    tail = vocab.tokenize(REWRITE_TAIL, add_special=False)
    tail[-1] = head[-1]                   # the answer starts after the same token as the text did
    return {"rewrite": head + text + tail, "story": vocab.tokenize(STORY, add_special=True)}


# -- rounds ------------------------------------------------------------------------------------


def wait_idle(limit: float) -> None:
    deadline = time.monotonic() + limit
    while limit > 0 and cpu_busy(0.5) > 0.1 and time.monotonic() < deadline:
        pass


def run_group(group: str, model: Path, draft: Path, args, flags: dict,
              workdir: Path) -> tuple[list[dict], dict[str, list[int]]]:
    """The group's requests, and its workloads' prompts."""
    sides = make_servers(group, model, draft, workdir, args.threads, flags)
    rounds: list[dict] = []
    with servers.ServerSet() as owned, httpx.Client(timeout=600.0) as http:
        for s in sides.values():
            owned.add(s)
            print(f"started {s.name}: {' '.join(s.cmd)}", flush=True)
        texts = prompts(model, http, sides["llamaserve-plain"], args.n_gen)
        workloads = {w: texts[w] for w in GROUPS[group]["workloads"]}
        for w, p in workloads.items():
            print(f"{group}/{w}: prompt of {len(p)} tokens", flush=True)
            for s in sides.values():                   # untimed: page cache, prompt cache, draft context
                complete(http, s, p, args.n_gen)
        names = list(sides)
        k = 0
        for rep in range(args.reps):
            for w, p in workloads.items():
                order = names[k % len(names):] + names[:k % len(names)]
                k += 1
                for side in order:
                    server = sides[side]
                    for attempt in range(args.retries + 1):
                        wait_idle(args.idle_wait)
                        with CpuMeter(server) as cpu:
                            r = complete(http, server, p, args.n_gen)
                        noisy = cpu.result["other_frac"] > args.noise and cpu.result["other_cpu_s"] > 0.05
                        r.update(group=group, workload=w, side=side, rep=rep, attempt=attempt, cpu=cpu.result,
                                 discarded=noisy and attempt < args.retries)
                        rounds.append(r)
                        _print(r)
                        if not r["discarded"]:
                            break
    return rounds, workloads


def _print(r: dict) -> None:
    acc = f"  accepted {r['accepted']:.0f}/{r['drafted']:.0f}" if r["drafted"] else ""
    note = "  -> discarded (other processes were busy), retrying" if r["discarded"] else ""
    print(f"  rep {r['rep']} {r['group']}/{r['workload']:<8} {r['side']:<20} "
          f"{r['tok_s'] or 0:7.1f} tok/s ({r['n']} tokens){acc}  other cpu "
          f"{r['cpu']['other_frac']:.0%}{note}", flush=True)


def main(argv: list[str] | None = None) -> dict:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mid", choices=sorted(SPECS), help="the target model (f16)")
    ap.add_argument("--draft-dtype", default="auto", choices=("auto", "q4_0", "q8_0", "q5_0"),
                    help="the draft model: the target's weights quantized (auto: q4_0, else q5_0 where q4_0 crashes)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n-gen", type=int, default=160, help="tokens per answer (ignore_eos)")
    ap.add_argument("--idle-wait", type=float, default=10.0, help="max seconds to wait for idle CPUs per request")
    ap.add_argument("--noise", type=float, default=0.05,
                    help="rerun a request during which other processes used more than this fraction of the CPUs")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--groups", default=",".join(GROUPS), help="target models to run (comma-separated: "
                    + ", ".join(GROUPS) + ")")
    ap.add_argument("--workdir", help="where server configs and logs go (default: a new temp dir)")
    ap.add_argument("--json", type=Path, help="write the report with every request here")
    args = ap.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench_speculative."))
    workdir.mkdir(parents=True, exist_ok=True)
    groups = args.groups.split(",")
    if unknown := sorted(set(groups) - set(GROUPS)):
        ap.error(f"unknown groups {unknown}; expected some of {', '.join(GROUPS)}")
    target, copy = ensure_model(args.model, "f16"), copy_model(args.model)
    draft, draft_note = draft_model(args.model, args.draft_dtype)
    flags = peer_flags()
    notes = [f"measured on {machine.machine_info()['cpu']}, {os.cpu_count()} CPUs, {args.threads} threads"]
    notes += [draft_note] if draft_note else []
    if flags["ngram"] is None:
        notes.append("this llama-server has no --spec-type ngram-simple: its prompt-lookup side is skipped")
    pairs = {"random": (target, draft), "copy": (copy, draft)}
    pairs |= {"sibling": sibling_pair(args.model)} if "sibling" in groups else {}
    pairs |= {"deep": sibling_pair(DEEP)} if "deep" in groups else {}
    rounds, texts = [], {}
    for group, (model, group_draft) in pairs.items():
        if group in groups:
            got, texts[group] = run_group(group, model, group_draft, args, flags, workdir)
            rounds += got
    summary = summarize(rounds)
    rat = ratios(summary)
    tgt = targets(rat)
    different = [f"{key} {side} (from token {s['first_difference']})" for key, by in summary.items()
                 for side, s in by.items() if not s["same_tokens_as_plain"]]
    acc = {key: {side: s["acceptance"] for side, s in by.items() if s["acceptance"] is not None}
           for key, by in summary.items()}
    notes.append("random-weight models do not copy their context: on the random model prompt lookup drafts "
                 f"little (acceptance {percent(acc.get('random/rewrite', {}).get('llamaserve-ngram'))} on the rewrite "
                 "prompt); the copy model (attention outputs zeroed) repeats the text of the rewrite prompt, as a "
                 "trained model rewriting a text would")
    notes.append("greedy answers " + ("equal plain decoding on every side" if not different else
                                      "differ from plain llamaserve's on: " + ", ".join(different) +
                                      " (random weights leave near-ties between the top two logits, which "
                                      "the different batch shapes of verification can flip)"))

    def idle() -> None:
        wait_idle(args.idle_wait)

    costs: dict[str, dict] = {}
    if "random" in groups:
        costs["random"] = cost = draft_cost(target, draft, args.threads, idle)
        notes.append(f"draft cost: llama-bench tg32 {cost['target_tok_s']:.1f} tok/s for the target, "
                     f"{cost['draft_tok_s']:.1f} for its quantized draft ({draft.name}): a draft token costs "
                     f"{cost['ratio']:.2f} of a target token, so drafting cannot pay there and must back off")
    verify: dict[str, dict] = {}
    agree: dict[str, float] = {}
    for group in ("sibling", "deep"):
        if group not in texts:
            continue
        pair_target, pair_draft = pairs[group]
        costs[group] = cost = draft_cost(pair_target, pair_draft, args.threads, idle)
        notes.append(f"{group} pair: llama-bench tg32 {cost['target_tok_s']:.1f} tok/s for the target, "
                     f"{cost['draft_tok_s']:.1f} for the draft ({pair_draft.name}): a draft token costs "
                     f"{cost['ratio']:.2f} of a target token")
        for workload, prompt in texts[group].items():
            key = f"{group}/{workload}"
            depth = len(prompt) + args.n_gen // 2          # a verify batch's mean depth in the answer
            verify[key] = v = verify_cost(pair_target, args.threads, depth, rows=8, rounds=40)
            notes.append(f"verify cost ({key}, in one process, {v['rounds']} rounds): a batch of k rows with "
                         f"logits after {depth} tokens costs " + ", ".join(f"{x:.2f}" for x in v["v"].values())
                         + f" of one row for k = 1..{len(v['v'])} ({v['ms'][1]:.2f} ms for one)")
            answer = next(r["tokens"] for r in rounds if r["group"] == group and r["workload"] == workload
                          and r["side"] == "llamaserve-plain")
            agree[key] = alpha = agreement(pair_draft, prompt, answer, args.threads)
            gain, n = draft_bound(alpha, cost["ratio"], v["v"])
            notes.append(f"draft bound, {key}: the draft's greedy token equals the target's on "
                         f"{percent(alpha)} of the plain answer's tokens (teacher-forced); at that acceptance per "
                         f"token and a draft token's cost {cost['ratio']:.2f}, drafting gains at most {gain:.2f}x"
                         + (f" (drafting {n} a step)" if n else " (any draft length loses)")
                         + ", if each draft token is accepted independently (speculative_cost.py)")
    report = {"model": str(target), "copy_model": str(copy), "draft_model": str(draft),
              "pairs": {group: {"target": str(m), "draft": str(d)} for group, (m, d) in pairs.items()
                        if group in ("sibling", "deep")},
              "draft_costs": costs, "verify_costs": verify, "agreement": agree,
              "settings": {"threads": args.threads, "reps": args.reps, "n_gen": args.n_gen, "n_draft": N_DRAFT,
                           "ngram_size": NGRAM_SIZE, "p_min": P_MIN, "n_ctx": N_CTX, "change_every": CHANGE_EVERY,
                           "llama_server_flags": flags},
              "summary": summary, "ratios": rat, "acceptance": acc, "targets": tgt, "notes": notes,
              "rounds": [{k: v for k, v in r.items() if k != "tokens"} for r in rounds]}
    show(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    try:
        main()
    finally:
        servers.stop_all()
