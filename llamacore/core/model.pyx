# Model: a loaded GGUF (weights + vocabulary). Owns its llama_model; adapters and contexts hold
# a reference to it so it is freed last.
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


cdef bytes _meta_string(int32_t (*getter)(const void *, int32_t, char *, size_t) noexcept nogil,
                        const void * obj, int32_t i):
    cdef char small[256]
    cdef int32_t n = getter(obj, i, small, sizeof(small))
    if n < 0:
        return None
    if n < <int32_t>sizeof(small):
        return small[:n]
    cdef char * big = <char *>malloc(n + 1)
    if big == NULL:
        raise MemoryError()
    try:
        getter(obj, i, big, n + 1)
        return big[:n]
    finally:
        free(big)


cdef int32_t _model_key(const void * m, int32_t i, char * buf, size_t size) noexcept nogil:
    return llama.llama_model_meta_key_by_index(<const llama.llama_model *>m, i, buf, size)


cdef int32_t _model_val(const void * m, int32_t i, char * buf, size_t size) noexcept nogil:
    return llama.llama_model_meta_val_str_by_index(<const llama.llama_model *>m, i, buf, size)


cdef dict _model_metadata(const llama.llama_model * m):
    cdef dict out = {}
    cdef int32_t i
    for i in range(llama.llama_model_meta_count(m)):
        key = _meta_string(_model_key, m, i)
        val = _meta_string(_model_val, m, i)
        if key is not None:
            out[key.decode("utf-8", "replace")] = (val or b"").decode("utf-8", "replace")
    return out


_LOAD_MODES = {
    (False, False): llama.LLAMA_LOAD_MODE_NONE,
    (True, False): llama.LLAMA_LOAD_MODE_MMAP,
    (False, True): llama.LLAMA_LOAD_MODE_MLOCK,
    (True, True): llama.LLAMA_LOAD_MODE_MMAP_MLOCK,
}


cdef class Model:
    """A GGUF model loaded with llama.cpp.

    Loading releases the GIL. A missing file raises FileNotFoundError; a file llama.cpp
    cannot load (not GGUF, truncated, unknown architecture) raises ValueError with its reason.
    """

    def __cinit__(self):
        self.ptr = NULL
        self.vocab = NULL

    def __init__(self, path, *, int n_gpu_layers=0, bint use_mmap=True, bint use_mlock=False,
                 bint vocab_only=False, int main_gpu=0, tensor_split=None, dict kv_overrides=None,
                 str split_mode="layer", bint check_tensors=False):
        if self.ptr != NULL:
            raise RuntimeError("Model is already initialized")
        self.path = _check_gguf_file(path, "model")
        cdef llama.llama_model_params params = llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.load_mode = _LOAD_MODES[(use_mmap, use_mlock)]
        params.vocab_only = vocab_only
        params.main_gpu = main_gpu
        params.check_tensors = check_tensors
        params.split_mode = {"none": llama.LLAMA_SPLIT_MODE_NONE, "layer": llama.LLAMA_SPLIT_MODE_LAYER,
                             "row": llama.LLAMA_SPLIT_MODE_ROW}[split_mode]

        cdef float * split = NULL
        cdef llama.llama_model_kv_override * overrides = NULL
        cdef bytes bpath = self.path.encode()
        cdef const char * cpath = bpath
        try:
            if tensor_split:
                if len(tensor_split) > llama.llama_max_devices():
                    raise ValueError(f"tensor_split has {len(tensor_split)} entries; "
                                     f"at most {llama.llama_max_devices()} devices are supported")
                split = <float *>malloc(llama.llama_max_devices() * sizeof(float))
                for i in range(llama.llama_max_devices()):
                    split[i] = tensor_split[i] if i < len(tensor_split) else 0.0
                params.tensor_split = split
            if kv_overrides:
                overrides = _build_kv_overrides(kv_overrides)
                params.kv_overrides = overrides
            _error_mark()
            with nogil:
                self.ptr = llama.llama_model_load_from_file(cpath, params)
        finally:
            free(split)
            free(overrides)
        if self.ptr == NULL:
            reason = _errors_since_mark() or "unknown reason"
            raise ValueError(f"failed to load model {self.path}: {reason}")
        self.vocab = llama.llama_model_get_vocab(self.ptr)
        self.n_vocab = llama.llama_vocab_n_tokens(self.vocab)

    def __dealloc__(self):
        if self.ptr != NULL:
            llama.llama_model_free(self.ptr)
            self.ptr = NULL

    def __repr__(self):
        return f"<Model {self.path!r} {self.desc}>"

    # -- sizes and metadata ------------------------------------------------------------------

    @property
    def metadata(self):
        """All scalar GGUF metadata as strings (arrays are not exposed by llama.cpp)."""
        if self._metadata is None:
            self._metadata = _model_metadata(self.ptr)
        return dict(self._metadata)

    @property
    def desc(self):
        cdef char buf[256]
        n = llama.llama_model_desc(self.ptr, buf, sizeof(buf))
        return buf[:max(n, 0)].decode("utf-8", "replace")

    @property
    def architecture(self):
        return self.metadata.get("general.architecture", "")

    @property
    def n_ctx_train(self): return llama.llama_model_n_ctx_train(self.ptr)
    @property
    def n_embd(self): return llama.llama_model_n_embd(self.ptr)
    @property
    def n_embd_out(self): return llama.llama_model_n_embd_out(self.ptr)
    @property
    def n_layer(self): return llama.llama_model_n_layer(self.ptr)
    @property
    def n_head(self): return llama.llama_model_n_head(self.ptr)
    @property
    def n_head_kv(self): return llama.llama_model_n_head_kv(self.ptr)
    @property
    def n_params(self): return llama.llama_model_n_params(self.ptr)
    @property
    def size(self):
        """Bytes of all tensors."""
        return llama.llama_model_size(self.ptr)
    @property
    def has_encoder(self): return llama.llama_model_has_encoder(self.ptr)
    @property
    def has_decoder(self): return llama.llama_model_has_decoder(self.ptr)
    @property
    def is_recurrent(self): return llama.llama_model_is_recurrent(self.ptr)

    def chat_template(self, name=None):
        """The GGUF's chat template (`tokenizer.chat_template[.name]`), or None."""
        cdef bytes bname = name.encode() if name is not None else None
        cdef const char * t = llama.llama_model_chat_template(self.ptr, <const char *>bname if bname is not None else NULL)
        return t.decode("utf-8", "replace") if t != NULL else None

    # -- vocabulary --------------------------------------------------------------------------

    @property
    def token_bos(self): return llama.llama_vocab_bos(self.vocab)
    @property
    def token_eos(self): return llama.llama_vocab_eos(self.vocab)
    @property
    def token_eot(self): return llama.llama_vocab_eot(self.vocab)
    @property
    def token_nl(self): return llama.llama_vocab_nl(self.vocab)
    @property
    def token_sep(self): return llama.llama_vocab_sep(self.vocab)
    @property
    def token_pad(self): return llama.llama_vocab_pad(self.vocab)
    @property
    def add_bos(self): return llama.llama_vocab_get_add_bos(self.vocab)
    @property
    def add_eos(self): return llama.llama_vocab_get_add_eos(self.vocab)
    @property
    def vocab_type(self): return <int>llama.llama_vocab_get_type(self.vocab)

    def is_eog(self, int token):
        """True for end-of-generation tokens (EOS, EOT, ...)."""
        return 0 <= token < self.n_vocab and llama.llama_vocab_is_eog(self.vocab, token)

    def is_control(self, int token):
        return 0 <= token < self.n_vocab and llama.llama_vocab_is_control(self.vocab, token)

    def token_text(self, int token):
        self._check_token(token)
        return llama.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    def token_score(self, int token):
        self._check_token(token)
        return llama.llama_vocab_get_score(self.vocab, token)

    def _check_token(self, int token):
        if not 0 <= token < self.n_vocab:
            raise IndexError(f"token id {token} is out of range for a vocabulary of {self.n_vocab}")

    cdef int _check_tokens(self, const llama_token * tokens, Py_ssize_t n) except -1:
        cdef Py_ssize_t i
        for i in range(n):
            if tokens[i] < 0 or tokens[i] >= self.n_vocab:
                raise IndexError(f"token id {tokens[i]} at position {i} is out of range "
                                 f"for a vocabulary of {self.n_vocab}")
        return 0

    def tokenize(self, text, bint add_special=True, bint parse_special=False):
        """Token ids of `text` (str or UTF-8 bytes); add_special adds BOS/EOS as the model wants."""
        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            # bytes(12345) would silently tokenize 12345 NUL bytes
            raise TypeError(f"text must be str or bytes, not {type(text).__name__}")
        cdef bytes data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if len(data) > 0x7FFFFFF0:
            raise ValueError("text is too long to tokenize")
        cdef int32_t cap = len(data) + 8
        cdef llama_token * out = <llama_token *>malloc(cap * sizeof(llama_token))
        if out == NULL:
            raise MemoryError()
        cdef int32_t n
        try:
            n = llama.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
            if n < 0:
                cap = -n
                free(out)
                out = <llama_token *>malloc(cap * sizeof(llama_token))
                if out == NULL:
                    raise MemoryError()
                n = llama.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
            if n < 0:
                raise ValueError("tokenization failed")
            return [out[i] for i in range(n)]
        finally:
            free(out)

    cdef bytes _piece(self, llama_token token, bint special):
        cdef char buf[64]
        cdef int32_t n = llama.llama_token_to_piece(self.vocab, token, buf, sizeof(buf), 0, special)
        if n >= 0:
            return buf[:n]
        cdef char * big = <char *>malloc(-n)
        try:
            n = llama.llama_token_to_piece(self.vocab, token, big, -n, 0, special)
            return big[:max(n, 0)]
        finally:
            free(big)

    def token_to_piece(self, int token, bint special=False):
        """The bytes one token stands for (may be part of a multi-byte UTF-8 character)."""
        self._check_token(token)
        return self._piece(token, special)

    def detokenize(self, tokens, bint remove_special=False, bint unparse_special=False):
        """Bytes of a token sequence, as llama.cpp joins them (leading-space rules applied)."""
        cdef Py_ssize_t n = len(tokens)
        if n == 0:
            return b""
        cdef llama_token * buf = <llama_token *>malloc(n * sizeof(llama_token))
        cdef char * text = NULL
        cdef int32_t cap, got
        if buf == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                buf[i] = tokens[i]
            self._check_tokens(buf, n)
            cap = <int32_t>(n * 8 + 16)
            text = <char *>malloc(cap)
            got = llama.llama_detokenize(self.vocab, buf, n, text, cap, remove_special, unparse_special)
            if got < 0:
                cap = -got
                free(text)
                text = <char *>malloc(cap)
                got = llama.llama_detokenize(self.vocab, buf, n, text, cap, remove_special, unparse_special)
            if got < 0:
                raise ValueError("detokenization failed")
            return text[:got]
        finally:
            free(buf)
            free(text)


cdef llama.llama_model_kv_override * _build_kv_overrides(dict overrides) except NULL:
    """Array of llama_model_kv_override terminated by an empty key (caller frees)."""
    cdef Py_ssize_t n = len(overrides)
    cdef llama.llama_model_kv_override * arr = <llama.llama_model_kv_override *>calloc(n + 1, sizeof(llama.llama_model_kv_override))
    if arr == NULL:
        raise MemoryError()
    cdef bytes bkey, bval
    i = 0
    for key, value in overrides.items():
        bkey = str(key).encode()
        if len(bkey) >= 128:
            free(arr)
            raise ValueError(f"kv_overrides key {key!r} is longer than 127 bytes")
        strncpy(arr[i].key, bkey, 127)
        if isinstance(value, bool):
            arr[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_BOOL
            arr[i].val_bool = value
        elif isinstance(value, int):
            arr[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_INT
            arr[i].val_i64 = value
        elif isinstance(value, float):
            arr[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_FLOAT
            arr[i].val_f64 = value
        elif isinstance(value, str):
            bval = value.encode()
            if len(bval) >= 128:
                free(arr)
                raise ValueError(f"kv_overrides value for {key!r} is longer than 127 bytes")
            arr[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_STR
            strncpy(arr[i].val_str, bval, 127)
        else:
            free(arr)
            raise TypeError(f"kv_overrides value for {key!r} must be bool, int, float or str")
        i += 1
    return arr

