cdef class Sampler:
    cdef llama.llama_sampler * chain
    cdef readonly list stages

    cdef _add(self, llama.llama_sampler * stage, str name)
