"""The commands that neither serve nor read a config: ``deploy`` (the shipped deployment files) and
``rpc-worker`` (a ggml RPC worker)."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path

# what `llamaserve deploy TARGET` shows (the first file) or writes (all), from llamaserve/deploy/
DEPLOY_FILES = {"docker": ("Dockerfile", "build-wheel.sh", "install-runtime.sh"), "kubernetes": ("kubernetes.yaml",)}


def deploy_files(args: argparse.Namespace) -> int:
    folder = resources.files("llamaserve") / "deploy"
    names = DEPLOY_FILES[args.target]
    if not args.output:
        print((folder / names[0]).read_text(), end="")
        return 0
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        target = out / name
        target.write_text((folder / name).read_text())
        if name.endswith(".sh"):
            target.chmod(0o755)
        print(f"wrote {target}")
    return 0


def rpc_worker(args: argparse.Namespace) -> int:
    """`llamaserve rpc-worker`: blocks serving until stopped."""
    from llamacore import rpc

    if not rpc.is_loopback(args.host):
        print(f"llamaserve: WARNING: the RPC worker listens on {args.host}, beyond this machine. The ggml RPC "
              "protocol has no authentication and no encryption: anyone who reaches this port can run "
              "computations and read or write memory of this process. Only use it on a trusted network.",
              file=sys.stderr, flush=True)
    if args.cache_dir:
        os.makedirs(args.cache_dir, exist_ok=True)
    try:
        rpc.serve(args.host, args.port, args.threads, args.cache_dir)
    except (OSError, ValueError) as exc:
        print(f"llamaserve: {exc}", file=sys.stderr)
        return 1
    return 0


__all__ = ["DEPLOY_FILES", "deploy_files", "rpc_worker"]
