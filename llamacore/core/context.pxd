cdef struct _AbortState:
    bint requested          # set by Context.abort(); checked without the GIL
    void * callback         # borrowed PyObject* (Context keeps the reference) or NULL


cdef class Context:
    cdef llama.llama_context * ptr
    cdef llama.llama_memory_t mem
    cdef readonly Model model
    cdef readonly int n_ctx
    cdef readonly int n_ctx_seq
    cdef readonly int n_batch
    cdef readonly int n_ubatch
    cdef readonly int n_seq_max
    cdef readonly bint embeddings
    cdef readonly bint kv_unified   # one KV stream shared by all sequences (else one per sequence)
    cdef int _n_outputs
    cdef _AbortState abort_state
    cdef object abort_callback
    cdef dict _adapters
    cdef dict _seq_adapters         # seq_id -> {LoraAdapter: scale}: keeps them alive while in use
    cdef ggml.ggml_threadpool * _pool           # CPU threads for generation steps (owned)
    cdef ggml.ggml_threadpool * _pool_batch     # ...and for prompt batches (owned; may be _pool)

    cdef int _validate(self, Batch batch) except -1
    cdef int _run(self, Batch batch, bint encode) except -1
    cdef int _raise_failed(self, int rc, int n_tokens, bint encode) except -1
    cdef int _check_seq(self, int seq_id, bint allow_all) except -1
    cdef int _attach_pools(self) except -1
    cdef void _free_pools(self) noexcept
