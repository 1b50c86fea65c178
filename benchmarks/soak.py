"""Soak: the load-and-faults scenario of tests/llamaserve/models/test_load.py, run for minutes instead of 300 requests.

Starts a real llamaserve process on 127.0.0.1 (two generated base models, three LoRA aliases,
max_loaded_models: 1, so bases are evicted and reloaded all the time) and sends rounds of 100
requests from --clients concurrent clients until --minutes have passed; a quarter of the
requests hang up mid-stream. Every completed answer is checked against the same request's
answer computed alone first (greedy). The server's RSS is sampled every --sample seconds.

Writes DIR/soak.json (figures, RSS samples, per-request timings) and DIR/soak.png (RSS and
requests/s over time) and prints requests/s, outcome counts, 5xx/503 counts and RSS growth.
Exit status 1 when an answer differed from its single-request answer, a request failed or got
a 5xx other than 503 with Retry-After, sequences stayed active, or the server did not exit 0.

With ``--isolation process`` (the default) the models run in worker processes and the RSS is the
server process's own; ``--kill-every N`` SIGKILLs the loaded model's worker after every N
finished requests (streams then end with a model_crashed error event, a documented outcome).

Usage: python benchmarks/soak.py [--minutes 10] [--clients 16] [--out DIR] [--threads N]
       [--sample 2] [--max-tokens 12] [--workdir DIR] [--isolation process|thread] [--kill-every N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "support")]

import load_scenario as scenario  # noqa: E402  (from tests/support/, on sys.path only once the line above ran)
from server import ServerProcess  # noqa: E402  (likewise)

ROUND = 100


class RSSSampler(threading.Thread):
    def __init__(self, pid: int, every: float, t0: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.t0 = pid, every, t0
        self.samples: list[tuple[float, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.samples.append((round(time.monotonic() - self.t0, 2), scenario.rss_kib(self.pid)))
            except (OSError, RuntimeError):
                return
            self.stop_event.wait(self.every)


def rates(done: list[tuple[float, str]], window: float, end: float) -> list[tuple[float, float, float]]:
    """(window end, served requests/s, of which disconnected/s) per whole window of `window` seconds."""
    out = []
    t = window
    while t <= end:
        inside = [k for s, k in done if t - window <= s < t]
        served = sum(k in ("completed", "disconnected") for k in inside)
        out.append((round(t, 1), served / window, inside.count("disconnected") / window))
        t += window
    return out


def rss_thirds(samples: list[tuple[float, int]], elapsed: float) -> dict:
    """Median and max RSS of the first and last third of the run (a sample is taken whichever base is
    loaded, and dips while one is swapped for the other, so single readings are noisy)."""
    first = sorted(k for t, k in samples if t <= elapsed / 3)
    last = sorted(k for t, k in samples if t >= elapsed * 2 / 3)
    med_first, med_last = first[len(first) // 2], last[len(last) // 2]
    return {"rss_median_kib_first_third": med_first, "rss_median_kib_last_third": med_last,
            "rss_max_kib_first_third": first[-1], "rss_max_kib_last_third": last[-1],
            "rss_growth_median_thirds": round((med_last - med_first) / med_first, 4)}


def plot(path: Path, rss: list[tuple[float, int]], per_window: list[tuple[float, float, float]],
         title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    a.plot([t / 60 for t, _ in rss], [k / 1024 for _, k in rss], color="tab:blue")
    a.set_ylabel("server RSS (MiB)")
    a.set_ylim(bottom=0)
    a.grid(alpha=0.3)
    b.plot([t / 60 for t, _, _ in per_window], [r for _, r, _ in per_window], label="served")
    b.plot([t / 60 for t, _, _ in per_window], [d for _, _, d in per_window], label="of which disconnected")
    b.set_ylabel("requests/s")
    b.set_xlabel("minutes")
    b.set_ylim(bottom=0)
    b.grid(alpha=0.3)
    b.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/soak")
    ap.add_argument("--threads", type=int, default=2, help="n_threads of the models")
    ap.add_argument("--sample", type=float, default=2.0, help="seconds between RSS samples")
    ap.add_argument("--max-tokens", type=int, default=scenario.MAX_TOKENS)
    ap.add_argument("--workdir", type=Path, help="where models, config and server log go (default: a temp dir)")
    ap.add_argument("--isolation", choices=("process", "thread"), default="process",
                    help="where the models run: worker processes (the server's default) or server threads")
    ap.add_argument("--kill-every", type=int, metavar="N",
                    help="SIGKILL the loaded model's worker after every N finished requests (process isolation)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="llamaserve-soak-"))
    work.mkdir(parents=True, exist_ok=True)

    models = scenario.write_models(work / "models")
    if args.kill_every and args.isolation != "process":
        ap.error("--kill-every needs --isolation process")
    config = scenario.server_config(models, args.threads, isolation=args.isolation)
    proc = ServerProcess(config, work, name="soak.yaml").start()
    url = proc.base_url
    ok = True
    try:
        refs = scenario.references(url, scenario.every_request(), args.max_tokens)
        before = scenario.metrics(url)
        t0 = time.monotonic()
        sampler = RSSSampler(proc.proc.pid, args.sample, t0)
        sampler.start()
        killer = scenario.WorkerKiller(url, args.kill_every)
        done: list[tuple[float, str]] = []
        outcomes: list[scenario.Outcome] = []
        round_rss: list[int] = []
        r = 0
        while time.monotonic() - t0 < args.minutes * 60:
            jobs = scenario.plan(ROUND, seed=r, start=ROUND * r)
            outcomes += asyncio.run(scenario.run_jobs(
                url, jobs, clients=args.clients, max_tokens=args.max_tokens,
                on_done=lambda o: (done.append((round(time.monotonic() - t0, 3), o.kind)), killer(o))))
            round_rss.append(scenario.rss_kib(proc.proc.pid))
            r += 1
            served = sum(k in ("completed", "disconnected") for _, k in done)
            print(f"  {time.monotonic() - t0:7.1f}s  {len(outcomes)} requests,"
                  f" {served / (time.monotonic() - t0):.1f}/s, RSS {round_rss[-1] / 1024:.1f} MiB", flush=True)
        elapsed = time.monotonic() - t0
        after = scenario.wait_idle(url)
        sampler.stop_event.set()
        sampler.join()
    finally:
        code = proc.stop()
    summary = scenario.judge(outcomes, refs, crashes_allowed=bool(args.kill_every))
    base = round_rss[1] if len(round_rss) > 1 else round_rss[0]
    figures = {
        "minutes": round(elapsed / 60, 2), "clients": args.clients, "max_tokens": args.max_tokens,
        "requests": len(outcomes), "requests_per_s": round(len(outcomes) / elapsed, 2),
        "served_per_s": round(summary.served / elapsed, 2), **summary.as_dict(),
        "refs_with_near_tie": sum(r.tie_at is not None for r in refs.values()), "distinct_requests": len(refs),
        "status_5xx_not_503": sum(v for k, v in summary.statuses.items() if k and k >= 500 and k != 503),
        "status_503": summary.statuses.get(503, 0),
        "evictions": scenario.metric_sum(after, "llamaserve_model_unloads_total", reason="evicted")
                     - scenario.metric_sum(before, "llamaserve_model_unloads_total", reason="evicted"),
        "active_sequences_after": after.get("llamaserve_active_sequences"),
        "rss_kib_after_each_round": round_rss,
        "rss_growth_after_round_2_to_end": round((round_rss[-1] - base) / base, 4),
        **rss_thirds(sampler.samples, elapsed),
        "server_exit_code": code, "isolation": args.isolation, "worker_kills": len(killer.kills),
    }
    ok = (not summary.problems and not summary.mismatches and code == 0
          and figures["active_sequences_after"] == 0 and summary.kinds["completed"] > 0)
    per_window = rates(done, 10.0, elapsed)
    (args.out / "soak.json").write_text(json.dumps({
        "figures": figures, "ok": ok, "rss_samples": sampler.samples, "per_10s": per_window,
        "mismatches": summary.mismatches[:20], "problems": summary.problems[:20],
    }, indent=1))
    plot(args.out / "soak.png", sampler.samples, per_window,
         f"llamaserve soak: {len(outcomes)} requests, {args.clients} clients, "
         f"{figures['requests_per_s']} req/s, median RSS first→last third {figures['rss_growth_median_thirds']:+.1%}")
    print(json.dumps(figures, indent=1))
    for line in (summary.mismatches + summary.problems)[:10]:
        print("  !", line)
    print(f"{'OK' if ok else 'FAILED'}: wrote {args.out / 'soak.json'} and {args.out / 'soak.png'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
