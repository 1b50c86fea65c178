"""Run every benchmark in one go and write a results JSON, a markdown report and plots.

``python -m benchmarks`` (or ``python benchmarks/run.py``) builds llama.cpp's tools and the
benchmark models when missing, then runs each case side by side with its peers (llama.cpp's own
tools built from the same vendored tree; llama-cpp-python where installed) and writes
``<out>/<date>-<machine>.json`` with ``.md`` and ``.png`` files next to it (``-quick`` is appended
in quick mode). A case that fails is recorded with its error and the others still run.

With ``--only`` and ``--merge``, the selected cases are rerun into this machine's latest report
(today's, else its most recent; the other cases are kept, with a note saying which cases ran at
which commit), written under today's name.

Usage: python -m benchmarks [--quick] [--only case,case [--merge]] [--out DIR] [--threads N]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import bench_attention
import bench_core
import bench_isolation
import bench_llama_speculative
import bench_llm
import bench_load
import bench_lora_switch
import bench_mixed_lora
import bench_prefix
import bench_rpc
import bench_server
import bench_speculative
import bench_vision
import machine
import report
import servers
import speculative_models
from models import ensure_image, ensure_loras, ensure_model, ensure_projector
from peer_tools import ROOT, ensure_tool

import llamacore

RESULTS = Path(__file__).resolve().parent / "results"

# What each mode runs. Quick: small models and single rounds, under 5 minutes on 2 cores.
MODES = {
    "quick": {"core_models": ["tiny-f16", "small-f16"], "core_reps": 2, "core_runs": 3, "idle_wait": 2,
              "llm_models": "tiny,small", "llm_reps": 1, "llm_runs": 2, "attention_models": "small-f16",
              "switch_model": "small", "switch_reps": 3, "load_model": "small", "load_reps": 3, "server_model": "small",
              "server_args": ["--clients", "1,4,8,16", "--reps", "1", "--retries", "0"],
              "mixed_args": ["--ranks", "8", "--adapters", "1,4,8", "--clients", "8", "--reps", "1", "--retries", "0"],
              "mixed_q4_model": "small",
              "prefix_args": ["--clients", "8", "--prefix", "1500", "--reps", "1"],
              "isolation_args": ["--reps", "1", "--load-reps", "2", "--retries", "0"],
              "rpc_args": ["--reps", "1"], "vision_args": ["--reps", "3"],
              "spec_model": "small",
              "spec_args": ["--reps", "1", "--n-gen", "96", "--retries", "0", "--groups", "random,copy,sibling"]},
    "full": {"core_models": [f"{s}-{d}" for s in ("small", "mid") for d in ("f16", "q8_0", "q4_0")],
             "core_reps": 9, "core_runs": 5, "idle_wait": 30,     # 9 rounds: targets within 2%, noisy machines
             "core_control": True,  # llama-bench against itself in each round: the spread of identical sides
             "llm_models": "tiny,small,mid,tiny-q4_0,small-q4_0,mid-q4_0", "attention_models": "small-f16,mid-q4_0",
             "llm_reps": 7, "llm_runs": 3, "switch_model": "small", "switch_reps": 10,
             "load_model": "mid", "load_reps": 5, "server_model": "small",
             "server_args": ["--clients", "1,4,8,16", "--reps", "7"],
             "mixed_args": ["--ranks", "8,64", "--adapters", "1,2,4,8", "--clients", "8,16", "--reps", "12"],
             "mixed_q4_model": "mid",
             "prefix_args": ["--clients", "8", "--prefix", "1500", "--reps", "3"],
             "isolation_args": ["--reps", "31", "--load-reps", "5"],
             "rpc_args": ["--reps", "3"], "vision_args": ["--reps", "15"],
             "spec_model": "mid", "spec_args": ["--reps", "5", "--n-gen", "160"]},
}


def _core(m: dict, threads: int, workdir: Path) -> dict:
    out = {}
    for label in m["core_models"]:
        size, dtype = label.split("-")
        out[label] = bench_core.main(["--model", size, "--dtype", dtype, "--threads", str(threads),
                                      "--reps", str(m["core_reps"]), "--runs", str(m["core_runs"]),
                                      "--idle-wait", str(m["idle_wait"]),
                                      *(["--control"] if m.get("core_control") else [])])
    return out


def _attention(m: dict, threads: int, workdir: Path) -> dict:
    return bench_attention.main(["--models", m["attention_models"], "--served", m["attention_models"].split(",")[-1],
                                 "--threads", str(threads), "--workdir", str(workdir),
                                 "--reps", str(m["llm_reps"]), "--runs", str(m["llm_runs"])])


def _llm(m: dict, threads: int, workdir: Path) -> dict:
    return bench_llm.main(["--models", m["llm_models"], "--threads", str(threads),
                           "--reps", str(m["llm_reps"]), "--runs", str(m["llm_runs"])])


def _load_case(name: str):
    def case(m: dict, threads: int, workdir: Path) -> dict:
        return bench_load.run(m["load_model"], threads, m["load_reps"], workdir, cases=(name,))[name]
    return case


def _lora_switch(m: dict, threads: int, workdir: Path) -> dict:
    return bench_lora_switch.run(m["switch_model"], threads, m["switch_reps"], workdir)


def _server(m: dict, threads: int, workdir: Path) -> dict:
    args = ["--model", m["server_model"], "--threads", str(threads), "--workdir", str(workdir),
            "--idle-wait", str(min(m["idle_wait"], 10)), *m["server_args"]]
    return bench_server.main(args)


def _mixed_lora(model: str, dtype: str):
    def case(m: dict, threads: int, workdir: Path) -> dict:
        return bench_mixed_lora.main(["--model", m[model], "--dtype", dtype, "--threads", str(threads),
                                      "--workdir", str(workdir), "--idle-wait", str(min(m["idle_wait"], 10)),
                                      *m["mixed_args"]])
    return case


def _prefix(m: dict, threads: int, workdir: Path) -> dict:
    return bench_prefix.main(["--model", m["server_model"], "--threads", str(threads), "--workdir", str(workdir),
                              *m["prefix_args"]])


def _isolation(m: dict, threads: int, workdir: Path) -> dict:
    return bench_isolation.main(["--model", m["server_model"], "--threads", str(threads), "--workdir", str(workdir),
                                 "--idle-wait", str(min(m["idle_wait"], 10)), *m["isolation_args"]])


def _rpc(m: dict, threads: int, workdir: Path) -> dict:
    return bench_rpc.main(["--model", m["server_model"], "--threads", str(threads), "--workdir", str(workdir),
                           "--idle-wait", str(min(m["idle_wait"], 10)), *m["rpc_args"]])


def _vision(m: dict, threads: int, workdir: Path) -> dict:
    return bench_vision.main(["--model", m["server_model"], "--threads", str(threads),
                              "--idle-wait", str(min(m["idle_wait"], 10)), *m["vision_args"]])


def _speculative(m: dict, threads: int, workdir: Path) -> dict:
    return bench_speculative.main(["--model", m["spec_model"], "--threads", str(threads), "--workdir", str(workdir),
                                   "--idle-wait", str(min(m["idle_wait"], 10)), *m["spec_args"]])


def _llama_speculative(m: dict, threads: int, workdir: Path) -> dict:
    return bench_llama_speculative.main(["--model", m["spec_model"], "--threads", str(threads),
                                         *_without(_without(m["spec_args"], "--retries"), "--groups")])


def _spec_groups(args: list[str]) -> list[str]:
    """The speculative case's --groups in `args` (every group of bench_speculative when absent)."""
    return args[args.index("--groups") + 1].split(",") if "--groups" in args else list(bench_speculative.GROUPS)


def _without(args: list[str], option: str) -> list[str]:
    """`args` without `option` and its value."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == option:
            skip = True
        else:
            out.append(a)
    return out


def _bandwidth(m: dict, threads: int, workdir: Path) -> dict:
    return machine.memory_bandwidth(threads)


CASES = {  # name -> (what it measures, runner)
    "bandwidth": ("memory bandwidth (bound for generation)", _bandwidth),
    "core": ("binding pp512/tg128 vs llama-bench", _core),
    "llm": ("Llama.create_completion vs llama-cpp-python and llama-bench tg", _llm),
    "attention": ("after a long context: flash attention on, off and for prompts only vs llama-bench", _attention),
    "lora_switch": ("LoRA switch latency", _lora_switch),
    "model_switch": ("model switch latency (max_loaded_models: 1)", _load_case("model_switch")),
    "cold_load": ("cold load time", _load_case("cold_load")),
    "rss_idle": ("server RSS after idle unload vs before load", _load_case("rss_idle")),
    "server": ("concurrency 1/4/8/16 and mixed-LoRA vs llama-server, llama-cpp-python server", _server),
    "mixed_lora": ("many adapters of one base in one batch, by adapter count and rank, vs llama-server",
                   _mixed_lora("server_model", "f16")),
    "mixed_lora_q4": ("the same on a quantized base, where batching gains most (memory-bound decode)",
                      _mixed_lora("mixed_q4_model", "q4_0")),
    "shared_prefix": ("8 clients with one long system prompt: TTFT vs no sharing and llama-server", _prefix),
    "isolation": ("isolation: process vs thread (throughput 1/8 clients, TTFT, cold load, RSS)", _isolation),
    "rpc": ("a model split across 2 loopback RPC workers: vs llama-server --rpc and vs local", _rpc),
    "vision": ("image prompt processing (encode + decode of one image) vs llama-mtmd-cli", _vision),
    "speculative": ("speculative decoding at 1 client (prompt lookup, draft model) vs llama-server", _speculative),
    "llama_speculative": ("speculative decoding in Llama (prompt lookup, draft model) vs llama-cpp-python's Llama",
                          _llama_speculative),
}


def prepare(m: dict, cases: list[str]) -> None:
    """Build the peer tools and generate every model the selected cases need, before any timing."""
    for tool in ("llama-bench", "llama-server", "llama-quantize"):
        ensure_tool(tool)
    labels = set(m["core_models"]) if "core" in cases else set()
    labels |= {s if "-" in s else f"{s}-f16" for s in m["llm_models"].split(",")} if "llm" in cases else set()
    labels |= set(m["attention_models"].split(",")) if "attention" in cases else set()
    labels |= ({f"{m['load_model']}-f16", f"{m['load_model']}-q8_0"}
               if {"model_switch", "cold_load", "rss_idle"} & set(cases) else set())
    labels |= {f"{m['switch_model']}-f16"} if "lora_switch" in cases else set()
    labels |= {f"{m['server_model']}-f16"} if {"server", "isolation", "rpc", "mixed_lora"} & set(cases) else set()
    labels |= {f"{m['mixed_q4_model']}-q4_0"} if "mixed_lora_q4" in cases else set()
    for label in sorted(labels):
        ensure_model(*label.split("-"))
    for size in {m["switch_model"]} if "lora_switch" in cases else set():
        ensure_loras(size)
    if "server" in cases:
        ensure_loras(m["server_model"])
    if {"speculative", "llama_speculative"} & set(cases):
        speculative_models.prepare(m["spec_model"], deep="deep" in _spec_groups(m["spec_args"]))
    if "vision" in cases:
        ensure_tool("llama-mtmd-cli")
        ensure_model(m["server_model"])
        ensure_projector(m["server_model"])
        ensure_image()


def roofline(results: dict) -> dict:
    """Our tg128 of every core model as a fraction of bandwidth / bytes per token."""
    bw = results["cases"].get("bandwidth", {}).get("result")
    core = results["cases"].get("core", {}).get("result")
    if not bw or not core:
        return {}
    out = {}
    for label, rep in core.items():
        tg = next((v.get("quiet") or v["all"] for k, v in rep["results"].items() if k.startswith("tg")), None)
        out[label] = machine.roofline(bw["read_gbs"], Path(rep["model"]), tg and tg["ours_median"])
        out[label]["peer_tg_tok_s"] = tg and tg["peer_median"]
    return out


def _git() -> dict:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def _versions() -> dict:
    out = {"llama.cpp": llamacore.llama_cpp_version()}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        out["llama-cpp-python"] = importlib.metadata.version("llama-cpp-python")
    return out


def merged(base: dict, rerun: dict) -> dict:
    """`base` with the cases of `rerun` replaced, and a note of when and where they ran (the CPU too,
    when it is not the base's: machines of one id, cores and memory, may differ in it)."""
    out = dict(base)
    out["cases"] = {**base["cases"], **rerun["cases"]}
    cpu = rerun["machine"]["cpu"]
    elsewhere = f" on another CPU ({cpu})" if cpu != base.get("machine", {}).get("cpu", cpu) else ""
    out["notes"] = [*base["notes"], f"cases {', '.join(rerun['cases'])} rerun {rerun['date']}{elsewhere} at commit "
                                    f"{rerun['git']['commit'][:10]}{' (dirty)' if rerun['git']['dirty'] else ''} "
                                    f"with `{rerun['command']}`"]
    out["roofline"] = base.get("roofline", {})      # the core cases it comes from were not rerun
    return out


def latest_report(folder: Path, stem: str) -> Path | None:
    """The report --merge builds on: today's of this machine, else its most recent one."""
    today = folder / f"{stem}.json"
    if today.exists():
        return today
    machine_id = stem.split("-", 3)[3]                     # <yyyy>-<mm>-<dd>-<machine id>[-quick]
    found = sorted(p for p in folder.glob(f"????-??-??-{machine_id}.json") if p.stem.endswith(machine_id))
    return found[-1] if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small models, single rounds (under 5 minutes)")
    ap.add_argument("--only", help=f"comma-separated cases out of: {', '.join(CASES)}")
    ap.add_argument("--merge", action="store_true",
                    help="with --only: replace those cases in this machine's latest report, keep the rest")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON, report and plots go")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.only.split(",")] if args.only else list(CASES)
    if unknown := [c for c in cases if c not in CASES]:
        ap.error(f"unknown case(s) {', '.join(unknown)}; expected some of {', '.join(CASES)}")
    if args.merge and not args.only:
        ap.error("--merge needs --only (the cases to rerun)")
    mode = "quick" if args.quick else "full"
    m = MODES[mode]
    started = time.time()
    date = dt.datetime.now(dt.UTC)
    stem = f"{date:%Y-%m-%d}-{machine.machine_id()}" + ("-quick" if args.quick else "")
    results: dict = {"date": date.isoformat(timespec="seconds"), "mode": mode, "threads": args.threads,
                     "command": "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:]),
                     "machine": machine.machine_info(), "versions": _versions(), "git": _git(),
                     "settings": m, "cases": {}, "notes": [], "load_average": {"start": os.getloadavg()[0]}}
    try:
        import llama_cpp.server.app  # noqa: F401 -- the same check servers.llama_cpp_python makes
    except Exception as exc:  # noqa: BLE001
        results["notes"].append(f"llama-cpp-python's server is not available ({type(exc).__name__}: {exc}); "
                                "install llama-cpp-python[server] to compare with it")
    if "llama-cpp-python" not in results["versions"]:
        results["notes"].append("llama-cpp-python is not installed: its columns are skipped")
    prepare(m, cases)
    # rss_idle first: the cases run in this process page in llama.cpp's code here too, and a code page
    # that two processes map is one the server's release_code_pages cannot hand back after an unload
    cases.sort(key=lambda name: name != "rss_idle")
    workdir = Path(tempfile.mkdtemp(prefix="benchmarks."))
    for name in cases:
        print(f"\n=== {name}: {CASES[name][0]} ===", flush=True)
        t0 = time.time()
        entry: dict = {"title": CASES[name][0]}
        try:
            entry["result"] = CASES[name][1](m, args.threads, workdir / name)
        except Exception as exc:  # noqa: BLE001 -- record it, run the other cases
            traceback.print_exc()
            entry["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            servers.stop_all()
        entry["seconds"] = round(time.time() - t0, 1)
        results["cases"][name] = entry
    results["load_average"]["end"] = os.getloadavg()[0]
    results["roofline"] = roofline(results)
    results["seconds"] = elapsed = round(time.time() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{stem}.json"
    if args.merge and (base := latest_report(args.out, stem)) is not None:
        results = merged(json.loads(base.read_text()), results)
    path.write_text(json.dumps(results, indent=1, default=str))
    md = report.write(results, path)
    if not args.quick and (not args.only or args.merge) and args.out.resolve() == RESULTS:
        report.update_readme(results, path)       # a full run into results/ is the new reference
    print(f"\nwrote {path} and {md} in {elapsed:.0f}s")     # a merged report keeps the full run's time
    failed = [n for n, e in results["cases"].items() if "error" in e]
    if failed:
        print(f"failed cases: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
