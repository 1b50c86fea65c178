cdef class Image:
    cdef mtmd.mtmd_bitmap * ptr
    cdef readonly str id

cdef class ImageChunk:
    cdef mtmd.mtmd_input_chunk * ptr
    cdef readonly str id
    cdef readonly Py_ssize_t n_tokens
    cdef readonly int n_pos
    cdef readonly bint non_causal

cdef class Projector:
    cdef mtmd.mtmd_context * ptr
    cdef readonly Model model
    cdef readonly str path
    cdef readonly Py_ssize_t n_encoded
    cdef object _lock

    cdef list _chunk_list(self, mtmd.mtmd_input_chunks * chunks)
