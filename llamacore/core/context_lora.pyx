# A Context's LoRA adapters: the context-wide set, each sequence's own set, and the slot pool
# that mixed-adapter batches read (vendor/patches/0001, 0002). Context's LoRA methods call these.


cdef dict _adapters_apply(Context ctx, int seq_id, adapters):
    """Give sequence `seq_id` (-1: the whole context) exactly these adapters; returns them checked.

    Every key must be a LoraAdapter of this context's model and every scale finite.
    """
    checked = {}
    for adapter, scale in dict(adapters).items():
        _adapter_check(ctx, adapter)
        value = float(scale)
        if not math.isfinite(value):
            raise ValueError(f"scale of adapter {(<LoraAdapter>adapter).path} must be a finite number, got {scale!r}")
        checked[adapter] = value
    cdef vector[llama.llama_adapter_lora *] ptrs
    cdef vector[float] scales
    for adapter, value in checked.items():
        ptrs.push_back((<LoraAdapter>adapter).ptr)
        scales.push_back(value)
    cdef int32_t rc
    if seq_id < 0:
        rc = llama.llama_set_adapters_lora(ctx.ptr, ptrs.data(), ptrs.size(), scales.data())
    else:
        rc = llama.llama_set_adapters_lora_seq(ctx.ptr, seq_id, ptrs.data(), ptrs.size(), scales.data())
    if rc != 0:
        whose = "the context" if seq_id < 0 else f"sequence {seq_id}"
        raise ValueError(f"llama.cpp refused the adapter set of {whose} ({rc})")
    return checked


cdef _adapter_check(Context ctx, adapter):
    if not isinstance(adapter, LoraAdapter):
        raise TypeError(f"expected LoraAdapter keys, got {type(adapter).__name__}")
    if (<LoraAdapter>adapter).model is not ctx.model:
        raise ValueError(f"adapter {(<LoraAdapter>adapter).path} was loaded for another model")


cdef _adapter_pool_reserve(Context ctx, adapters):
    """Reserve the slot pool for these adapters; llama.cpp refuses more than its pool holds (-1)."""
    unique = list(dict.fromkeys(adapters))
    for adapter in unique:
        _adapter_check(ctx, adapter)
    cdef vector[llama.llama_adapter_lora *] ptrs
    for adapter in unique:
        ptrs.push_back((<LoraAdapter>adapter).ptr)
    cdef int32_t rc
    _error_mark()
    with nogil:
        rc = llama.llama_reserve_adapters_lora_pool(ctx.ptr, ptrs.data(), ptrs.size())
    if rc == -2:
        raise MemoryError("llama.cpp could not allocate the LoRA slot pool")
    if rc != 0:
        raise ValueError(f"llama.cpp refused to reserve the LoRA slot pool: {_errors_since_mark() or rc}")
