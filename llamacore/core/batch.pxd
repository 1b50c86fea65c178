cdef class Batch:
    cdef llama.llama_batch b
    cdef bint allocated
    cdef readonly int capacity
    cdef readonly int embd
    cdef readonly int n_seq_max

    cdef int _push(self, llama_token token, llama_pos pos, llama_seq_id seq_id, bint logits) except -1
