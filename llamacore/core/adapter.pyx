# LoraAdapter: a LoRA loaded once onto one Model. Applying it (Context.set_adapters) only
# changes which adapters and scales the context's graph uses; nothing is re-read.
# no_gc_clear keeps `model` alive during dealloc: the adapter must be freed before its model.


cdef int32_t _adapter_key(const void * a, int32_t i, char * buf, size_t size) noexcept nogil:
    return llama.llama_adapter_meta_key_by_index(<const llama.llama_adapter_lora *>a, i, buf, size)


cdef int32_t _adapter_val(const void * a, int32_t i, char * buf, size_t size) noexcept nogil:
    return llama.llama_adapter_meta_val_str_by_index(<const llama.llama_adapter_lora *>a, i, buf, size)


@cython.no_gc_clear
cdef class LoraAdapter:
    """A LoRA adapter (GGUF, general.type = adapter) loaded for `model`.

    Raises FileNotFoundError for a missing file and ValueError for a file that is not an
    adapter or was made for another base model (architecture or tensor shapes differ).
    """

    def __cinit__(self):
        self.ptr = NULL

    def __init__(self, Model model not None, path):
        if self.ptr != NULL:
            raise RuntimeError("LoraAdapter is already initialized")
        self.path = _check_gguf_file(path, "LoRA adapter")
        self.model = model
        cdef bytes bpath = self.path.encode()
        cdef const char * cpath = bpath
        _error_mark()
        with nogil:
            self.ptr = llama.llama_adapter_lora_init(model.ptr, cpath)
        if self.ptr == NULL:
            reason = _errors_since_mark() or "unknown reason"
            raise ValueError(f"failed to load LoRA adapter {self.path} for model "
                             f"{model.path} ({model.architecture}): {reason}")

    def __dealloc__(self):
        if self.ptr != NULL and self.model is not None and self.model.ptr != NULL:
            llama.llama_adapter_lora_free(self.ptr)
        self.ptr = NULL

    def __repr__(self):
        return f"<LoraAdapter {self.path!r} alpha={self.alpha}>"

    @property
    def metadata(self):
        """Scalar GGUF metadata of the adapter file, as strings."""
        if self._metadata is None:
            self._metadata = _meta_dict(self.ptr, llama.llama_adapter_meta_count(self.ptr),
                                        _adapter_key, _adapter_val)
        return dict(self._metadata)

    @property
    def alpha(self):
        """adapter.lora.alpha (0.0 when the file does not set it)."""
        return float(self.metadata.get("adapter.lora.alpha", 0.0) or 0.0)

    @property
    def architecture(self):
        return self.metadata.get("general.architecture", "")

    @property
    def base_model(self):
        """The base model name the adapter declares, if any."""
        meta = self.metadata
        return meta.get("general.base_model.0.name") or meta.get("general.name")
