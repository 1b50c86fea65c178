"""The machine a benchmark ran on, its memory bandwidth, and the bound that puts on generation.

Generating one token reads every weight once (all but the token-embedding matrix, of which only
one row is read), so on a CPU tokens/s cannot exceed memory bandwidth / weight bytes. The
bandwidth is measured here with NumPy: ``threads`` threads each sum (read) their slice of an
array far larger than the caches (and once with one thread), best of several passes; ufunc
reductions release the GIL, so the threads run in parallel. A copy (read + write) is measured too,
as STREAM's Copy counts it.

Usage: python benchmarks/machine.py [--threads N] [--mib 512] [MODEL.gguf ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def _ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_id() -> str:
    """A short id from the hardware only, e.g. ``x86_64-2c-24g`` (never a host or user name)."""
    return f"{platform.machine()}-{os.cpu_count()}c-{round(_ram_bytes() / 2**30)}g"


def machine_info() -> dict:
    return {"id": machine_id(), "arch": platform.machine(), "cpu": _cpu_model(), "cpus": os.cpu_count(),
            "ram_gib": round(_ram_bytes() / 2**30, 1), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "numpy": np.__version__}


def _best_time(fn, parts: list, passes: int) -> float:
    """Shortest wall time over ``passes`` of running ``fn`` on every part, one thread a part."""
    best = float("inf")
    with ThreadPoolExecutor(len(parts)) as pool:
        for _ in range(passes):
            t0 = time.perf_counter()
            list(pool.map(fn, parts))
            best = min(best, time.perf_counter() - t0)
    return best


def memory_bandwidth(threads: int | None = None, mib: int = 512, passes: int = 5) -> dict:
    """Read and copy bandwidth in GB/s (10^9 bytes/s) over a ``mib`` MiB array: the best of
    ``passes`` with 1 thread and with ``threads`` threads (one core may already saturate memory)."""
    threads = threads or os.cpu_count() or 1
    n = mib * 2**20 // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    dst[:] = src                                   # touch every page before timing
    out: dict = {"threads": threads, "array_mib": mib, "passes": passes}
    for k in sorted({1, threads}):
        bounds = np.linspace(0, n, k + 1, dtype=np.int64)
        parts = [(bounds[i], bounds[i + 1]) for i in range(k)]
        read = _best_time(lambda p: src[p[0]:p[1]].sum(), parts, passes)
        copy = _best_time(lambda p: np.copyto(dst[p[0]:p[1]], src[p[0]:p[1]]), parts, passes)
        out[f"read_gbs_{k}t"], out[f"copy_gbs_{k}t"] = src.nbytes / read / 1e9, 2 * src.nbytes / copy / 1e9
    out["read_gbs"] = max(v for key, v in out.items() if key.startswith("read_gbs_"))
    out["copy_gbs"] = max(v for key, v in out.items() if key.startswith("copy_gbs_"))
    return out


def bytes_per_token(path: Path) -> dict:
    """Weight bytes one generated token reads: all tensors, less the token-embedding matrix but one row."""
    from gguf import GGUFReader

    tensors = GGUFReader(str(path)).tensors
    total = sum(int(t.n_bytes) for t in tensors)
    embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    has_output = any(t.name == "output.weight" for t in tensors)
    # tied embeddings: the matrix is read whole as the output layer, so nothing is subtracted
    skipped = int(embd.n_bytes) - int(embd.n_bytes) // int(embd.shape[-1]) if embd is not None and has_output else 0
    return {"tensor_bytes": total, "bytes_per_token": total - skipped}


def roofline(bandwidth_gbs: float, path: Path, tg_tok_s: float | None) -> dict:
    """Upper bound on tokens/s from memory bandwidth, and ``tg_tok_s`` as a fraction of it."""
    b = bytes_per_token(path)
    bound = bandwidth_gbs * 1e9 / b["bytes_per_token"]
    return {**b, "bound_tok_s": bound, "tg_tok_s": tg_tok_s,
            "fraction": tg_tok_s / bound if tg_tok_s else None}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("models", nargs="*", type=Path)
    args = ap.parse_args()
    print(machine_info())
    bw = memory_bandwidth(args.threads, args.mib)
    print(f"read {bw['read_gbs']:.1f} GB/s, copy {bw['copy_gbs']:.1f} GB/s ({args.threads} threads)")
    for m in args.models:
        r = roofline(bw["read_gbs"], m, None)
        print(f"{m.name}: {r['bytes_per_token'] / 1e6:.1f} MB/token -> at most {r['bound_tok_s']:.0f} tok/s")
