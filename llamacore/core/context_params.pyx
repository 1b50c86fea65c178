# Context options: the names of llamacore.gguf.load_options mapped to the enums llama.h / ggml.h declare,
# and the checked llama_context_params a Context is created with.

_KV_CACHE_TYPES = {                 # llamacore.gguf.load_options.KV_CACHE_TYPES, in that order
    "f32": ggml.GGML_TYPE_F32, "f16": ggml.GGML_TYPE_F16, "bf16": ggml.GGML_TYPE_BF16,
    "q8_0": ggml.GGML_TYPE_Q8_0, "q4_0": ggml.GGML_TYPE_Q4_0, "q4_1": ggml.GGML_TYPE_Q4_1,
    "q5_0": ggml.GGML_TYPE_Q5_0, "q5_1": ggml.GGML_TYPE_Q5_1,
}
POOLING_TYPES = {                   # llamacore.gguf.load_options.POOLING_TYPES
    "unspecified": llama.LLAMA_POOLING_TYPE_UNSPECIFIED, "none": llama.LLAMA_POOLING_TYPE_NONE,
    "mean": llama.LLAMA_POOLING_TYPE_MEAN, "cls": llama.LLAMA_POOLING_TYPE_CLS,
    "last": llama.LLAMA_POOLING_TYPE_LAST, "rank": llama.LLAMA_POOLING_TYPE_RANK,
}
_ATTENTION_TYPES = {                # llamacore.gguf.load_options.ATTENTION_TYPES
    "unspecified": llama.LLAMA_ATTENTION_TYPE_UNSPECIFIED, "causal": llama.LLAMA_ATTENTION_TYPE_CAUSAL,
    "non_causal": llama.LLAMA_ATTENTION_TYPE_NON_CAUSAL,
}
ROPE_SCALING_TYPES = {              # llama-cpp-python's rope_scaling_type, by name
    "unspecified": llama.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, "none": llama.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": llama.LLAMA_ROPE_SCALING_TYPE_LINEAR, "yarn": llama.LLAMA_ROPE_SCALING_TYPE_YARN,
    "longrope": llama.LLAMA_ROPE_SCALING_TYPE_LONGROPE,
}
_FLASH_ATTN = {                     # llamacore.gguf.load_options.FLASH_ATTN, plus None / True / False
    "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO, None: llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED, True: llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED, False: llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
    "prompts": llama.LLAMA_FLASH_ATTN_TYPE_PROMPTS,
}


def _ggml_type_name(int type_code):
    """ggml's own name of a ggml_type (tests check _KV_CACHE_TYPES against it)."""
    return ggml.ggml_type_name(<ggml.ggml_type>type_code).decode()


cdef cbool _abort_trampoline(void * data) noexcept nogil:
    cdef _AbortState * state = <_AbortState *>data
    if state.requested:
        return True
    if state.callback == NULL:
        return False
    with gil:
        try:
            return bool((<object>state.callback)())
        except BaseException:
            return True


cdef llama.llama_pooling_type _pooling_code(pooling) except? llama.LLAMA_POOLING_TYPE_UNSPECIFIED:
    if isinstance(pooling, str):
        if pooling not in POOLING_TYPES:
            raise ValueError(f"unknown pooling {pooling!r}; expected one of {sorted(POOLING_TYPES)}")
        return POOLING_TYPES[pooling]
    cdef int code = int(pooling)
    return <llama.llama_pooling_type>code


cdef llama.llama_context_params _context_params(
        Model model, int n_ctx, int n_batch, int n_ubatch, int n_seq_max, n_threads, n_threads_batch,
        bint embeddings, pooling, attention, flash_attn, str type_k, str type_v, bint offload_kqv,
        bint kv_unified, float rope_freq_base, float rope_freq_scale, bint no_perf, dict rope) except *:
    """Context.__init__'s arguments, checked (llama.cpp aborts on some bad ones), as llama.cpp's params."""
    if n_ctx < 0 or n_batch <= 0 or n_ubatch <= 0:
        raise ValueError("n_ctx must be >= 0 (0 = the model's training context); n_batch and n_ubatch > 0")
    if n_ubatch > n_batch:
        n_ubatch = n_batch
    if not 1 <= n_seq_max <= llama.llama_max_parallel_sequences():
        raise ValueError(f"n_seq_max must be between 1 and {llama.llama_max_parallel_sequences()}")
    if n_seq_max > 1:
        # llama.cpp reserves its worst-case graph for min(n_ctx, n_ubatch) tokens split over
        # n_seq_max sequences; when that does not divide evenly it rounds the token count up
        # but not the output count, and mean pooling then fails GGML_ASSERT(ggml_can_mul_mat)
        # (the process aborts). Keep the micro-batch a multiple of n_seq_max.
        limit = n_ctx if n_ctx > 0 else model.n_ctx_train
        if 0 < limit < n_ubatch:
            n_ubatch = limit
        if n_ubatch % n_seq_max:
            n_ubatch = max(n_seq_max, n_ubatch - n_ubatch % n_seq_max)
            n_batch = max(n_batch, n_ubatch)
    for name, t in (("type_k", type_k), ("type_v", type_v)):
        if t not in _KV_CACHE_TYPES:
            raise ValueError(f"{name} {t!r} is not a KV cache type; expected one of {sorted(_KV_CACHE_TYPES)}")
    if flash_attn not in _FLASH_ATTN:
        raise ValueError("flash_attn must be 'auto', True/'on', False/'off' or 'prompts'")
    if attention not in _ATTENTION_TYPES:
        raise ValueError(f"attention {attention!r} is not one of {', '.join(_ATTENTION_TYPES)}")
    cpu = os.cpu_count() or 1
    cdef llama.llama_context_params p = llama.llama_context_default_params()
    p.n_ctx = n_ctx
    p.n_batch = n_batch
    p.n_ubatch = n_ubatch
    p.n_seq_max = n_seq_max
    p.n_threads = n_threads or cpu
    p.n_threads_batch = n_threads_batch or n_threads or cpu
    p.embeddings = embeddings
    p.pooling_type = _pooling_code(pooling)
    p.attention_type = _ATTENTION_TYPES[attention]
    p.flash_attn_type = _FLASH_ATTN[flash_attn]
    p.type_k = _KV_CACHE_TYPES[type_k]
    p.type_v = _KV_CACHE_TYPES[type_v]
    p.offload_kqv = offload_kqv
    p.kv_unified = kv_unified
    p.rope_freq_base = rope_freq_base
    p.rope_freq_scale = rope_freq_scale
    p.no_perf = no_perf
    _rope_params(&p, rope)
    return p


cdef int _rope_params(llama.llama_context_params * p, dict rope) except -1:
    """RoPE scaling and YaRN overrides (negative or 0: the model's own value), and op_offload / swa_full."""
    scaling = rope.get("rope_scaling_type", "unspecified")
    if scaling in ROPE_SCALING_TYPES:
        scaling = ROPE_SCALING_TYPES[scaling]
    if scaling not in ROPE_SCALING_TYPES.values():
        raise ValueError(f"rope_scaling_type {scaling!r} is not one of {', '.join(ROPE_SCALING_TYPES)} "
                         f"(or llama.cpp's -1..3)")
    p.rope_scaling_type = <llama.llama_rope_scaling_type><int>scaling
    for name in ("yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow"):
        value = float(rope.get(name, -1.0))
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number (negative: the model's own value)")
    p.yarn_ext_factor = rope.get("yarn_ext_factor", -1.0)
    p.yarn_attn_factor = rope.get("yarn_attn_factor", -1.0)
    p.yarn_beta_fast = rope.get("yarn_beta_fast", -1.0)
    p.yarn_beta_slow = rope.get("yarn_beta_slow", -1.0)
    orig = int(rope.get("yarn_orig_ctx", 0))
    if not 0 <= orig < 2**31:
        raise ValueError("yarn_orig_ctx must be >= 0 (0: the model's own value)")
    p.yarn_orig_ctx = orig
    p.op_offload = bool(rope.get("op_offload", True))
    p.swa_full = bool(rope.get("swa_full", True))
    return 0
