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


cdef extern from "ggml.h" nogil:
    const char * ggml_version()
    const char * ggml_commit()

    struct ggml_threadpool
    ctypedef ggml_threadpool * ggml_threadpool_t
    struct ggml_threadpool_params:
        int n_threads
    ggml_threadpool_params ggml_threadpool_params_default(int n_threads)


cdef extern from "ggml-cpu.h" nogil:
    ggml_threadpool * ggml_threadpool_new(ggml_threadpool_params * params)
    void ggml_threadpool_free(ggml_threadpool * threadpool)


cdef extern from "ggml-backend.h" nogil:
    ctypedef struct ggml_backend_reg:
        pass
    ctypedef struct ggml_backend_device:
        pass
    ctypedef ggml_backend_reg * ggml_backend_reg_t
    ctypedef ggml_backend_device * ggml_backend_dev_t

    size_t ggml_backend_reg_count()
    ggml_backend_reg_t ggml_backend_reg_get(size_t index)
    const char * ggml_backend_reg_name(ggml_backend_reg_t reg)
    size_t ggml_backend_reg_dev_count(ggml_backend_reg_t reg)
    ggml_backend_dev_t ggml_backend_reg_dev_get(ggml_backend_reg_t reg, size_t index)
    enum ggml_backend_dev_type:
        GGML_BACKEND_DEVICE_TYPE_CPU
        GGML_BACKEND_DEVICE_TYPE_GPU
        GGML_BACKEND_DEVICE_TYPE_IGPU
        GGML_BACKEND_DEVICE_TYPE_ACCEL
        GGML_BACKEND_DEVICE_TYPE_META

    const char * ggml_backend_dev_name(ggml_backend_dev_t device)
    const char * ggml_backend_dev_description(ggml_backend_dev_t device)
    void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t * free, size_t * total)
    # shares its C name with the enum above
    ggml_backend_dev_type ggml_backend_dev_get_type "ggml_backend_dev_type"(ggml_backend_dev_t device)

    size_t ggml_backend_dev_count()
    ggml_backend_dev_t ggml_backend_dev_get(size_t index)
    ggml_backend_dev_t ggml_backend_dev_by_type(ggml_backend_dev_type type)
