"""Seeded answers of llama-server's samplers, here and in llama-server itself, on the same model: each
sampler alone, a mix, and custom `samplers` orders through /completion (24 tokens, seed 42). Prints one
line per case and how many are equal; exits 1 when any differs.

Usage: python benchmarks/sampler_parity.py [--model small]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx
import servers
from models import SPECS, ensure_model

CASES = [{}, {"dry_multiplier": 0.8}, {"xtc_probability": 0.5, "xtc_threshold": 0.05}, {"top_n_sigma": 1.0},
         {"dynatemp_range": 0.5}, {"mirostat": 1}, {"mirostat": 2},
         {"dry_multiplier": 0.8, "xtc_probability": 0.5, "min_keep": 3},
         {"samplers": "kxt", "xtc_probability": 0.5, "xtc_threshold": 0.05},
         {"samplers": ["min_p", "top_p", "temperature"], "top_p": 0.5},
         {"samplers": "ed", "repeat_penalty": 1.5, "dry_multiplier": 1.0}]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", choices=sorted(SPECS))
    args = parser.parse_args(argv)
    model = ensure_model(args.model, "f16")
    with tempfile.TemporaryDirectory() as workdir:
        ours = servers.llamaserve(model, Path(workdir), threads=2, parallel=1, n_ctx=512).start()
        peer = servers.llama_server(model, Path(workdir), threads=2, parallel=1, n_ctx=512).start()
        equal = 0
        try:
            for extra in CASES:
                body = {"prompt": "Once upon a time", "n_predict": 24, "seed": 42, "temperature": 0.9, **extra}
                a, b = (httpx.post(s.base_url + "/completion", json=body, timeout=60).json()["content"]
                        for s in (peer, ours))
                equal += a == b
                print(f"{'equal' if a == b else 'DIFFERS'}  {json.dumps(extra)}")
        finally:
            ours.stop()
            peer.stop()
    print(f"{equal} of {len(CASES)} seeded answers equal llama-server's")
    return 0 if equal == len(CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
