# Checks on a GGUF file before llama.cpp opens it: llama.cpp aborts the process on some
# well-formed files with bad metadata values, so those are refused here with ValueError.
import errno
import mmap
import struct


def _check_gguf_file(path, what):
    """Fail with a Python exception before llama.cpp sees a file it cannot read."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"{what} file not found", path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{what} path is a directory", path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    _check_gguf_metadata(path, what)
    return path


# -- metadata llama.cpp asserts on ---------------------------------------------------------
# llama.cpp's GGUF reader turns a structurally broken file (bad version, counts, offsets,
# shapes, truncation) into a clean load failure. A few well-formed but wrong metadata values
# instead hit a GGML_ASSERT and abort the whole process; those are checked here, before
# llama.cpp sees the file. Anything this walk cannot parse is left to llama.cpp to report.

_GGUF_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_INTS = (0, 1, 2, 3, 4, 5, 10, 11)
_GGUF_STRING = 8
_GGUF_ARRAY = 9
_GGUF_FLOAT32 = 6
_LLAMA_MAX_LAYERS = 512          # llama-hparams.h
_LLAMA_MAX_EXPERTS = 1024
_ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Unparsed(Exception):
    """The header is not well formed; llama.cpp's reader will say exactly why."""


cdef tuple _gguf_string(buf, Py_ssize_t pos, Py_ssize_t size):
    if pos + 8 > size:
        raise _Unparsed()
    n = _U64.unpack_from(buf, pos)[0]
    pos += 8
    if n > size - pos:
        raise _Unparsed()
    return buf[pos:pos + n], pos + n


def _gguf_metadata(path):
    """(metadata, duplicate token, tensor shapes) of a GGUF header; (None, None, None) if broken.

    metadata is {key: (gguf type, value)}; arrays are (item type, count, values), values only
    for short integer arrays. The tokens of tokenizer.ggml.tokens are checked for duplicates on
    the way (one pass over the vocabulary). Tensor shapes are {name: ne}.
    """
    with open(path, "rb") as f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None, None, None
    with buf:
        try:
            return _walk_gguf(buf)
        except (_Unparsed, struct.error):
            return None, None, None


def _walk_gguf(buf):
    cdef Py_ssize_t size = len(buf), pos = 24, width, i
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3) or n_kv > size // 12 or n_tensors > size // 24:
        return None, None, None
    meta, duplicate = {}, None
    for _ in range(n_kv):
        key, pos = _gguf_string(buf, pos, size)
        key = key.decode("utf-8", "replace")
        if pos + 4 > size:
            raise _Unparsed()
        vtype = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if vtype in _GGUF_FIXED:
            width = struct.calcsize(_GGUF_FIXED[vtype])
            if pos + width > size:
                raise _Unparsed()
            meta[key] = (vtype, struct.unpack_from("<" + _GGUF_FIXED[vtype], buf, pos)[0])
            pos += width
        elif vtype == _GGUF_STRING:
            value, pos = _gguf_string(buf, pos, size)
            meta[key] = (vtype, value.decode("utf-8", "replace"))
        elif vtype == _GGUF_ARRAY:
            if pos + 12 > size:
                raise _Unparsed()
            item, count = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if item in _GGUF_FIXED:
                width = struct.calcsize(_GGUF_FIXED[item])
                if count > (size - pos) // width:
                    raise _Unparsed()
                values = None
                if item in _GGUF_INTS and count <= 4096:
                    values = struct.unpack_from(f"<{count}{_GGUF_FIXED[item]}", buf, pos)
                pos += count * width
            elif item == _GGUF_STRING:      # every string takes >= 8 bytes: the loop ends with the file
                seen = {} if key == "tokenizer.ggml.tokens" and duplicate is None else None
                for i in range(count):
                    value, pos = _gguf_string(buf, pos, size)
                    if seen is not None and seen.setdefault(value, i) != i:
                        duplicate, seen = (value, seen[value], i), None
                values = None
            else:
                return None, None, None     # nested arrays or an unknown item type
            meta[key] = (vtype, (item, count, values))
        else:
            return None, None, None
    tensors = {}
    for _ in range(n_tensors):
        name, pos = _gguf_string(buf, pos, size)
        if pos + 4 > size:
            raise _Unparsed()
        n_dims = _U32.unpack_from(buf, pos)[0]
        if n_dims > 4 or pos + 4 + 8 * n_dims + 12 > size:
            raise _Unparsed()
        tensors[name.decode("utf-8", "replace")] = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
        pos += 4 + 8 * n_dims + 12          # n_dims, ne[], type, offset
    return meta, duplicate, tensors


def _check_gguf_metadata(path, what):
    """ValueError for metadata that would make llama.cpp abort (GGML_ASSERT) while loading."""
    meta, duplicate, tensors = _gguf_metadata(path)
    if meta is None:
        return
    problems = []
    if what == "model":
        arch_type, arch = meta.get("general.architecture", (None, None))
        if arch_type == _GGUF_STRING and arch:
            problems += _hparam_problems(meta, arch)
        if duplicate is not None:
            token, first, second = duplicate
            problems.append(f"tokenizer.ggml.tokens has the token {token[:40]!r} twice (ids {first} and {second})")
    else:
        for key in ("general.type", "general.architecture", "adapter.type"):
            if key in meta and meta[key][0] != _GGUF_STRING:
                problems.append(f"{key} must be a string (GGUF type {meta[key][0]})")
        if "adapter.lora.alpha" in meta and meta["adapter.lora.alpha"][0] != _GGUF_FLOAT32:
            problems.append(f"adapter.lora.alpha must be a float32 (GGUF type {meta['adapter.lora.alpha'][0]})")
        # llama.cpp compares only ne[0] and ne[1] with the base weight; a 3-D lora_a/lora_b
        # then fails ggml_can_mul_mat at the first decode, which aborts
        flat = [name for name, ne in tensors.items() if any(n != 1 for n in ne[2:])]
        if flat:
            problems.append(f"tensor {flat[0]!r} has {len(tensors[flat[0]])} dimensions; LoRA tensors are matrices")
    if problems:
        raise ValueError(f"{path} is not a valid {what}: " + "; ".join(problems))


def _hparam_problems(dict meta, str arch):
    """The hyper-parameter checks llama_model::load_hparams asserts for every architecture."""
    ints = {}
    for name in ("block_count", "nextn_predict_layers", "expert_count", "expert_group_count",
                 "expert_group_used_count", "expert_used_count"):
        key = f"{arch}.{name}"
        if key not in meta:
            continue
        vtype, value = meta[key]
        if vtype in _GGUF_INTS:
            ints[name] = value
        elif vtype == _GGUF_ARRAY and name == "expert_used_count" and value[2] is not None:
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
    if rope_type == _GGUF_STRING and rope not in _ROPE_SCALING_TYPES:
        problems.append(f"{arch}.rope.scaling.type is {rope!r}; expected one of {', '.join(_ROPE_SCALING_TYPES)}")
    return problems
