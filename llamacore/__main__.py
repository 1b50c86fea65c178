"""`python -m llamacore`: what this installation is, for bug reports.

Prints llamacore's version, the llama.cpp it is built from (version, commit, source pin), the build
flags, the backends and devices compiled in and llama.cpp's CPU feature list. `--json` prints the
same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from importlib import metadata
from typing import Any

KNOWN_BACKENDS = ("CUDA", "Metal", "Vulkan", "RPC", "BLAS", "HIP", "SYCL", "OpenCL", "CANN")


def report() -> dict[str, Any]:
    from llamacore import _core

    try:
        version = metadata.version("llamacore")
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    ggml_version, ggml_commit = _core.ggml_version()
    backends = _core.backends()
    names = {b["name"] for b in backends}
    return {
        "llamacore": version,
        "python": f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "llama_cpp_version": _core.llama_cpp_version(),
        "ggml_version": ggml_version,
        "ggml_commit": ggml_commit,
        "build": _core.build_info(),
        "backends": backends,
        "compiled_in": {name: name in names for name in KNOWN_BACKENDS},
        "gpu_offload": bool(_core.supports_gpu_offload()),
        "max_parallel_sequences": _core.max_parallel_sequences(),
        "system_info": _core.system_info().strip(),
    }


def format_report(r: dict[str, Any]) -> str:
    build = r["build"]
    lines = [
        f"llamacore {r['llamacore']}",
        f"python: {r['python']}",
        f"platform: {r['platform']}",
        f"llama.cpp: {r['llama_cpp_version']} (ggml {r['ggml_version']}, commit {r['ggml_commit']})",
        f"llama.cpp source: {build.get('llama_cpp_source', 'unknown')}",
        f"CMAKE_ARGS: {build.get('cmake_args') or '(none)'}",
        f"cmake flags: {' '.join(build.get('cmake_flags', [])) or 'unknown'}",
        f"GGML_NATIVE: {build.get('ggml_native', 'unknown')}  compiler: {build.get('compiler', 'unknown')}",
        f"build folder: {build.get('build_folder', 'unknown')}",
        "backends: " + "; ".join(
            f"{b['name']} [" + ", ".join(f"{d['name']}: {d['description']}" for d in b["devices"]) + "]"
            for b in r["backends"]),
        "compiled in: " + "  ".join(f"{k}={'yes' if v else 'no'}" for k, v in r["compiled_in"].items()),
        f"GPU offload: {'yes' if r['gpu_offload'] else 'no'}  max parallel sequences: {r['max_parallel_sequences']}",
        f"system info: {r['system_info']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llamacore", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    r = report()
    print(json.dumps(r, indent=2) if args.json else format_report(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
