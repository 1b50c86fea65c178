cdef class TokenLoop:
    cdef Context ctx
    cdef Sampler sampler
    cdef Batch batch                # one token: the sampled token decoded at `pos`
    cdef readonly int seq_id
    cdef readonly int pos           # where the next decoded token goes
    cdef readonly int remaining     # tokens still to sample (the budget)
    cdef readonly bint ignore_eos
    cdef readonly object finish     # None while running, then "eog" | "stop" | "length"
    cdef vector[string] stops       # stop strings, UTF-8 encoded
    cdef string window              # the end of the text so far, for stops spanning tokens
    cdef size_t keep                # bytes of `window` kept between tokens (longest stop - 1)
    cdef int error                  # a failed decode's return code, raised on the next run

    cdef int _loop(self, int n, vector[llama_token] * tokens, string * text, int * rc) noexcept nogil
    cdef llama_token _sample(self) noexcept nogil
    cdef bint _stopped(self) noexcept nogil
