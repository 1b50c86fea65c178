# Declarations from ggml-rpc.h (the ggml RPC backend), mirrored plainly.
from llamacore.includes.ggml cimport ggml_backend_dev_t, ggml_backend_reg_t


cdef extern from "ggml-rpc.h" nogil:
    enum: RPC_PROTO_MAJOR_VERSION
    enum: RPC_PROTO_MINOR_VERSION
    enum: RPC_PROTO_PATCH_VERSION
    enum: GGML_RPC_MAX_SERVERS

    void ggml_backend_rpc_get_device_memory(const char * endpoint, unsigned int device, size_t * free,
                                            size_t * total)
    void ggml_backend_rpc_start_server(const char * endpoint, const char * cache_dir, size_t n_threads,
                                       size_t n_devices, ggml_backend_dev_t * devices)
    ggml_backend_reg_t ggml_backend_rpc_reg()
    ggml_backend_reg_t ggml_backend_rpc_add_server(const char * endpoint)
