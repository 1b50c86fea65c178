# Quantization: llama.cpp's llama_model_quantize, writing a new GGUF file of another weight type.
# llamacore.quantize validates the arguments first; this is the bare call.


def model_quantize(str src, str dst, int ftype, int nthread=0, bint allow_requantize=False,
                   bint quantize_output_tensor=True, bint pure=False, bint keep_split=False):
    """Write `src`'s weights as llama_ftype `ftype` to `dst` with the GIL released; raises
    RuntimeError when llama.cpp reports a failure (it logs the reason)."""
    cdef llama.llama_model_quantize_params params = llama.llama_model_quantize_default_params()
    params.nthread = nthread
    params.ftype = <llama.llama_ftype>ftype
    params.allow_requantize = allow_requantize
    params.quantize_output_tensor = quantize_output_tensor
    params.pure = pure
    params.keep_split = keep_split
    cdef bytes src_b = os.fsencode(src)
    cdef bytes dst_b = os.fsencode(dst)
    cdef const char * c_src = src_b
    cdef const char * c_dst = dst_b
    cdef uint32_t rc
    with nogil:
        rc = llama.llama_model_quantize(c_src, c_dst, &params)
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} (see its log for the reason)")
