# CPU thread pools for a Context (as llama-bench attaches them): without them ggml builds and frees
# a pool's state around every graph it computes. A pool serves one context: two contexts decoding
# at once must not share one (its state belongs to the graph being computed).


cdef int _new_pools(int n_threads, int n_threads_batch, ggml.ggml_threadpool ** pool,
                    ggml.ggml_threadpool ** pool_batch) except -1:
    """A pool of `n_threads` and, when it differs, one of `n_threads_batch` (else the same pool)."""
    cdef ggml.ggml_threadpool_params params = ggml.ggml_threadpool_params_default(n_threads)
    pool[0] = ggml.ggml_threadpool_new(&params)
    if pool[0] == NULL:
        raise MemoryError("could not create the CPU thread pool")
    pool_batch[0] = pool[0]
    if n_threads_batch != n_threads:
        params = ggml.ggml_threadpool_params_default(n_threads_batch)
        pool_batch[0] = ggml.ggml_threadpool_new(&params)
        if pool_batch[0] == NULL:
            ggml.ggml_threadpool_free(pool[0])
            pool[0] = NULL
            raise MemoryError("could not create the CPU thread pool")
    return 0


cdef void _free_pools(ggml.ggml_threadpool * pool, ggml.ggml_threadpool * pool_batch) noexcept:
    if pool_batch != NULL and pool_batch != pool:
        ggml.ggml_threadpool_free(pool_batch)
    if pool != NULL:
        ggml.ggml_threadpool_free(pool)
