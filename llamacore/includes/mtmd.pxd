# Declarations from tools/mtmd/mtmd.h and mtmd-helper.h (libmtmd: vision/audio projectors),
# mirrored plainly. Only what llamacore calls is declared; the C compiler checks layouts against
# the real headers. The API is marked experimental upstream, so it is pinned to the vendored tree.
from libc.stdint cimport int32_t, uint32_t
from libcpp cimport bool as cbool

from llamacore.includes.ggml cimport ggml_log_callback, ggml_backend_dev_t
from llamacore.includes.llama cimport llama_model, llama_token, llama_pos, llama_flash_attn_type


cdef extern from "mtmd.h" nogil:
    enum mtmd_input_chunk_type:
        MTMD_INPUT_CHUNK_TYPE_TEXT
        MTMD_INPUT_CHUNK_TYPE_IMAGE
        MTMD_INPUT_CHUNK_TYPE_AUDIO

    struct mtmd_context
    struct mtmd_bitmap
    struct mtmd_image_tokens
    struct mtmd_input_chunk
    struct mtmd_input_chunks

    struct mtmd_input_text:
        const char * text
        size_t text_len
        cbool add_special
        cbool parse_special

    struct mtmd_input_part:
        const mtmd_input_text * text
        const mtmd_bitmap * bitmap

    struct mtmd_context_params:
        cbool use_gpu
        ggml_backend_dev_t device
        cbool print_timings
        int n_threads
        const char * image_marker
        const char * media_marker
        llama_flash_attn_type flash_attn_type
        cbool warmup
        int image_min_tokens
        int image_max_tokens

    const char * mtmd_default_marker()
    mtmd_context_params mtmd_context_params_default()
    mtmd_context * mtmd_init_from_file(const char * mmproj_fname, const llama_model * text_model,
                                       const mtmd_context_params ctx_params)
    void mtmd_free(mtmd_context * ctx)
    cbool mtmd_decode_use_non_causal(const mtmd_context * ctx, const mtmd_input_chunk * chunk)
    cbool mtmd_decode_use_mrope(const mtmd_context * ctx)
    cbool mtmd_support_vision(const mtmd_context * ctx)
    cbool mtmd_support_audio(const mtmd_context * ctx)

    mtmd_bitmap * mtmd_bitmap_init(uint32_t nx, uint32_t ny, const unsigned char * data)
    uint32_t mtmd_bitmap_get_nx(const mtmd_bitmap * bitmap)
    uint32_t mtmd_bitmap_get_ny(const mtmd_bitmap * bitmap)
    cbool mtmd_bitmap_is_audio(const mtmd_bitmap * bitmap)
    void mtmd_bitmap_free(mtmd_bitmap * bitmap)
    const char * mtmd_bitmap_get_id(const mtmd_bitmap * bitmap)
    void mtmd_bitmap_set_id(mtmd_bitmap * bitmap, const char * id)

    mtmd_input_chunks * mtmd_input_chunks_init()
    size_t mtmd_input_chunks_size(const mtmd_input_chunks * chunks)
    const mtmd_input_chunk * mtmd_input_chunks_get(const mtmd_input_chunks * chunks, size_t idx)
    void mtmd_input_chunks_free(mtmd_input_chunks * chunks)

    mtmd_input_chunk_type mtmd_input_chunk_get_type(const mtmd_input_chunk * chunk)
    const llama_token * mtmd_input_chunk_get_tokens_text(const mtmd_input_chunk * chunk, size_t * n_tokens_output)
    size_t mtmd_input_chunk_get_n_tokens(const mtmd_input_chunk * chunk)
    const char * mtmd_input_chunk_get_id(const mtmd_input_chunk * chunk)
    llama_pos mtmd_input_chunk_get_n_pos(const mtmd_input_chunk * chunk)
    mtmd_input_chunk * mtmd_input_chunk_copy(const mtmd_input_chunk * chunk)
    void mtmd_input_chunk_free(mtmd_input_chunk * chunk)

    int32_t mtmd_tokenize_from_parts(const mtmd_context * ctx, mtmd_input_chunks * output,
                                     const mtmd_input_part * const * parts, size_t n_parts, cbool add_special)
    int32_t mtmd_encode_chunk(mtmd_context * ctx, const mtmd_input_chunk * chunk)
    float * mtmd_get_output_embd(mtmd_context * ctx)

    void mtmd_log_set(ggml_log_callback log_callback, void * user_data)

    struct mtmd_caps:
        cbool inp_vision
        cbool inp_audio
    mtmd_caps mtmd_get_cap_from_file(const char * mmproj_fname)


cdef extern from "mtmd-helper.h" nogil:
    struct mtmd_helper_video
    struct mtmd_helper_init_opt:
        pass
    struct mtmd_helper_bitmap_wrapper:
        mtmd_bitmap * bitmap
        mtmd_helper_video * video_ctx

    mtmd_helper_init_opt mtmd_helper_init_opt_default()
    void mtmd_helper_log_set(ggml_log_callback log_callback, void * user_data)
    mtmd_helper_bitmap_wrapper mtmd_helper_bitmap_init_from_buf(const mtmd_context * ctx, const unsigned char * buf,
                                                                size_t len, cbool placeholder, mtmd_helper_init_opt opt)
