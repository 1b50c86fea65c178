"""The models of the speculative benchmark (benchmarks/bench_speculative.py): the "copy" model that
repeats its context, the quantized draft (q4_0, or a pure q5_0 where q4_0 crashes the CPU), and a
"sibling" pair: a target and a much cheaper draft that mostly agree, as a trained family does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from models import CACHE, ensure_model  # also puts the checkout on sys.path
from peer_tools import ROOT


def _log(msg: str) -> None:
    print(f"[speculative] {msg}", file=sys.stderr, flush=True)


def copy_model(size: str) -> Path:
    """The f16 model with every attn_output weight zeroed: same shapes and speed, and each next token
    depends on the last token only (a text the model would write, given in the prompt, is repeated)."""
    import gguf

    path = CACHE / f"{size}-f16-noattn.gguf"
    if not path.is_file():
        source = ensure_model(size, "f16")
        n_layer = int(gguf.GGUFReader(source).fields["llama.block_count"].contents())
        _log(f"writing {path.name} (attention outputs of {source.name} zeroed)")
        _scaled_f16(source, path, {f"blk.{i}.attn_output.weight" for i in range(n_layer)}, 0.0)
    return path


# The sibling pair. Random-weight models of different sizes never agree on a token, so the pair is
# made from one model: the target keeps every block but scales the residual contributions of
# blocks 1.. (attn_output, ffn_down) by SIBLING_DAMPING[size], and the draft is block 0 alone (with
# the same embeddings and output) in pure q5_0. The target costs what the model costs. With these
# factors the draft's greedy choice equals the target's on about 80% of the target's own greedy
# tokens (teacher-forced, 160 tokens after a story and a rewrite prompt: "mid" 0.05 gives 80%, 0.1
# 62-66%, 0.2 47%; "deep", 31 damped blocks, 0.012 gives 84%), the range reported for trained
# draft/target pairs such as a 1B draft for an 8B target. What differs is the draft's cost: on
# "mid" (8 blocks) the draft's block and output matrix are a third of the target's weights, so a
# draft token costs a quarter of a target token; on "deep" (32 blocks) about a twentieth, as a
# trained draft costs against its target.
SIBLING_DAMPING = {"small": 0.05, "mid": 0.05, "deep": 0.012}
SIBLING_DRAFT_LAYERS = 1


def _scaled_f16(source: Path, dest: Path, names: set[str], factor: float) -> None:
    """`source` copied to `dest` with the f16 tensors in `names` multiplied by `factor`."""
    import gguf
    import numpy as np

    tmp = dest.with_suffix(f".{os.getpid()}.tmp")
    shutil.copyfile(source, tmp)
    done = 0
    with open(tmp, "r+b") as f:
        for t in gguf.GGUFReader(source).tensors:
            if t.name in names:
                if t.tensor_type != gguf.GGMLQuantizationType.F16:
                    raise RuntimeError(f"{t.name} of {source} is {t.tensor_type.name}, not F16")
                values = np.asarray(t.data, dtype=np.float16) * np.float16(factor) + np.float16(0)   # no -0.0
                f.seek(int(t.data_offset))
                f.write(values.astype(np.float16).tobytes())
                done += 1
    if done != len(names):
        tmp.unlink()
        raise RuntimeError(f"{source} lacks {len(names) - done} of the tensors to scale")
    tmp.replace(dest)


def _first_blocks(source: Path, dest: Path, n_layer: int) -> None:
    """`source` cut to its first `n_layer` blocks (metadata and other tensors unchanged)."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    tmp = dest.with_suffix(f".{os.getpid()}.tmp")
    w = gguf.GGUFWriter(tmp, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        value = n_layer if name == f"{arch}.block_count" else field.contents()
        w.add_key_value(name, value, vtype, field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= n_layer:
            continue
        w.add_tensor(t.name, np.asarray(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(dest)


def sibling_pair(size: str) -> tuple[Path, Path]:
    """(target f16, draft pure q5_0) of the sibling pair made from the `size` f16 model."""
    import gguf

    if size not in SIBLING_DAMPING:
        raise ValueError(f"no sibling pair for model {size!r}; expected one of {sorted(SIBLING_DAMPING)}")
    damping = SIBLING_DAMPING[size]
    source = ensure_model(size, "f16")
    tag = f"{size}-sibling-d{damping:g}"
    target = CACHE / f"{tag}-f16.gguf"
    draft = CACHE / f"{tag}-draft{SIBLING_DRAFT_LAYERS}-q5_0.gguf"
    if not target.is_file():
        n_layer = int(gguf.GGUFReader(source).fields["llama.block_count"].contents())
        names = {f"blk.{i}.{t}.weight" for i in range(SIBLING_DRAFT_LAYERS, n_layer)
                 for t in ("attn_output", "ffn_down")}
        _log(f"writing {target.name} (blocks {SIBLING_DRAFT_LAYERS}.. of {source.name} damped x{damping:g})")
        _scaled_f16(source, target, names, damping)
    if not draft.is_file():
        cut = CACHE / f"{tag}-draft{SIBLING_DRAFT_LAYERS}-f16.gguf"
        _log(f"writing {draft.name} (the first {SIBLING_DRAFT_LAYERS} block(s) of {source.name}, pure q5_0)")
        _first_blocks(source, cut, SIBLING_DRAFT_LAYERS)
        pure_quantized_file(cut, draft, "q5_0")
        cut.unlink()
    return target, draft


def pure_quantized(size: str, dtype: str) -> Path:
    """`size` quantized with every tensor in `dtype` (llama-quantize --pure), cached next to the models."""
    path = CACHE / f"{size}-{dtype}-pure.gguf"
    if not path.is_file():
        pure_quantized_file(ensure_model(size, "f16"), path, dtype)
    return path


def pure_quantized_file(source: Path, path: Path, dtype: str) -> None:
    """`source` quantized to `path` with every tensor in `dtype` (llama_model_quantize, as
    llama-quantize --pure)."""
    from llamacore.quantize import quantize

    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    _log(f"quantizing {source.name} -> {path.name} (pure)")
    quantize(source, tmp, dtype, pure=True)
    tmp.replace(path)


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


DEEP = "deep"            # the base of the speculative benchmark's "deep" sibling pair


def prepare(size: str, draft_dtype: str = "auto", deep: bool = True) -> None:
    """Every file the case needs, before any timing (run.py calls this); `deep`: the deep pair too."""
    ensure_model(size, "f16")
    copy_model(size)
    draft_model(size, draft_dtype)
    sibling_pair(size)
    if deep:
        sibling_pair(DEEP)
