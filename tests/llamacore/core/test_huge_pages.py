"""ggml's buffers of 2 MiB or more (weights copied into the CPU's buffer types, KV caches, compute
buffers) sit on transparent huge pages where Linux allows them (vendor/patches/0011), and go back to
the system when freed. Without the patch, on a kernel whose huge pages are "madvise" (Debian's
default), no anonymous memory of the process is on huge pages; and a KV cache freed into glibc's heap
could stay resident.

Each check runs in a fresh interpreter so that no other test's memory is counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tiny_models import TinyModelSpec, write_model

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text(),
    reason="needs Linux with transparent huge pages enabled ('always' or 'madvise')")

# 2 (K and V) x 2 layers x 2048 cells x 256 (4 KV heads of 64) x 2 bytes (f16): a 4 MiB KV cache
SPEC = TinyModelSpec(n_embd=256, n_head=4, n_head_kv=4, n_layer=2, n_ff=256, seed=11)

PROBE = textwrap.dedent("""
    import json, sys
    from llamacore import Batch, Context, Model

    def memory():
        fields = {}
        for line in open("/proc/self/smaps_rollup"):
            key, _, value = line.partition(":")
            if key in ("Rss", "AnonHugePages"):
                fields[key] = int(value.split()[0])
        return fields

    def decode():
        ctx = Context(model, n_ctx=2048, n_batch=64, type_k="f16", type_v="f16", flash_attn="off")
        batch = Batch(64)
        batch.add_sequence(list(range(1, 60)), 0, 0, logits_last=True)
        ctx.decode(batch)
        return ctx

    model = Model(sys.argv[1])
    decode()  # freed at once; what the first decode sets up once per process (threads, tables) is not the context's
    before = memory()
    ctx = decode()
    during = memory()
    del ctx
    after = memory()
    print(json.dumps({"before": before, "during": during, "after": after}))
""")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    path = write_model(tmp_path_factory.mktemp("huge") / "kv4m.gguf", SPEC)
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], check=True, capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kv_cache_on_huge_pages(probe):
    """The 4 MiB KV cache (and the compute buffer) adds at least two whole huge pages."""
    gained = probe["during"]["AnonHugePages"] - probe["before"]["AnonHugePages"]
    assert gained >= 4096, probe


def test_freed_context_returns_its_pages(probe):
    """Freeing the context unmaps its huge pages: none of them stays with the process, nor half of
    its 4 MiB KV cache's resident memory (glibc's heap kept all 5 MiB of the context before)."""
    assert probe["after"]["AnonHugePages"] <= probe["before"]["AnonHugePages"], probe
    assert probe["after"]["Rss"] - probe["before"]["Rss"] < 2048, probe
