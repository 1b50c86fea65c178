cdef class LoraAdapter:
    cdef llama.llama_adapter_lora * ptr
    cdef readonly Model model
    cdef readonly str path
    cdef object _metadata
