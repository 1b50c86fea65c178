"""Checks on a GGUF file before llama.cpp opens it.

llama.cpp aborts the whole process on some well-formed files with bad metadata values (a
GGML_ASSERT while loading), so those are refused here with ValueError. Its GGUF reader turns
a structurally broken file (bad version, counts, offsets, shapes, truncation) into a clean load
failure itself: anything llamacore.gguf.header cannot parse is left to llama.cpp to report.

Pure Python: Model and LoraAdapter (llamacore._core) call `check_gguf_file` first.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from os import PathLike
from typing import Any

from llamacore.gguf.header import INT_TYPES, MAGIC, GGUFMetadata, ValueType, read_metadata

__all__ = ["adapter_mismatch", "check_gguf_file", "tensor_types", "vocabulary_mismatch"]

_LLAMA_MAX_LAYERS = 512          # llama-hparams.h
_LLAMA_MAX_EXPERTS = 1024
_ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")

# files that passed, by (path, what, inode, size, mtime): a reload after an idle unload, a second
# context or an adapter re-added skips reading the header again; any change to the file re-checks.
# The value: the ggml types of the file's tensors (tensor_types), None where the header was not parsed
_PASSED: OrderedDict[tuple, frozenset[int] | None] = OrderedDict()
_PASSED_MAX = 256
_PASSED_LOCK = threading.Lock()


def check_gguf_file(path: str | PathLike[str], what: str) -> str:
    """The path as a str, or a Python exception for a file llama.cpp cannot read or would abort on.

    `what` is "model", "LoRA adapter" or "projector" (it picks the checks and names the file in
    messages).
    """
    return _checked(path, what)[0]


def tensor_types(path: str | PathLike[str]) -> frozenset[int] | None:
    """The ggml types of a model file's tensors, from the header `check_gguf_file` reads (read once
    for both); None where it could not be parsed. Raises as check_gguf_file does."""
    return _checked(path, "model")[1]


def _checked(path: str | PathLike[str], what: str) -> tuple[str, frozenset[int] | None]:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"{what} file not found", path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{what} path is a directory", path)
    st = os.stat(path)
    key = (os.path.realpath(path), what, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _PASSED_LOCK:
        if key in _PASSED:
            _PASSED.move_to_end(key)
            return path, _PASSED[key]
    types = _check(path, what)
    with _PASSED_LOCK:
        _PASSED[key] = types
        if len(_PASSED) > _PASSED_MAX:
            _PASSED.popitem(last=False)
    return path, types


def _check(path: str, what: str) -> frozenset[int] | None:
    """Raises for a file llama.cpp cannot read or would abort on; its tensors' types otherwise."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != MAGIC:
        raise ValueError(f"{path} is not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    header = read_metadata(path)
    if header is None:
        return None
    check = {"model": _model_problems, "projector": _projector_problems}.get(what, _adapter_problems)
    problems = check(header)
    if problems:
        raise ValueError(f"{path} is not a valid {what}: " + "; ".join(problems))
    return frozenset(header.tensor_types.values())


def _model_problems(header: GGUFMetadata) -> list[str]:
    meta, problems = header.values, []
    arch_type, arch = meta.get("general.architecture", (None, None))
    if arch_type == ValueType.STRING and arch:
        problems += _hparam_problems(meta, arch)
    if header.duplicate_token is not None:
        token, first, second = header.duplicate_token
        problems.append(f"tokenizer.ggml.tokens has the token {token[:40]!r} twice (ids {first} and {second})")
    return problems


def _adapter_problems(header: GGUFMetadata) -> list[str]:
    meta, problems = header.values, []
    for key in ("general.type", "general.architecture", "adapter.type"):
        if key in meta and meta[key][0] != ValueType.STRING:
            problems.append(f"{key} must be a string (GGUF type {meta[key][0]})")
    if "adapter.lora.alpha" in meta and meta["adapter.lora.alpha"][0] != ValueType.FLOAT32:
        problems.append(f"adapter.lora.alpha must be a float32 (GGUF type {meta['adapter.lora.alpha'][0]})")
    # llama.cpp compares only ne[0] and ne[1] with the base weight; a 3-D lora_a/lora_b
    # then fails ggml_can_mul_mat at the first decode, which aborts
    tensors = header.tensors
    flat = [name for name, ne in tensors.items() if any(n != 1 for n in ne[2:])]
    if flat:
        problems.append(f"tensor {flat[0]!r} has {len(tensors[flat[0]])} dimensions; LoRA tensors are matrices")
    return problems


# the scalar keys libmtmd's clip loader reads with gguf_get_val_*, which asserts the value type
# (an abort, where a missing key or a wrong array type is a clean load error); tools/mtmd/clip.cpp
_CLIP_SCALARS = {
    ValueType.BOOL: ("clip.has_vision_encoder", "clip.has_audio_encoder", "clip.has_gen_audio_encoder",
                     "clip.use_gelu", "clip.use_silu"),
    ValueType.STRING: ("clip.projector_type", "clip.vision.projector_type", "clip.audio.projector_type",
                       "clip.gen.audio.projector_type", "clip.gen.audio.model_variant",
                       "clip.vision.mm_patch_merge_type", "general.name", "general.description"),
    ValueType.FLOAT32: ("clip.vision.attention.layer_norm_epsilon", "clip.audio.attention.layer_norm_epsilon",
                        "clip.vision.swiglu_clamp"),
    ValueType.INT32: ("clip.minicpmv_version",),
    ValueType.UINT32: tuple(f"clip.{m}.{k}" for m in ("vision", "audio") for k in (
        "attention.head_count", "attention.head_count_kv", "attention.head_dim", "block_count",
        "embedding_length", "feed_forward_length", "projection_dim")) + tuple("clip." + k for k in (
        "audio.chunk_size", "audio.conv_kernel_size", "audio.local_block_count", "audio.local_group_size",
        "audio.max_pos_emb", "audio.num_mel_bins", "audio.projector.downsample_rate",
        "audio.projector.head_count", "audio.projector.stack_factor", "audio.projector.window_size",
        "audio.rvq.num_quantizers", "audio.subsampling_factor", "audio.window_size", "minicpmv_query_num",
        "vision.expert_used_count", "vision.image_max_pixels", "vision.image_min_pixels", "vision.image_size",
        "vision.n_wa_pattern", "vision.patch_size", "vision.preproc_image_size", "vision.preproc_max_tiles",
        "vision.preproc_min_tiles", "vision.projector.query_side", "vision.projector.scale_factor",
        "vision.projector.window_side", "vision.sam.block_count", "vision.sam.embedding_length",
        "vision.sam.head_count", "vision.spatial_merge_size", "vision.window_size")),
}


def _projector_problems(header: GGUFMetadata) -> list[str]:
    meta, problems = header.values, []
    for vtype, keys in _CLIP_SCALARS.items():
        for key in keys:
            if key in meta and meta[key][0] != vtype:
                problems.append(f"{key} must be a {vtype.name.lower()} (GGUF type {meta[key][0]})")
    if not any(key.startswith("clip.") for key in meta):
        problems.append("it has no clip.* metadata (a multimodal projector, mmproj, is expected)")
    return problems


def _hparam_problems(meta: dict, arch: str) -> list[str]:
    """The hyper-parameter checks llama_model::load_hparams asserts for every architecture."""
    ints = {}
    for name in ("block_count", "nextn_predict_layers", "expert_count", "expert_group_count",
                 "expert_group_used_count", "expert_used_count"):
        key = f"{arch}.{name}"
        if key not in meta:
            continue
        vtype, value = meta[key]
        if vtype in INT_TYPES:
            ints[name] = value
        elif vtype == ValueType.ARRAY and name == "expert_used_count" and value[2] is not None:
            ints[name] = value[2]
        else:
            return []                       # a wrong type: llama.cpp throws a clean error for it
    problems = []
    n_layer = ints.get("block_count")
    if n_layer is None:
        return []                           # required: llama.cpp reports it missing
    if not 0 < n_layer <= _LLAMA_MAX_LAYERS:
        return [f"{arch}.block_count is {n_layer}; it must be between 1 and {_LLAMA_MAX_LAYERS}"]
    if ints.get("nextn_predict_layers", 0) > n_layer:
        problems.append(f"{arch}.nextn_predict_layers ({ints['nextn_predict_layers']}) exceeds "
                        f"{arch}.block_count ({n_layer})")
    n_expert, groups = ints.get("expert_count", 0), ints.get("expert_group_count", 0)
    used = ints.get("expert_used_count", 0)
    used = max(used[:n_layer], default=0) if isinstance(used, tuple) else used
    group_used = ints.get("expert_group_used_count", 0)
    if n_expert > _LLAMA_MAX_EXPERTS:
        problems.append(f"{arch}.expert_count is {n_expert}; at most {_LLAMA_MAX_EXPERTS} are supported")
    elif used > n_expert or (n_expert > 0 and used <= 0) or (n_expert == 0 and groups != 0):
        problems.append(f"{arch}.expert_used_count ({used}), expert_count ({n_expert}) and "
                        f"expert_group_count ({groups}) are inconsistent")
    elif n_expert > 0 and (groups >= n_expert or groups > 1 and (
            n_expert % groups or not 0 < group_used < groups)):
        problems.append(f"{arch}.expert_group_count ({groups}) / expert_group_used_count ({group_used}) "
                        f"do not fit expert_count ({n_expert})")
    rope_type, rope = meta.get(f"{arch}.rope.scaling.type", (None, None))
    if rope_type == ValueType.STRING and rope not in _ROPE_SCALING_TYPES:
        problems.append(f"{arch}.rope.scaling.type is {rope!r}; expected one of {', '.join(_ROPE_SCALING_TYPES)}")
    return problems


# -- one file against another: what would otherwise fail a model's first request ---------------


def adapter_mismatch(adapter: str | PathLike[str], model: str | PathLike[str]) -> str | None:
    """Why the LoRA `adapter` does not fit `model`, from both headers (nothing loaded), or None.

    As llama.cpp checks on load: the weight each lora_a/lora_b pair adapts has the shape (ne[0] of
    lora_a, ne[1] of lora_b), the model's width n_embd on one side for most weights. Weights this
    file lacks are not judged (a split model's first file holds only some), nor files whose header
    does not parse (llama.cpp reports those).
    """
    lora, base = read_metadata(adapter), read_metadata(model)
    if lora is None or base is None:
        return None
    for name, ne_a in lora.tensors.items():
        weight = name.removesuffix(".lora_a")
        ne_b = lora.tensors.get(f"{weight}.lora_b")
        if weight == name or ne_b is None:
            continue
        ne = base.tensors.get(weight)
        if ne is None:
            continue
        shape = (ne_b[1], ne_a[1]) if weight.endswith("token_embd.weight") else (ne_a[0], ne_b[1])
        if shape != ne[:2]:
            arch = base.values.get("general.architecture", (None, None))[1]
            width = base.values.get(f"{arch}.embedding_length", (None, None))[1]
            return (f"its {weight} is {shape[0]}x{shape[1]}, the model's is {ne[0]}x{ne[1]}"
                    + (f" (n_embd {width}): it was made for another base model" if width else ""))
    return None


def vocabulary_mismatch(draft: str | PathLike[str], target: str | PathLike[str]) -> str | None:
    """Why `draft` cannot draft for `target`, from both headers, or None: the target verifies the
    draft's token ids, so the vocabulary size and BOS/EOS ids must agree (once loaded,
    llamacore.generation.draft_vocab compares token texts too). Ids a header leaves out are not compared."""
    mine, theirs = read_metadata(draft), read_metadata(target)
    if mine is None or theirs is None:
        return None
    for what, key in (("vocabulary size", "tokenizer.ggml.tokens"), ("BOS token", "tokenizer.ggml.bos_token_id"),
                      ("EOS token", "tokenizer.ggml.eos_token_id")):
        a, b = _number(mine.values.get(key)), _number(theirs.values.get(key))
        if a is not None and b is not None and a != b:
            return f"its {what} is {a}, the model's is {b}"
    return None


def _number(entry: tuple[int, Any] | None) -> int | None:
    """An integer value, or an array's length."""
    if entry is None:
        return None
    vtype, value = entry
    return value[1] if vtype == ValueType.ARRAY else value if vtype in INT_TYPES else None
