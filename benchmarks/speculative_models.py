"""The models of the speculative benchmark (benchmarks/bench_speculative.py): the "copy" model that
repeats its context, and the quantized draft (q4_0, or a pure q5_0 where q4_0 crashes the CPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from models import CACHE, ensure_model  # also puts the checkout on sys.path
from peer_tools import ROOT, ensure_tool


def _log(msg: str) -> None:
    print(f"[speculative] {msg}", file=sys.stderr, flush=True)


def copy_model(size: str) -> Path:
    """The f16 model with every attn_output weight zeroed: same shapes and speed, and each next token
    depends on the last token only (a text the model would write, given in the prompt, is repeated)."""
    path = CACHE / f"{size}-f16-noattn.gguf"
    if path.is_file():
        return path
    import gguf

    source = ensure_model(size, "f16")
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    _log(f"writing {path.name} (attention outputs of {source.name} zeroed)")
    shutil.copyfile(source, tmp)
    zeroed = 0
    with open(tmp, "r+b") as f:
        for t in gguf.GGUFReader(source).tensors:
            if t.name.endswith("attn_output.weight"):
                f.seek(int(t.data_offset))
                f.write(bytes(int(t.n_bytes)))
                zeroed += 1
    if not zeroed:
        tmp.unlink()
        raise RuntimeError(f"{source} has no attn_output weights to zero")
    tmp.replace(path)
    return path


def pure_quantized(size: str, dtype: str) -> Path:
    """`size` quantized with every tensor in `dtype` (llama-quantize --pure), cached next to the models."""
    path = CACHE / f"{size}-{dtype}-pure.gguf"
    if path.is_file():
        return path
    source = ensure_model(size, "f16")
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    _log(f"quantizing {source.name} -> {path.name} (--pure)")
    cmd = [str(ensure_tool("llama-quantize")), "--pure", str(source), str(tmp), dtype.upper()]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    tmp.replace(path)
    return path


_PROBE = """
import sys
from llamacore import Batch, Context, Model
m = Model(sys.argv[1])
c = Context(m, n_ctx=128, n_threads=1, n_threads_batch=1)
b = Batch(64)
b.add_sequence(list(range(100, 132)), 0, 0)
c.decode(b)
b.clear()
b.add(7, 32, 0, logits=True)
c.decode(b)
"""


def decode_fails(path: Path) -> str | None:
    """Why decoding with `path` fails in a subprocess (a crash, an error), or None when it works."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, check=False)
    if proc.returncode == 0:
        return None
    if proc.returncode < 0:
        return f"killed by signal {-proc.returncode}"
    return f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}"


def draft_model(size: str, dtype: str) -> tuple[Path, str | None]:
    """The draft model file and a note when it is not what was asked for."""
    if dtype == "q5_0":
        return pure_quantized(size, "q5_0"), None
    if dtype != "auto":
        return ensure_model(size, dtype), None
    path = ensure_model(size, "q4_0")
    if (why := decode_fails(path)) is None:
        return path, None
    fallback = pure_quantized(size, "q5_0")
    if decode_fails(fallback) is not None:
        raise RuntimeError(f"no draft model decodes here: {path.name} {why}, and {fallback.name} too")
    return fallback, (f"draft model {fallback.name} instead of {path.name}: decoding {path.name} here was "
                      f"{why} (ggml's AMX kernels for q4_0/q8_0/K-quant weights crash on this CPU, in llamacore "
                      "and llama.cpp's tools alike; q5_0 has no AMX kernel)")


def prepare(size: str, draft_dtype: str = "auto") -> None:
    """Every file the case needs, before any timing (run.py calls this)."""
    ensure_model(size, "f16")
    copy_model(size)
    draft_model(size, draft_dtype)
