# Saving and restoring a Context's state: the whole KV cache, one sequence's, or a session file
# (llama.cpp's state API). Context's state methods call these; llama.cpp saves no outputs, so a
# restore leaves none (the last decode's logits would be stale).


cdef bytes _state_save(Context ctx):
    cdef size_t size = llama.llama_state_get_size(ctx.ptr)
    cdef bytearray buf = bytearray(size)
    cdef uint8_t * dst = buf
    with nogil:
        size = llama.llama_state_get_data(ctx.ptr, dst, size)
    return bytes(buf[:size])


cdef _state_load(Context ctx, const uint8_t[::1] data):
    cdef size_t n
    if data.shape[0] == 0:
        raise ValueError("state is empty")
    _error_mark()
    with nogil:
        n = llama.llama_state_set_data(ctx.ptr, &data[0], data.shape[0])
    if n == 0:
        raise ValueError(f"state does not match this context: {_errors_since_mark() or 'rejected'}")
    ctx._n_outputs = 0


cdef bytes _sequence_state_save(Context ctx, int seq_id):
    ctx._check_seq(seq_id, False)
    cdef size_t size = llama.llama_state_seq_get_size(ctx.ptr, seq_id)
    cdef bytearray buf = bytearray(size)
    cdef uint8_t * dst = buf
    with nogil:
        size = llama.llama_state_seq_get_data(ctx.ptr, dst, size, seq_id)
    return bytes(buf[:size])


cdef _sequence_state_load(Context ctx, const uint8_t[::1] data, int seq_id):
    ctx._check_seq(seq_id, False)
    cdef size_t n
    if data.shape[0] == 0:
        raise ValueError("state is empty")
    _error_mark()
    with nogil:
        n = llama.llama_state_seq_set_data(ctx.ptr, &data[0], data.shape[0], seq_id)
    if n == 0:
        raise ValueError(f"sequence state does not fit: {_errors_since_mark() or 'rejected'}")


cdef _state_save_file(Context ctx, path, tokens):
    cdef bytes bpath = os.fspath(path).encode()
    cdef const char * cpath = bpath
    cdef vector[llama_token] toks = vector[llama_token](len(tokens))
    cdef Py_ssize_t i
    for i in range(<Py_ssize_t>toks.size()):
        toks[i] = tokens[i]
    cdef bint ok
    with nogil:
        ok = llama.llama_state_save_file(ctx.ptr, cpath, toks.data(), toks.size())
    if not ok:
        raise OSError(f"could not write state file {path}")


cdef list _state_load_file(Context ctx, path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "state file not found", path)
    cdef bytes bpath = path.encode()
    cdef const char * cpath = bpath
    cdef size_t count = 0
    cdef vector[llama_token] toks = vector[llama_token](max(ctx.n_ctx, 1))
    cdef bint ok
    _error_mark()
    with nogil:
        ok = llama.llama_state_load_file(ctx.ptr, cpath, toks.data(), toks.size(), &count)
    if not ok:
        raise ValueError(f"could not load state file {path}: {_errors_since_mark() or 'rejected'}")
    ctx._n_outputs = 0
    return [toks[i] for i in range(count)]
