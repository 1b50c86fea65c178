cdef class Sampler:
    cdef llama.llama_sampler * chain
    cdef readonly list stages
    cdef int n_vocab    # vocabulary size of the model given to grammar/logit_bias; 0 if none
    cdef bint argmax_only   # the chain is just greedy: pick the argmax without building candidates
    cdef vector[llama.llama_sampler *] grammars   # the grammar stages (owned by the chain)

    cdef _add(self, llama.llama_sampler * stage, str name)
    cdef int _check_chain(self) except -1
    cdef bint grammar_exhausted(self) noexcept nogil
