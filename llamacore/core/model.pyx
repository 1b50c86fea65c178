# Model: a loaded GGUF (weights + vocabulary). Owns its llama_model; adapters and contexts hold
# a reference to it so it is freed last.


ctypedef int32_t (*_meta_getter)(const void *, int32_t, char *, size_t) noexcept nogil


cdef bytes _meta_string(_meta_getter getter, const void * obj, int32_t i):
    cdef char small[256]
    cdef int32_t n = getter(obj, i, small, sizeof(small))
    if n < 0:
        return None
    if n < <int32_t>sizeof(small):
        return small[:n]
    cdef vector[char] big = vector[char](n + 1)
    getter(obj, i, big.data(), n + 1)
    return big.data()[:n]


cdef dict _meta_dict(const void * obj, int32_t count, _meta_getter key_getter, _meta_getter val_getter):
    """{key: value} of the GGUF metadata of a model or adapter (llama.cpp gives scalars as strings)."""
    cdef dict out = {}
    cdef int32_t i
    for i in range(count):
        key = _meta_string(key_getter, obj, i)
        val = _meta_string(val_getter, obj, i)
        if key is not None:
            out[key.decode("utf-8", "replace")] = (val or b"").decode("utf-8", "replace")
    return out


cdef int32_t _model_key(const void * m, int32_t i, char * buf, size_t size) noexcept nogil:
    return llama.llama_model_meta_key_by_index(<const llama.llama_model *>m, i, buf, size)


cdef int32_t _model_val(const void * m, int32_t i, char * buf, size_t size) noexcept nogil:
    return llama.llama_model_meta_val_str_by_index(<const llama.llama_model *>m, i, buf, size)


_SPLIT_MODES = {"none": llama.LLAMA_SPLIT_MODE_NONE, "layer": llama.LLAMA_SPLIT_MODE_LAYER,      # the names of
                "row": llama.LLAMA_SPLIT_MODE_ROW, "tensor": llama.LLAMA_SPLIT_MODE_TENSOR}      # llamacore.gguf.load_options.SPLIT_MODES


def _cpu_has_amx():
    """Whether this CPU has AMX (Sapphire Rapids and later), from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_int8" in line.split()
    except OSError:
        pass
    return False


# ggml's AMX buffer type (one of the CPU's "extra" buffer types) crashes some AMX machines at the
# first batched product of a quantized model (llama.cpp issue 20824, unfixed; seen here on q4_0 and
# q8_0, in llama-bench too). On AMX CPUs llamacore keeps quantized weights out of it
# (GGML_CPU_AMX_QUANTIZED=0, vendor/patches/0003, set before the backend starts unless the
# environment sets it): they take the repack buffer type (q4_0 prompts ~30% faster than unrepacked),
# and F16 weights keep AMX's kernels (faster generation, more so with vendor/patches/0009's
# prefetching), which do not crash. Where the
# environment lets quantized weights into AMX (GGML_CPU_AMX_QUANTIZED=1), a quantized model's
# weights are not put in extra buffer types unless asked.
_AMX_CPU = _cpu_has_amx()
if _AMX_CPU:
    os.environ.setdefault("GGML_CPU_AMX_QUANTIZED", "0")
DEFAULT_EXTRA_BUFTS = not _AMX_CPU or os.environ["GGML_CPU_AMX_QUANTIZED"] == "0"
_UNQUANTIZED_FTYPES = frozenset({0, 1, 32})         # llama_ftype ALL_F32, MOSTLY_F16, MOSTLY_BF16


def default_extra_bufts(path):
    """Whether a Model loads `path`'s weights into the CPU's extra buffer types unless told: always,
    except a quantized (or unknown) file on an AMX CPU whose environment lets ggml's AMX buffer type
    take quantized weights."""
    if DEFAULT_EXTRA_BUFTS:
        return True
    from llamacore.gguf.header import read_header

    try:
        ftype = read_header(path, ("general.file_type",)).metadata.get("general.file_type")
    except (OSError, ValueError):
        return False
    return ftype in _UNQUANTIZED_FTYPES
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

    def __init__(self, path, *, n_gpu_layers=None, bint use_mmap=True, bint use_mlock=False,
                 bint vocab_only=False, int main_gpu=0, tensor_split=None, dict kv_overrides=None,
                 str split_mode="layer", bint check_tensors=False, rpc_servers=None, use_extra_bufts=None):
        """`rpc_servers` ("host:port", ...): put the offloaded layers on those ggml RPC workers
        (llamaserve rpc-worker), weighed by `tensor_split`; each is checked before loading
        (llamacore.rpc.RPCUnavailableError). `n_gpu_layers` None means 0, or every layer
        when `rpc_servers` is given. `use_extra_bufts` lets llama.cpp repack weights into the CPU's
        faster layouts (llama-server's --repack); None means yes (default_extra_bufts: except for a
        quantized model on an AMX CPU whose environment lets ggml's crashing AMX kernels take it)."""
        if self.ptr != NULL:
            raise RuntimeError("Model is already initialized")
        self.path = _check_gguf_file(path, "model")
        if split_mode not in _SPLIT_MODES:
            raise ValueError(f"split_mode {split_mode!r} is not one of {', '.join(_SPLIT_MODES)}")
        if isinstance(rpc_servers, str):
            rpc_servers = [s for s in rpc_servers.split(",") if s.strip()]   # llama-server's --rpc spelling
        cdef llama.llama_model_params params = llama.llama_model_default_params()
        params.n_gpu_layers = (-1 if rpc_servers else 0) if n_gpu_layers is None else n_gpu_layers
        params.load_mode = _LOAD_MODES[(use_mmap, use_mlock)]
        params.vocab_only = vocab_only
        params.main_gpu = main_gpu
        params.check_tensors = check_tensors
        params.use_extra_bufts = default_extra_bufts(self.path) if use_extra_bufts is None else bool(use_extra_bufts)
        params.split_mode = _SPLIT_MODES[split_mode]

        cdef vector[float] split            # these must outlive the load call
        cdef vector[llama.llama_model_kv_override] overrides
        cdef vector[ggml.ggml_backend_dev_t] devices
        cdef bytes bpath = self.path.encode()
        cdef const char * cpath = bpath
        if tensor_split:
            if len(tensor_split) > llama.llama_max_devices():
                raise ValueError(f"tensor_split has {len(tensor_split)} entries; "
                                 f"at most {llama.llama_max_devices()} devices are supported")
            split.resize(llama.llama_max_devices(), 0.0)
            for i, fraction in enumerate(tensor_split):
                split[i] = fraction
            params.tensor_split = split.data()
        if kv_overrides:
            _build_kv_overrides(kv_overrides, overrides)
            params.kv_overrides = overrides.data()
        if rpc_servers and not vocab_only:
            _rpc_devices(list(rpc_servers), devices, RPC_PREFLIGHT_TIMEOUT)
            devices.push_back(NULL)
            params.devices = devices.data()
        _error_mark()
        with nogil:
            self.ptr = llama.llama_model_load_from_file(cpath, params)
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
            self._metadata = _meta_dict(self.ptr, llama.llama_model_meta_count(self.ptr), _model_key, _model_val)
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
    def n_embd_inp(self):
        """Width of an input embedding row (what a multimodal projector must produce)."""
        return llama.llama_model_n_embd_inp(self.ptr)
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
    @property
    def is_hybrid(self):
        """Attention layers mixed with recurrent ones (Jamba, Falcon-H1, ...)."""
        return llama.llama_model_is_hybrid(self.ptr)

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

    @cython.boundscheck(False)
    @cython.wraparound(False)
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
        cdef vector[llama_token] out = vector[llama_token](len(data) + 8)
        cdef const char * text_p = data
        cdef int32_t size = len(data), n
        with nogil:                     # megabytes of text take seconds: other threads run meanwhile
            n = llama.llama_tokenize(self.vocab, text_p, size, out.data(), out.size(), add_special, parse_special)
            if n < 0:
                out.resize(-n)
                n = llama.llama_tokenize(self.vocab, text_p, size, out.data(), out.size(), add_special, parse_special)
        if n < 0:
            raise ValueError("tokenization failed")
        return [out[i] for i in range(n)]

    cdef bytes _piece(self, llama_token token, bint special):
        cdef char buf[64]
        cdef int32_t n = llama.llama_token_to_piece(self.vocab, token, buf, sizeof(buf), 0, special)
        if n >= 0:
            return buf[:n]
        cdef vector[char] big = vector[char](-n)
        n = llama.llama_token_to_piece(self.vocab, token, big.data(), big.size(), 0, special)
        return big.data()[:max(n, 0)]

    def token_to_piece(self, int token, bint special=False):
        """The bytes one token stands for (may be part of a multi-byte UTF-8 character)."""
        self._check_token(token)
        return self._piece(token, special)

    def detokenize(self, tokens, bint remove_special=False, bint unparse_special=False):
        """Bytes of a token sequence, as llama.cpp joins them (leading-space rules applied)."""
        cdef Py_ssize_t n = len(tokens)
        if n == 0:
            return b""
        cdef vector[llama_token] ids = vector[llama_token](n)
        cdef Py_ssize_t i
        for i in range(n):
            ids[i] = tokens[i]
        self._check_tokens(ids.data(), n)
        cdef vector[char] text = vector[char](n * 8 + 16)
        cdef int32_t got
        with nogil:
            got = llama.llama_detokenize(self.vocab, ids.data(), n, text.data(), text.size(),
                                         remove_special, unparse_special)
            if got < 0:
                text.resize(-got)
                got = llama.llama_detokenize(self.vocab, ids.data(), n, text.data(), text.size(),
                                             remove_special, unparse_special)
        if got < 0:
            raise ValueError("detokenization failed")
        return text.data()[:got]


cdef int _build_kv_overrides(dict overrides, vector[llama.llama_model_kv_override] & out) except -1:
    """Fill `out` with one llama_model_kv_override per entry plus the empty-key terminator."""
    out.resize(len(overrides) + 1)            # value-initialised: the last one stays all zero
    cdef bytes bkey, bval
    cdef Py_ssize_t i = 0
    for key, value in overrides.items():
        bkey = str(key).encode()
        if len(bkey) >= 128:
            raise ValueError(f"kv_overrides key {key!r} is longer than 127 bytes")
        strncpy(out[i].key, bkey, 127)
        if isinstance(value, bool):
            out[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_BOOL
            out[i].val_bool = value
        elif isinstance(value, int):
            out[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_INT
            out[i].val_i64 = value
        elif isinstance(value, float):
            out[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_FLOAT
            out[i].val_f64 = value
        elif isinstance(value, str):
            bval = value.encode()
            if len(bval) >= 128:
                raise ValueError(f"kv_overrides value for {key!r} is longer than 127 bytes")
            out[i].tag = llama.LLAMA_KV_OVERRIDE_TYPE_STR
            strncpy(out[i].val_str, bval, 127)
        else:
            raise TypeError(f"kv_overrides value for {key!r} must be bool, int, float or str")
        i += 1
    return 0
