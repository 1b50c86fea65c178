"""Build llama.cpp's own tools (llama-bench, llama-server, llama-quantize, llama-mtmd-cli) as benchmark peers.

The tools come from the vendored tree and are cached in ``build/peer-tools/``; a tool is built
when its binary is missing or was built from another tree (the pin or vendor/patches changed). ggml
is compiled with the same flags as the libraries behind llamacore (Release, static, PIC, native CPU,
default OpenMP), so both sides run the same kernels.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "vendor" / "llama.cpp"
BUILD = ROOT / "build" / "peer-tools"
TOOLS = ("llama-bench", "llama-server", "llama-quantize", "llama-mtmd-cli")

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",  # as setup.py builds llamacore's libllama/libggml
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # no web-UI download while configuring llama-server
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_RPC=ON",                 # llama-server --rpc, as llamacore builds it (bench_rpc.py)
    "-DGGML_RPC_RDMA=OFF",
    # LLAMA_CURL is deprecated and ignored in this llama.cpp version, so it is not passed.
]


# The peers load a model's weights as llamacore does by default: into the CPU's extra (repacked)
# buffer types, except a quantized model on an AMX CPU whose environment lets ggml's crashing AMX
# kernels take it (llamacore/core/model.pyx: default_extra_bufts; importing llamacore sets
# GGML_CPU_AMX_QUANTIZED=0 on AMX CPUs, and the peers inherit it). llama-bench takes repack_args;
# llama.cpp's common-argument tools (llama-server, llama-mtmd-cli) read repack_env's LLAMA_ARG_REPACK.
def repack(model: Path) -> bool:
    from llamacore._core import default_extra_bufts

    return bool(default_extra_bufts(model))


def repack_args(model: Path) -> list[str]:
    return [] if repack(model) else ["--repack", "0"]


def repack_env(model: Path) -> dict[str, str]:
    return {} if repack(model) else {"LLAMA_ARG_REPACK": "0"}


def _log(msg: str) -> None:
    print(f"[peer-tools] {msg}", file=sys.stderr, flush=True)


class _Tree:
    """A llama.cpp source tree and the folder its tools are built in."""

    def __init__(self, source: Path, build: Path) -> None:
        self.source, self.build = source, build
        self.stamp = build / "peer-tools-cmake-flags.txt"      # the flags the folder was configured with

    def tool_path(self, name: str) -> Path:
        return self.build / "bin" / name

    def made_of(self) -> str:
        """What the tree is made of: its pin and patches (vendor/fetch.py's stamp)."""
        stamp = self.source / ".llamacore-pin"
        return stamp.read_text() if stamp.is_file() else ""

    def current(self, name: str) -> bool:
        """Whether tool ``name`` is built, by the configured flags, from the tree as it is now."""
        built = self.build / f"{name}.tree"
        return (self.tool_path(name).is_file() and self.configured() and built.is_file()
                and built.read_text() == self.made_of())

    def configured(self) -> bool:
        return ((self.build / "CMakeCache.txt").is_file() and self.stamp.is_file()
                and self.stamp.read_text() == "\n".join(_flags()))

    def configure(self) -> None:
        _log(f"configuring {self.source} -> {self.build}")
        subprocess.run(["nice", "-n", "19", "cmake", "-S", str(self.source), "-B", str(self.build), *_flags()],
                       check=True, stdout=sys.stderr)
        self.stamp.write_text("\n".join(_flags()))


VENDORED = _Tree(SOURCE, BUILD)
# the pinned tree without vendor/patches: what the patches cost, side by side (bench_mixed_lora)
UPSTREAM = _Tree(ROOT / "build" / "llama.cpp-upstream", ROOT / "build" / "peer-tools-upstream")


def _flags() -> list[str]:
    flags = list(CMAKE_FLAGS)
    if shutil.which("ccache"):
        flags += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    return flags


def ensure_tool(name: str, jobs: int = 2, upstream: bool = False) -> Path:
    """Return the path of llama.cpp tool ``name``, building it first if it is missing or stale; with
    ``upstream``, built from the pinned tree without vendor/patches (extracted on first use)."""
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name!r}; expected one of {TOOLS}")
    tree = UPSTREAM if upstream else VENDORED
    path = tree.tool_path(name)
    if tree.current(name):
        return path
    tree.build.mkdir(parents=True, exist_ok=True)
    with open(tree.build / ".lock", "w") as lock:  # one build at a time across processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if upstream:
            _fetch().ensure_upstream_source(tree.source)
        if tree.current(name):
            return path
        if not tree.configured():          # new or changed flags: configure, then the target rebuilds
            tree.configure()
        _log(f"building {name} (-j {jobs}; this takes a while the first time)")
        subprocess.run(["nice", "-n", "19", "cmake", "--build", str(tree.build), "--target", name,
                        "-j", str(jobs)], check=True, stdout=sys.stderr)
        if not path.is_file():
            raise FileNotFoundError(f"{name} was built but {path} does not exist")
        (tree.build / f"{name}.tree").write_text(tree.made_of())
    _log(f"built {path}")
    return path


def _fetch():
    """vendor/fetch.py, which is a script, not a package module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("llamacore_vendor_fetch", ROOT / "vendor" / "fetch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; (0, 0) if unavailable."""
    try:
        values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except OSError:
        return 0, 0
    return sum(values) - values[3] - values[4], sum(values)  # steal (VM host) counts as busy


def cpu_busy(interval: float = 0.5) -> float:
    """Fraction of all CPUs busy during ``interval`` seconds (0 if unknown)."""
    busy0, total0 = _cpu_ticks()
    time.sleep(interval)
    busy1, total1 = _cpu_ticks()
    return (busy1 - busy0) / max(total1 - total0, 1)


class ForeignLoad:
    """Context manager: ``.cores`` = CPUs used by *other* processes during the block.

    Counts all busy CPU time minus this process's and its waited-for children's CPU time.
    """

    cores: float = 0.0

    def __enter__(self) -> ForeignLoad:
        self._start = (time.monotonic(), _cpu_ticks()[0], sum(os.times()[:4]))
        return self

    def __exit__(self, *exc: object) -> None:
        t0, busy0, own0 = self._start
        wall, busy = time.monotonic() - t0, _cpu_ticks()[0] - busy0
        own = sum(os.times()[:4]) - own0
        self.cores = max(busy / os.sysconf("SC_CLK_TCK") - own, 0.0) / max(wall, 1e-9)


def wait_for_idle_cpus(n: int | None = None, timeout: float = 60.0, slack: float = 0.2) -> float:
    """Wait, at most ``timeout`` s, until ``n`` CPUs (default: all) are idle.

    Returns the number of idle CPUs last seen. Spinning worker threads stall badly when a
    core they need is taken by another process, so benchmarks call this before timing.
    """
    n_cpus = os.cpu_count() or 1
    n = n_cpus if n is None else n
    deadline = time.monotonic() + timeout
    while (idle := (1.0 - cpu_busy()) * n_cpus) < n - slack and time.monotonic() < deadline:
        pass
    if idle < n - slack:
        _log(f"only {idle:.1f} of {n_cpus} CPUs idle after {timeout:.0f}s; timings will be noisy")
    return idle


if __name__ == "__main__":
    for tool in sys.argv[1:] or TOOLS:
        print(ensure_tool(tool))
