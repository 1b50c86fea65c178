# Declarations from ggml.h that llama.h's API exposes, mirrored plainly.
from libc.stdint cimport int32_t
from libcpp cimport bool as cbool


cdef extern from "ggml.h" nogil:
    enum ggml_type:
        GGML_TYPE_F32
        GGML_TYPE_F16
        GGML_TYPE_Q4_0
        GGML_TYPE_Q4_1
        GGML_TYPE_Q5_0
        GGML_TYPE_Q5_1
        GGML_TYPE_Q8_0
        GGML_TYPE_BF16

    enum ggml_log_level:
        GGML_LOG_LEVEL_NONE
        GGML_LOG_LEVEL_DEBUG
        GGML_LOG_LEVEL_INFO
        GGML_LOG_LEVEL_WARN
        GGML_LOG_LEVEL_ERROR
        GGML_LOG_LEVEL_CONT

    ctypedef void (*ggml_log_callback)(ggml_log_level level, const char * text, void * user_data) noexcept
    ctypedef cbool (*ggml_abort_callback)(void * data) noexcept

    enum ggml_numa_strategy:
        GGML_NUMA_STRATEGY_DISABLED
        GGML_NUMA_STRATEGY_DISTRIBUTE
        GGML_NUMA_STRATEGY_ISOLATE
        GGML_NUMA_STRATEGY_NUMACTL
        GGML_NUMA_STRATEGY_MIRROR

    const char * ggml_type_name(ggml_type type)
