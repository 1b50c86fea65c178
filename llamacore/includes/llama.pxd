# Declarations from llama.h, mirrored plainly (same names, same order as the header).
# Two functions share their C names with enums (llama_pooling_type, llama_vocab_type); they are
# declared under llama_get_pooling_type / llama_vocab_get_type and keep their C names.
# Only what llamacore calls is declared; the C compiler checks layouts against the real header.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool

from llamacore.includes.ggml cimport (ggml_type, ggml_log_callback, ggml_abort_callback, ggml_numa_strategy,
                                     ggml_backend_dev_t, ggml_threadpool_t)


cdef extern from "llama.h" nogil:
    enum: LLAMA_DEFAULT_SEED
    enum: LLAMA_TOKEN_NULL

    struct llama_vocab
    struct llama_model
    struct llama_context
    struct llama_sampler
    struct llama_memory_i
    ctypedef llama_memory_i * llama_memory_t

    ctypedef int32_t llama_pos
    ctypedef int32_t llama_token
    ctypedef int32_t llama_seq_id

    enum llama_rope_scaling_type:
        LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED
        LLAMA_ROPE_SCALING_TYPE_NONE
        LLAMA_ROPE_SCALING_TYPE_LINEAR
        LLAMA_ROPE_SCALING_TYPE_YARN
        LLAMA_ROPE_SCALING_TYPE_LONGROPE

    enum llama_vocab_type:
        LLAMA_VOCAB_TYPE_NONE
        LLAMA_VOCAB_TYPE_SPM
        LLAMA_VOCAB_TYPE_BPE
        LLAMA_VOCAB_TYPE_WPM
        LLAMA_VOCAB_TYPE_UGM
        LLAMA_VOCAB_TYPE_RWKV
        LLAMA_VOCAB_TYPE_PLAMO2

    enum llama_token_attr:
        LLAMA_TOKEN_ATTR_UNDEFINED
        LLAMA_TOKEN_ATTR_UNKNOWN
        LLAMA_TOKEN_ATTR_UNUSED
        LLAMA_TOKEN_ATTR_NORMAL
        LLAMA_TOKEN_ATTR_CONTROL
        LLAMA_TOKEN_ATTR_USER_DEFINED
        LLAMA_TOKEN_ATTR_BYTE

    enum llama_pooling_type:
        LLAMA_POOLING_TYPE_UNSPECIFIED
        LLAMA_POOLING_TYPE_NONE
        LLAMA_POOLING_TYPE_MEAN
        LLAMA_POOLING_TYPE_CLS
        LLAMA_POOLING_TYPE_LAST
        LLAMA_POOLING_TYPE_RANK

    enum llama_attention_type:
        LLAMA_ATTENTION_TYPE_UNSPECIFIED
        LLAMA_ATTENTION_TYPE_CAUSAL
        LLAMA_ATTENTION_TYPE_NON_CAUSAL

    enum llama_flash_attn_type:
        LLAMA_FLASH_ATTN_TYPE_AUTO
        LLAMA_FLASH_ATTN_TYPE_DISABLED
        LLAMA_FLASH_ATTN_TYPE_ENABLED
        LLAMA_FLASH_ATTN_TYPE_PROMPTS

    enum llama_split_mode:
        LLAMA_SPLIT_MODE_NONE
        LLAMA_SPLIT_MODE_LAYER
        LLAMA_SPLIT_MODE_ROW
        LLAMA_SPLIT_MODE_TENSOR

    enum llama_load_mode:
        LLAMA_LOAD_MODE_AUTO
        LLAMA_LOAD_MODE_NONE
        LLAMA_LOAD_MODE_MMAP
        LLAMA_LOAD_MODE_MLOCK
        LLAMA_LOAD_MODE_MMAP_MLOCK

    ctypedef struct llama_token_data:
        llama_token id
        float logit
        float p

    ctypedef struct llama_token_data_array:
        llama_token_data * data
        size_t size
        int64_t selected
        bint sorted

    ctypedef cbool (*llama_progress_callback)(float progress, void * user_data) noexcept

    ctypedef struct llama_batch:
        int32_t n_tokens
        llama_token * token
        float * embd
        llama_pos * pos
        int32_t * n_seq_id
        llama_seq_id ** seq_id
        int8_t * logits

    enum llama_model_kv_override_type:
        LLAMA_KV_OVERRIDE_TYPE_INT
        LLAMA_KV_OVERRIDE_TYPE_FLOAT
        LLAMA_KV_OVERRIDE_TYPE_BOOL
        LLAMA_KV_OVERRIDE_TYPE_STR

    struct llama_model_kv_override:
        llama_model_kv_override_type tag
        char key[128]
        int64_t val_i64
        double val_f64
        bint val_bool
        char val_str[128]

    struct llama_model_params:
        ggml_backend_dev_t * devices
        int32_t n_gpu_layers
        llama_split_mode split_mode
        llama_load_mode load_mode
        int32_t main_gpu
        const float * tensor_split
        llama_progress_callback progress_callback
        void * progress_callback_user_data
        const llama_model_kv_override * kv_overrides
        bint vocab_only
        bint check_tensors
        bint use_extra_bufts
        bint no_host
        bint no_alloc

    struct llama_context_params:
        uint32_t n_ctx
        uint32_t n_batch
        uint32_t n_ubatch
        uint32_t n_seq_max
        uint32_t n_outputs_max
        uint32_t n_outputs_max_per_seq
        int32_t n_threads
        int32_t n_threads_batch
        llama_pooling_type pooling_type
        llama_attention_type attention_type
        llama_flash_attn_type flash_attn_type
        llama_rope_scaling_type rope_scaling_type
        float rope_freq_base
        float rope_freq_scale
        float yarn_ext_factor
        float yarn_attn_factor
        float yarn_beta_fast
        float yarn_beta_slow
        uint32_t yarn_orig_ctx
        ggml_type type_k
        ggml_type type_v
        ggml_abort_callback abort_callback
        void * abort_callback_data
        bint embeddings
        bint offload_kqv
        bint no_perf
        bint op_offload
        bint swa_full
        bint kv_unified

    ctypedef struct llama_logit_bias:
        llama_token token
        float bias

    ctypedef struct llama_sampler_chain_params:
        bint no_perf

    enum llama_ftype:
        LLAMA_FTYPE_ALL_F32
        LLAMA_FTYPE_MOSTLY_F16

    # the fields we set; the pointer fields (imatrix, overrides, pruned layers) stay at their defaults
    ctypedef struct llama_model_quantize_params:
        int32_t nthread
        llama_ftype ftype
        bint allow_requantize
        bint quantize_output_tensor
        bint only_copy
        bint pure
        bint keep_split
        bint dry_run

    struct llama_adapter_lora

    const char * llama_version()

    llama_model_params llama_model_default_params()
    llama_context_params llama_context_default_params()
    llama_sampler_chain_params llama_sampler_chain_default_params()
    llama_model_quantize_params llama_model_quantize_default_params()

    void llama_backend_init()
    void llama_backend_free()
    void llama_numa_init(ggml_numa_strategy numa)

    llama_model * llama_model_load_from_file(const char * path_model, llama_model_params params)
    llama_model * llama_model_load_from_splits(const char ** paths, size_t n_paths, llama_model_params params)
    void llama_model_free(llama_model * model)

    llama_context * llama_init_from_model(llama_model * model, llama_context_params params)
    void llama_free(llama_context * ctx)

    # 0 on success
    uint32_t llama_model_quantize(const char * fname_inp, const char * fname_out,
                                  const llama_model_quantize_params * params)

    int64_t llama_time_us()
    size_t llama_max_devices()
    bint llama_supports_rpc()
    size_t llama_max_parallel_sequences()
    bint llama_supports_mmap()
    bint llama_supports_mlock()
    bint llama_supports_gpu_offload()
    bint llama_supports_rpc()

    uint32_t llama_n_ctx(const llama_context * ctx)
    uint32_t llama_n_ctx_seq(const llama_context * ctx)
    uint32_t llama_n_batch(const llama_context * ctx)
    uint32_t llama_n_ubatch(const llama_context * ctx)
    uint32_t llama_n_seq_max(const llama_context * ctx)

    const llama_model * llama_get_model(const llama_context * ctx)
    llama_memory_t llama_get_memory(const llama_context * ctx)
    llama_pooling_type llama_get_pooling_type "llama_pooling_type"(const llama_context * ctx)

    const llama_vocab * llama_model_get_vocab(const llama_model * model)
    int32_t llama_model_n_ctx_train(const llama_model * model)
    int32_t llama_model_n_embd(const llama_model * model)
    int32_t llama_model_n_embd_inp(const llama_model * model)
    int32_t llama_model_n_embd_out(const llama_model * model)
    int32_t llama_model_n_layer(const llama_model * model)
    int32_t llama_model_n_head(const llama_model * model)
    int32_t llama_model_n_head_kv(const llama_model * model)
    int32_t llama_model_n_swa(const llama_model * model)

    llama_vocab_type llama_vocab_get_type "llama_vocab_type"(const llama_vocab * vocab)
    int32_t llama_vocab_n_tokens(const llama_vocab * vocab)

    int32_t llama_model_meta_val_str(const llama_model * model, const char * key, char * buf, size_t buf_size)
    int32_t llama_model_meta_count(const llama_model * model)
    int32_t llama_model_meta_key_by_index(const llama_model * model, int32_t i, char * buf, size_t buf_size)
    int32_t llama_model_meta_val_str_by_index(const llama_model * model, int32_t i, char * buf, size_t buf_size)
    int32_t llama_model_desc(const llama_model * model, char * buf, size_t buf_size)
    uint64_t llama_model_size(const llama_model * model)
    const char * llama_model_chat_template(const llama_model * model, const char * name)
    uint64_t llama_model_n_params(const llama_model * model)
    bint llama_model_has_encoder(const llama_model * model)
    bint llama_model_has_decoder(const llama_model * model)
    bint llama_model_is_recurrent(const llama_model * model)
    bint llama_model_is_hybrid(const llama_model * model)

    llama_adapter_lora * llama_adapter_lora_init(llama_model * model, const char * path_lora)
    int32_t llama_adapter_meta_val_str(const llama_adapter_lora * adapter, const char * key, char * buf, size_t buf_size)
    int32_t llama_adapter_meta_count(const llama_adapter_lora * adapter)
    int32_t llama_adapter_meta_key_by_index(const llama_adapter_lora * adapter, int32_t i, char * buf, size_t buf_size)
    int32_t llama_adapter_meta_val_str_by_index(const llama_adapter_lora * adapter, int32_t i, char * buf, size_t buf_size)
    void llama_adapter_lora_free(llama_adapter_lora * adapter)
    int32_t llama_set_adapters_lora(llama_context * ctx, llama_adapter_lora ** adapters, size_t n_adapters, float * scales)
    # vendor/patches/0001-per-sequence-lora-adapter-sets.patch
    int32_t llama_set_adapters_lora_seq(llama_context * ctx, llama_seq_id seq_id, llama_adapter_lora ** adapters, size_t n_adapters, const float * scales)
    int32_t llama_clear_adapters_lora_seq(llama_context * ctx, llama_seq_id seq_id)
    int32_t llama_reserve_adapters_lora_pool(llama_context * ctx, llama_adapter_lora ** adapters, size_t n_adapters)

    void llama_memory_clear(llama_memory_t mem, bint data)
    bint llama_memory_seq_rm(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1)
    void llama_memory_seq_cp(llama_memory_t mem, llama_seq_id seq_id_src, llama_seq_id seq_id_dst, llama_pos p0, llama_pos p1)
    void llama_memory_seq_keep(llama_memory_t mem, llama_seq_id seq_id)
    void llama_memory_seq_add(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta)
    llama_pos llama_memory_seq_pos_min(llama_memory_t mem, llama_seq_id seq_id)
    llama_pos llama_memory_seq_pos_max(llama_memory_t mem, llama_seq_id seq_id)
    bint llama_memory_can_shift(llama_memory_t mem)

    size_t llama_state_get_size(llama_context * ctx)
    size_t llama_state_get_data(llama_context * ctx, uint8_t * dst, size_t size)
    size_t llama_state_set_data(llama_context * ctx, const uint8_t * src, size_t size)
    bint llama_state_load_file(llama_context * ctx, const char * path_session, llama_token * tokens_out, size_t n_token_capacity, size_t * n_token_count_out)
    bint llama_state_save_file(llama_context * ctx, const char * path_session, const llama_token * tokens, size_t n_token_count)
    size_t llama_state_seq_get_size(llama_context * ctx, llama_seq_id seq_id)
    size_t llama_state_seq_get_data(llama_context * ctx, uint8_t * dst, size_t size, llama_seq_id seq_id)
    size_t llama_state_seq_set_data(llama_context * ctx, const uint8_t * src, size_t size, llama_seq_id dest_seq_id)
    size_t llama_state_seq_save_file(llama_context * ctx, const char * filepath, llama_seq_id seq_id, const llama_token * tokens, size_t n_token_count)
    size_t llama_state_seq_load_file(llama_context * ctx, const char * filepath, llama_seq_id dest_seq_id, llama_token * tokens_out, size_t n_token_capacity, size_t * n_token_count_out)

    llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max)
    void llama_batch_free(llama_batch batch)
    int32_t llama_encode(llama_context * ctx, llama_batch batch)
    int32_t llama_decode(llama_context * ctx, llama_batch batch)

    void llama_set_n_threads(llama_context * ctx, int32_t n_threads, int32_t n_threads_batch)
    void llama_attach_threadpool(llama_context * ctx, ggml_threadpool_t threadpool, ggml_threadpool_t threadpool_batch)
    void llama_detach_threadpool(llama_context * ctx)
    int32_t llama_n_threads(llama_context * ctx)
    int32_t llama_n_threads_batch(llama_context * ctx)
    void llama_set_embeddings(llama_context * ctx, bint embeddings)
    void llama_set_causal_attn(llama_context * ctx, bint causal_attn)
    void llama_set_abort_callback(llama_context * ctx, ggml_abort_callback abort_callback, void * abort_callback_data)
    void llama_synchronize(llama_context * ctx)

    float * llama_get_logits(llama_context * ctx)
    float * llama_get_logits_ith(llama_context * ctx, int32_t i)
    float * llama_get_embeddings(llama_context * ctx)
    float * llama_get_embeddings_ith(llama_context * ctx, int32_t i)
    float * llama_get_embeddings_seq(llama_context * ctx, llama_seq_id seq_id)

    const char * llama_vocab_get_text(const llama_vocab * vocab, llama_token token)
    float llama_vocab_get_score(const llama_vocab * vocab, llama_token token)
    llama_token_attr llama_vocab_get_attr(const llama_vocab * vocab, llama_token token)
    bint llama_vocab_is_eog(const llama_vocab * vocab, llama_token token)
    bint llama_vocab_is_control(const llama_vocab * vocab, llama_token token)
    llama_token llama_vocab_bos(const llama_vocab * vocab)
    llama_token llama_vocab_eos(const llama_vocab * vocab)
    llama_token llama_vocab_eot(const llama_vocab * vocab)
    llama_token llama_vocab_sep(const llama_vocab * vocab)
    llama_token llama_vocab_nl(const llama_vocab * vocab)
    llama_token llama_vocab_pad(const llama_vocab * vocab)
    bint llama_vocab_get_add_bos(const llama_vocab * vocab)
    bint llama_vocab_get_add_eos(const llama_vocab * vocab)

    int32_t llama_tokenize(const llama_vocab * vocab, const char * text, int32_t text_len, llama_token * tokens, int32_t n_tokens_max, bint add_special, bint parse_special)
    int32_t llama_token_to_piece(const llama_vocab * vocab, llama_token token, char * buf, int32_t length, int32_t lstrip, bint special)
    int32_t llama_detokenize(const llama_vocab * vocab, const llama_token * tokens, int32_t n_tokens, char * text, int32_t text_len_max, bint remove_special, bint unparse_special)

    void llama_sampler_accept(llama_sampler * smpl, llama_token token)
    void llama_sampler_apply(llama_sampler * smpl, llama_token_data_array * cur_p)
    void llama_sampler_reset(llama_sampler * smpl)
    llama_sampler * llama_sampler_clone(const llama_sampler * smpl)
    void llama_sampler_free(llama_sampler * smpl)
    const char * llama_sampler_name(const llama_sampler * smpl)

    llama_sampler * llama_sampler_chain_init(llama_sampler_chain_params params)
    void llama_sampler_chain_add(llama_sampler * chain, llama_sampler * smpl)
    llama_sampler * llama_sampler_chain_get(llama_sampler * chain, int32_t i)
    int32_t llama_sampler_chain_n(const llama_sampler * chain)

    llama_sampler * llama_sampler_init_greedy()
    llama_sampler * llama_sampler_init_dist(uint32_t seed)
    llama_sampler * llama_sampler_init_top_k(int32_t k)
    llama_sampler * llama_sampler_init_top_p(float p, size_t min_keep)
    llama_sampler * llama_sampler_init_min_p(float p, size_t min_keep)
    llama_sampler * llama_sampler_init_typical(float p, size_t min_keep)
    llama_sampler * llama_sampler_init_xtc(float p, float t, size_t min_keep, uint32_t seed)
    llama_sampler * llama_sampler_init_top_n_sigma(float n)
    llama_sampler * llama_sampler_init_dry(const llama_vocab * vocab, float dry_multiplier, float dry_base,
                                           int32_t dry_allowed_length, int32_t dry_penalty_last_n,
                                           const char ** seq_breakers, size_t num_breakers)
    llama_sampler * llama_sampler_init_temp(float t)
    llama_sampler * llama_sampler_init_temp_ext(float t, float delta, float exponent)
    llama_sampler * llama_sampler_init_mirostat(int32_t n_vocab, uint32_t seed, float tau, float eta, int32_t m)
    llama_sampler * llama_sampler_init_mirostat_v2(uint32_t seed, float tau, float eta)
    llama_sampler * llama_sampler_init_grammar(const llama_vocab * vocab, const char * grammar_str, const char * grammar_root)
    llama_sampler * llama_sampler_init_grammar_lazy_patterns(const llama_vocab * vocab, const char * grammar_str,
                                                             const char * grammar_root, const char ** trigger_patterns,
                                                             size_t num_trigger_patterns,
                                                             const llama_token * trigger_tokens,
                                                             size_t num_trigger_tokens)
    void llama_grammar_set_work_limit(uint64_t steps)
    bint llama_sampler_grammar_exhausted(const llama_sampler * smpl)
    llama_sampler * llama_sampler_init_penalties(int32_t n_vocab, int32_t penalty_last_n, float penalty_repeat, float penalty_freq, float penalty_present)
    llama_sampler * llama_sampler_init_logit_bias(int32_t n_vocab, int32_t n_logit_bias, const llama_logit_bias * logit_bias)
    uint32_t llama_sampler_get_seed(const llama_sampler * smpl)
    llama_token llama_sampler_sample(llama_sampler * smpl, llama_context * ctx, int32_t idx)

    const char * llama_print_system_info()
    void llama_log_set(ggml_log_callback log_callback, void * user_data)

    struct llama_perf_context_data:
        double t_start_ms
        double t_load_ms
        double t_p_eval_ms
        double t_eval_ms
        int32_t n_p_eval
        int32_t n_eval
        int32_t n_reused

    struct llama_perf_sampler_data:
        double t_sample_ms
        int32_t n_sample

    llama_perf_context_data llama_perf_context(const llama_context * ctx)
    void llama_perf_context_reset(llama_context * ctx)
    llama_perf_sampler_data llama_perf_sampler(const llama_sampler * chain)
    void llama_perf_sampler_reset(llama_sampler * chain)
