"""Run competing sides in rotating order and compare their medians.

Machines drift (thermal state, other processes, page cache), so no side always goes first:
round r runs the sides starting from the r-th one. Every side is a callable returning a list
of samples (or one sample); ``alternate`` gathers them per side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path


def alternate(sides: dict[str, Callable[[], list[float] | float]], reps: int) -> dict[str, list[float]]:
    """Samples per side over ``reps`` rounds, the starting side rotating from round to round."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got = sides[name]()
            samples[name] += got if isinstance(got, list) else [got]
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(v) for name, v in samples.items() if v}


def ratios(med: dict[str, float], ours: str) -> dict[str, float]:
    """``ours/peer`` for every other side."""
    return {f"{ours}/{peer}": med[ours] / med[peer] for peer in med if peer != ours and med[peer]}


def paired_ratio(a: list[float], b: list[float]) -> float | None:
    """The median over rounds of a[i] / b[i], the two sides' samples of one round. A round runs every
    side within seconds, so this cancels a shared machine's slower drifts, which the ratio of the
    two sides' medians does not (measured on a 2-CPU VM: one side's requests ranged 99-132 tok/s
    over a run, while per-round ratios of two sides that ran alike stayed within 1.00-1.04)."""
    pairs = [x / y for x, y in zip(a, b) if y]
    return statistics.median(pairs) if pairs else None


def script_main(doc: str, run: Callable[[str, int, int], dict], reps: int, show: Callable[[dict], None],
                argv: list[str] | None) -> dict:
    """Command line of a benchmark script whose ``run(model, threads, reps)`` returns its report."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default="small", choices=("tiny", "small", "mid"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--json", type=Path, help="write the report with every sample here")
    args = ap.parse_args(argv)
    report = run(args.model, args.threads, args.reps)
    show(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report
