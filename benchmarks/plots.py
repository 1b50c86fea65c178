"""PNG plots of a results dict (see run.py): throughput vs concurrent clients, tokens/s by model,
LoRA switch latency. matplotlib with the Agg backend; no display needed."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _result(results: dict, case: str) -> dict | None:
    return results["cases"].get(case, {}).get("result")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def concurrency(server: dict, path: Path) -> Path:
    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    by_server: dict[str, list[tuple[int, float, float | None]]] = {}
    for by in server["summary"].values():
        for name, s in by.items():
            by_server.setdefault(name, []).append((s["clients"], s["tok_s"], s["ttft_p50"]))
    for name, pts in by_server.items():
        pts.sort()
        xs = [p[0] for p in pts]
        tput.plot(xs, [p[1] for p in pts], marker="o", label=name)
        ttft.plot(xs, [p[2] * 1000 if p[2] else None for p in pts], marker="o", label=name)
    for ax, title in ((tput, "aggregate generated tokens/s"), (ttft, "time to first token p50 (ms)")):
        ax.set_xlabel("concurrent streaming clients")
        ax.set_title(title)
        ax.set_xticks(sorted({x for pts in by_server.values() for x, *_ in pts}))
        ax.grid(alpha=0.3)
        ax.legend()
    return _save(fig, path)


def by_model(core: dict, roofline: dict, path: Path) -> Path:
    labels = list(core)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    tests = sorted({t for rep in core.values() for t in rep["results"]}, key=lambda t: not t.startswith("tg"))
    for ax, test in zip(axes, tests):
        med = [core[m]["results"][test].get("quiet") or core[m]["results"][test]["all"] for m in labels]
        ours, peer = [r["ours_median"] for r in med], [r["peer_median"] for r in med]
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], ours, 0.4, label="llamacore")
        ax.bar([i + 0.2 for i in x], peer, 0.4, label="llama-bench")
        if test.startswith("tg") and roofline:
            bound = [roofline.get(m, {}).get("bound_tok_s") for m in labels]
            ax.scatter(list(x), bound, marker="_", s=600, color="black", label="bandwidth bound", zorder=3)
        ax.set_xticks(list(x), labels, rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("tokens/s (log)")
        ax.set_title(f"{test} tokens/s by model")
        ax.grid(alpha=0.3, axis="y")
        ax.legend()
    return _save(fig, path)


def lora_switch(sw: dict, path: Path) -> Path:
    names, values, colors = [], [], []
    served = sw["served"]["median_s"]
    for i, (server, med) in enumerate(served.items()):
        for k in ("no switch", "switch"):
            names.append(f"{server}\n{k}")
            values.append(med[k] * 1000)
            colors.append(f"C{i}")
    for k, v in sw["in_process"]["median_s"].items():
        names.append(k.replace(" reload", "\nreload").replace("llamacore ", "llamacore\n"))
        values.append(v * 1000)
        colors.append(f"C{len(served)}")
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.bar(range(len(names)), values, color=colors)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms to first token (log)")
    ax.set_title("LoRA switch latency (served: TTFT; in process: [switch +] first token)")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def mixed_lora(mixed: dict, path: Path) -> Path:
    """Tokens/s by number of adapters in the mix, one panel per rank, a line per server and client count."""
    ranks = list(mixed["by_rank"])
    fig, axes = plt.subplots(1, len(ranks), figsize=(5.5 * len(ranks), 4), squeeze=False)
    for ax, rank in zip(axes[0], ranks):
        lines: dict[str, list[tuple[int, float]]] = {}
        for case, by in mixed["by_rank"][rank]["summary"].items():
            n = 1 if case.startswith("single") else int(case[3:case.index("@")])
            for name, s in by.items():
                lines.setdefault(f"{name.rsplit('-r', 1)[0]}, {s['clients']} clients", []).append((n, s["tok_s"]))
        for label, pts in sorted(lines.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({p[0] for pts in lines.values() for p in pts}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("adapters the clients are spread over")
        ax.set_ylabel("aggregate generated tokens/s")
        ax.set_title(f"{Path(mixed['model']).stem}, rank-{rank} adapters")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def write_all(results: dict, stem: Path) -> dict[str, Path]:
    """Every plot the results allow, as ``<stem>-<name>.png``; case -> path."""
    out = {}
    if (server := _result(results, "server")) and server.get("summary"):
        out["server"] = concurrency(server, Path(f"{stem}-concurrency.png"))
    if core := _result(results, "core"):
        out["core"] = by_model(core, results.get("roofline") or {}, Path(f"{stem}-models.png"))
    if sw := _result(results, "lora_switch"):
        out["lora_switch"] = lora_switch(sw, Path(f"{stem}-lora-switch.png"))
    for case in ("mixed_lora", "mixed_lora_q4"):
        if mixed := _result(results, case):
            out[case] = mixed_lora(mixed, Path(f"{stem}-{case.replace('_', '-')}.png"))
    return out
