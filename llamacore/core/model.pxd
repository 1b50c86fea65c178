cdef class Model:
    cdef llama.llama_model * ptr
    cdef const llama.llama_vocab * vocab
    cdef readonly str path
    cdef readonly int n_vocab
    cdef object _metadata

    cdef bytes _piece(self, llama_token token, bint special)
    cdef int _check_tokens(self, const llama_token * tokens, Py_ssize_t n) except -1
