# Context: the inference state on one Model (KV cache, outputs, adapters, threads).
# Every input is checked before it reaches llama.cpp, which would abort on some bad ones
# (the creation parameters in core/context_params.pyx).


@cython.no_gc_clear
cdef class Context:
    """A llama.cpp context: KV cache for `n_seq_max` sequences sharing `n_ctx` cells.

    Logits and embeddings come back as zero-copy NumPy views that are valid until the next
    decode; copy them to keep them.
    """

    def __cinit__(self):
        self.ptr = NULL
        self._pool = NULL
        self._pool_batch = NULL
        self.abort_state.requested = False
        self.abort_state.callback = NULL

    def __init__(self, Model model not None, *, int n_ctx=512, int n_batch=512, int n_ubatch=512,
                 int n_seq_max=1, n_threads=None, n_threads_batch=None, bint embeddings=False,
                 pooling="unspecified", attention="unspecified", flash_attn="auto",
                 str type_k="f16", str type_v="f16", bint offload_kqv=True, bint kv_unified=False,
                 float rope_freq_base=0.0, float rope_freq_scale=0.0, bint no_perf=False,
                 rope_scaling_type="unspecified", float yarn_ext_factor=-1.0, float yarn_attn_factor=-1.0,
                 float yarn_beta_fast=-1.0, float yarn_beta_slow=-1.0, int yarn_orig_ctx=0,
                 bint op_offload=True, bint swa_full=True):
        """RoPE/YaRN values left negative (or 0) take the model's own; `rope_scaling_type` is a name
        (unspecified, none, linear, yarn, longrope) or llama.cpp's integer."""
        if self.ptr != NULL:
            raise RuntimeError("Context is already initialized")
        if model.ptr == NULL:
            raise ValueError("model is not loaded")
        cdef llama.llama_context_params p = _context_params(
            model, n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, n_threads_batch, embeddings, pooling,
            attention, flash_attn, type_k, type_v, offload_kqv, kv_unified, rope_freq_base, rope_freq_scale,
            no_perf, {"rope_scaling_type": rope_scaling_type, "yarn_ext_factor": yarn_ext_factor,
                      "yarn_attn_factor": yarn_attn_factor, "yarn_beta_fast": yarn_beta_fast,
                      "yarn_beta_slow": yarn_beta_slow, "yarn_orig_ctx": yarn_orig_ctx,
                      "op_offload": op_offload, "swa_full": swa_full})
        p.abort_callback = _abort_trampoline
        p.abort_callback_data = &self.abort_state
        self.model = model
        _error_mark()
        with nogil:
            self.ptr = llama.llama_init_from_model(model.ptr, p)
        if self.ptr == NULL:
            raise ValueError(f"failed to create context: {_errors_since_mark() or 'unknown reason'}")
        self._attach_pools()
        self.mem = llama.llama_get_memory(self.ptr)
        self.n_ctx = llama.llama_n_ctx(self.ptr)
        self.n_ctx_seq = llama.llama_n_ctx_seq(self.ptr)
        self.n_batch = llama.llama_n_batch(self.ptr)
        self.n_ubatch = llama.llama_n_ubatch(self.ptr)
        self.n_seq_max = llama.llama_n_seq_max(self.ptr)
        self.embeddings = embeddings
        self.kv_unified = kv_unified or self.n_seq_max == 1
        self._adapters = {}
        self._seq_adapters = {}

    def __dealloc__(self):
        if self.ptr != NULL:
            llama.llama_free(self.ptr)
            self.ptr = NULL
        self._free_pools()

    cdef int _attach_pools(self) except -1:
        """Persistent CPU thread pools of this context's own (core/threadpool.pyx)."""
        cdef ggml.ggml_threadpool * pool = NULL
        cdef ggml.ggml_threadpool * pool_batch = NULL
        _new_pools(llama.llama_n_threads(self.ptr), llama.llama_n_threads_batch(self.ptr), &pool, &pool_batch)
        llama.llama_attach_threadpool(self.ptr, pool, pool_batch)
        self._free_pools()
        self._pool, self._pool_batch = pool, pool_batch
        return 0

    cdef void _free_pools(self) noexcept:
        _free_pools(self._pool, self._pool_batch)
        self._pool = self._pool_batch = NULL

    def __repr__(self):
        return f"<Context n_ctx={self.n_ctx} n_seq_max={self.n_seq_max} model={self.model.path!r}>"

    # -- decoding ----------------------------------------------------------------------------

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _validate(self, Batch batch) except -1:
        cdef llama.llama_batch * b = &batch.b
        cdef int i, k, n_out = 0
        if b.n_tokens == 0:
            raise ValueError("batch is empty")
        if b.n_tokens > self.n_batch:
            raise ValueError(f"batch has {b.n_tokens} tokens, more than n_batch={self.n_batch}")
        if b.token != NULL:
            self.model._check_tokens(b.token, b.n_tokens)
        elif batch.embd != self.model.n_embd:
            raise ValueError(f"embeddings batch rows have {batch.embd} values; the model needs {self.model.n_embd}")
        for i in range(b.n_tokens):
            if b.pos[i] < 0 or b.pos[i] >= self.n_ctx_seq:
                raise ValueError(f"position {b.pos[i]} of batch token {i} is outside the context "
                                 f"(each sequence holds {self.n_ctx_seq} positions)")
            for k in range(b.n_seq_id[i]):
                if b.seq_id[i][k] < 0 or b.seq_id[i][k] >= self.n_seq_max:
                    raise ValueError(f"sequence id {b.seq_id[i][k]} of batch token {i} is outside "
                                     f"0..{self.n_seq_max - 1} (n_seq_max={self.n_seq_max})")
            n_out += b.logits[i] != 0
        self._n_outputs = n_out
        return 0

    cdef int _run(self, Batch batch, bint encode) except -1:
        self._validate(batch)
        cdef int32_t rc
        self.abort_state.requested = False
        _error_mark()
        with nogil:
            if encode:
                rc = llama.llama_encode(self.ptr, batch.b)
            else:
                rc = llama.llama_decode(self.ptr, batch.b)
        if rc == 0:
            return 0
        return self._raise_failed(rc, batch.b.n_tokens, encode)

    cdef int _raise_failed(self, int rc, int n_tokens, bint encode) except -1:
        """Raise the error of a failed llama_decode/llama_encode return code `rc`."""
        self._n_outputs = 0
        if rc == 1:
            raise ContextFullError(f"no KV cache slot for {n_tokens} tokens "
                                   f"(n_ctx={self.n_ctx}); free sequences or use a larger context")
        if rc == 2:
            raise DecodeAbortedError("decode was aborted")
        raise DecodeError(f"llama_{'encode' if encode else 'decode'} failed ({rc}): "
                          f"{_errors_since_mark() or 'see llama.cpp log'}")

    def decode(self, Batch batch not None):
        """Run the model on `batch`, appending its tokens to the KV cache. Releases the GIL."""
        self._run(batch, False)

    def encode(self, Batch batch not None):
        """Run an encoder (or a non-causal embedding model) on `batch` without using the KV cache."""
        self._run(batch, True)

    def abort(self):
        """Ask a running decode (in another thread) to stop at the next graph node."""
        self.abort_state.requested = True

    def set_abort_callback(self, callback):
        """`callback()` returning True stops a running decode; None removes it."""
        self.abort_callback = callback
        self.abort_state.callback = <void *>callback if callback is not None else NULL

    # -- outputs -----------------------------------------------------------------------------

    @property
    def n_outputs(self):
        return self._n_outputs

    def logits(self, int i=-1):
        """Logits of output `i` of the last decode (batch index; -1 = last output), zero-copy."""
        cdef float * p = llama.llama_get_logits_ith(self.ptr, i) if self._n_outputs else NULL
        if p == NULL:
            raise IndexError(f"no logits for batch index {i}: request them with logits=True")
        return np.asarray(<float[:self.model.n_vocab]>p)

    def all_logits(self):
        """All output rows of the last decode, shape (n_outputs, n_vocab), zero-copy."""
        cdef float * p = llama.llama_get_logits(self.ptr) if self._n_outputs else NULL
        if p == NULL:
            raise IndexError("the last decode produced no logits")
        return np.asarray(<float[:self._n_outputs, :self.model.n_vocab]>p)

    def embedding(self, int i=-1):
        """Embedding of output `i` (pooling 'none'), zero-copy."""
        cdef float * p = llama.llama_get_embeddings_ith(self.ptr, i) if self.embeddings else NULL
        if p == NULL:
            raise IndexError(f"no embedding for batch index {i} (context created with embeddings=True?)")
        return np.asarray(<float[:self.model.n_embd_out]>p)

    def sequence_embedding(self, int seq_id):
        """Pooled embedding of a sequence (pooling mean/cls/last), zero-copy."""
        if not 0 <= seq_id < self.n_seq_max:
            raise ValueError(f"sequence id {seq_id} outside 0..{self.n_seq_max - 1}")
        cdef float * p = llama.llama_get_embeddings_seq(self.ptr, seq_id) if self.embeddings else NULL
        if p == NULL:
            raise IndexError(f"no pooled embedding for sequence {seq_id} (pooling is {self.pooling!r})")
        n = 1 if llama.llama_get_pooling_type(self.ptr) == llama.LLAMA_POOLING_TYPE_RANK else self.model.n_embd_out
        return np.asarray(<float[:n]>p)

    @property
    def pooling(self):
        code = <int>llama.llama_get_pooling_type(self.ptr)
        return next(name for name, c in POOLING_TYPES.items() if c == code)

    def set_embeddings(self, bint value):
        llama.llama_set_embeddings(self.ptr, value)
        self.embeddings = value

    def set_causal_attn(self, bint value):
        llama.llama_set_causal_attn(self.ptr, value)

    # -- threads and perf --------------------------------------------------------------------

    @property
    def n_threads(self): return llama.llama_n_threads(self.ptr)
    @property
    def n_threads_batch(self): return llama.llama_n_threads_batch(self.ptr)

    def set_n_threads(self, int n_threads, int n_threads_batch=0):
        if n_threads <= 0 or n_threads_batch < 0:
            raise ValueError("n_threads must be positive")
        llama.llama_set_n_threads(self.ptr, n_threads, n_threads_batch or n_threads)
        self._attach_pools()                 # pools of the new sizes (a pool has a fixed number of threads)

    def perf(self):
        """llama.cpp's timing counters for this context."""
        cdef llama.llama_perf_context_data d = llama.llama_perf_context(self.ptr)
        return {"t_load_ms": d.t_load_ms, "t_p_eval_ms": d.t_p_eval_ms, "t_eval_ms": d.t_eval_ms,
                "n_p_eval": d.n_p_eval, "n_eval": d.n_eval, "n_reused": d.n_reused}

    def reset_perf(self):
        llama.llama_perf_context_reset(self.ptr)

    # -- LoRA (bodies in core/context_lora.pyx) ---------------------------------------------

    def set_adapters(self, adapters):
        """Apply exactly these adapters with these scales ({LoraAdapter: scale}); {} clears.

        This is the context-wide set, used by every sequence without its own
        (set_sequence_adapters). Only the context's adapter list changes: no weights are read
        or copied, but llama.cpp re-plans its compute graph on the next decode.
        """
        self._adapters = _adapters_apply(self, -1, adapters)

    @property
    def adapters(self):
        """The context-wide adapters and their scales."""
        return dict(self._adapters)

    def set_sequence_adapters(self, int seq_id, adapters):
        """Give sequence `seq_id` its own adapters ({LoraAdapter: scale}); {} means none at all.

        The sequence's tokens use this set instead of the context-wide one, so sequences with
        different adapters decode in one batch: each adapter's delta is computed once for the
        tokens that use it. Changing a set or a scale takes effect on the next decode with no
        reload and no graph rebuild. KV already computed for the sequence stays as computed
        under its old set: clear it (kv_remove) unless that is what you want.
        """
        self._check_seq(seq_id, False)
        self._seq_adapters[seq_id] = _adapters_apply(self, seq_id, adapters)

    def clear_sequence_adapters(self, int seq_id):
        """Sequence `seq_id` goes back to the context-wide adapters (set_adapters)."""
        self._check_seq(seq_id, False)
        if llama.llama_clear_adapters_lora_seq(self.ptr, seq_id) != 0:
            raise ValueError(f"llama.cpp refused to clear the adapters of sequence {seq_id}")
        self._seq_adapters.pop(seq_id, None)

    def sequence_adapters(self, int seq_id):
        """The adapters sequence `seq_id` decodes with: its own set, else the context-wide one."""
        self._check_seq(seq_id, False)
        return dict(self._seq_adapters.get(seq_id, self._adapters))

    def reserve_adapter_pool(self, adapters):
        """Copy these adapters (an iterable of LoraAdapter) into llama.cpp's LoRA slot pool now.

        A batch mixing adapter sets reads each token's adapters from that pool; the first batch
        to mix adapters the pool lacks allocates or grows it and copies them, which takes a
        second or more for large adapters. Calling this when the adapters load moves that cost
        there, and sizes the pool for exactly these adapters. Adapters the pool cannot take
        (expert weights, several ranks in one adapter) are skipped.
        """
        _adapter_pool_reserve(self, adapters)

    # -- KV cache ----------------------------------------------------------------------------

    cdef int _check_seq(self, int seq_id, bint allow_all) except -1:
        if (allow_all and seq_id == -1) or 0 <= seq_id < self.n_seq_max:
            return 0
        raise ValueError(f"sequence id {seq_id} outside 0..{self.n_seq_max - 1}")

    def kv_clear(self):
        llama.llama_memory_clear(self.mem, True)

    def kv_remove(self, int seq_id=-1, int p0=-1, int p1=-1):
        """Drop positions [p0, p1) of a sequence (-1 = all sequences / open end). False if refused."""
        self._check_seq(seq_id, True)
        return llama.llama_memory_seq_rm(self.mem, seq_id, p0, p1)

    def kv_copy(self, int src, int dst, int p0=-1, int p1=-1):
        """Share positions [p0, p1) of sequence `src` with sequence `dst`.

        With a unified KV cache (kv_unified=True) only cell metadata changes. Otherwise each
        sequence has its own stream and the whole sequence is copied, so only a full copy
        (p0 <= 0, p1 < 0) is possible: llama.cpp aborts the process on a partial one.
        """
        self._check_seq(src, False)
        self._check_seq(dst, False)
        if not self.kv_unified and src != dst and (p0 > 0 or 0 < p1 < self.n_ctx_seq):
            raise ValueError(f"kv_copy of positions [{p0}, {p1}) between sequences needs a context "
                             f"created with kv_unified=True; without it only whole sequences "
                             f"can be copied (p0=-1, p1=-1)")
        if self.sequence_adapters(src) != self.sequence_adapters(dst):
            # the cells would then hold KV that dst's adapters did not compute, and shared
            # cells are computed once for all their sequences (llama.cpp refuses that batch)
            raise ValueError(f"kv_copy between sequences {src} and {dst}, which decode with "
                             f"different adapter sets; give {dst} the adapters of {src} first")
        llama.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def kv_keep(self, int seq_id):
        """Drop every sequence but `seq_id`."""
        self._check_seq(seq_id, False)
        llama.llama_memory_seq_keep(self.mem, seq_id)
        if not self.kv_unified:
            # llama.cpp's seq_keep only clears the stream of `seq_id`; with one stream per
            # sequence the others must be removed one by one.
            for s in range(self.n_seq_max):
                if s != seq_id:
                    llama.llama_memory_seq_rm(self.mem, s, -1, -1)

    def kv_shift(self, int seq_id, int p0, int p1, int delta):
        """Add `delta` to the positions [p0, p1) of a sequence (context shifting)."""
        self._check_seq(seq_id, False)
        if not llama.llama_memory_can_shift(self.mem):
            raise ValueError("this model's memory does not support position shifts")
        llama.llama_memory_seq_add(self.mem, seq_id, p0, p1, delta)

    def kv_pos_min(self, int seq_id):
        self._check_seq(seq_id, False)
        return llama.llama_memory_seq_pos_min(self.mem, seq_id)

    def kv_pos_max(self, int seq_id):
        """Largest cached position of the sequence, -1 if empty."""
        self._check_seq(seq_id, False)
        return llama.llama_memory_seq_pos_max(self.mem, seq_id)

    # -- state (bodies in core/context_state.pyx) ---------------------------------------------

    def save_state(self):
        """The whole context state as bytes: the KV cache (llama.cpp does not save the outputs)."""
        return _state_save(self)

    def load_state(self, const uint8_t[::1] data not None):
        """Restore a state from save_state(); ValueError if it does not fit this context."""
        _state_load(self, data)

    def save_sequence_state(self, int seq_id):
        """One sequence's KV cache as bytes."""
        return _sequence_state_save(self, seq_id)

    def load_sequence_state(self, const uint8_t[::1] data not None, int seq_id):
        """Restore one sequence's KV cache from save_sequence_state(); ValueError if it does not fit."""
        _sequence_state_load(self, data, seq_id)

    def save_state_file(self, path, tokens=()):
        """Write the state and the `tokens` it was computed from to a session file."""
        _state_save_file(self, path, tokens)

    def load_state_file(self, path):
        """Restore a session file; returns the tokens it was saved with."""
        return _state_load_file(self, path)
