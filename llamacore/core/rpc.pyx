# The ggml RPC backend: other hosts' RPC workers as devices for this process's models, and this
# process as an RPC worker for another host's models.
#
# llama.cpp aborts the process on an endpoint it cannot reach, on a failed handshake and on a
# worker that vanishes later; so an endpoint reaches C only after llamacore.rpc.preflight has
# talked to it, and servers run models that use RPC in worker processes (isolation: process).

RPC_PREFLIGHT_TIMEOUT = 5.0     # seconds to connect to an RPC worker and get its handshake


def supports_rpc():
    """True when this build has the ggml RPC backend (setup.py builds it by default)."""
    return llama.llama_supports_rpc()


cdef int _rpc_devices(object endpoints, vector[ggml.ggml_backend_dev_t] & out, double timeout) except -1:
    """Append the devices of each RPC worker in `endpoints` ("host:port") to `out`, each checked first."""
    from llamacore import rpc

    cdef ggml.ggml_backend_reg_t reg
    cdef bytes endpoint
    cdef const char * cendpoint
    cdef size_t i
    if not llama.llama_supports_rpc():
        raise RuntimeError("this llamacore build has no RPC backend (build with CMAKE_ARGS=-DGGML_RPC=ON)")
    for name in endpoints:
        rpc.preflight(name, timeout)          # raises RPCUnavailableError: C never sees a bad endpoint
        endpoint = rpc.parse_endpoint(name).encode()
        cendpoint = endpoint
        with nogil:
            reg = ggml_rpc.ggml_backend_rpc_add_server(cendpoint)
        if reg == NULL:
            raise rpc.RPCUnavailableError(f"RPC worker {name} offers no devices")
        for i in range(ggml.ggml_backend_reg_dev_count(reg)):
            out.push_back(ggml.ggml_backend_reg_dev_get(reg, i))
    return 0


def serve_rpc(str host, int port, int n_threads, cache_dir=None):
    """Serve this machine's devices (its GPUs, else its CPU) to RPC clients at host:port; blocks
    until the process ends. Returns only when llama.cpp could not start (port in use, bad address)."""
    cdef vector[ggml.ggml_backend_dev_t] devices
    cdef ggml.ggml_backend_dev_t dev
    cdef size_t i
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        if ggml.ggml_backend_dev_get_type(dev) in (ggml.GGML_BACKEND_DEVICE_TYPE_GPU,
                                                   ggml.GGML_BACKEND_DEVICE_TYPE_IGPU):
            devices.push_back(dev)
    if devices.empty():
        dev = ggml.ggml_backend_dev_by_type(ggml.GGML_BACKEND_DEVICE_TYPE_CPU)
        if dev == NULL:
            raise RuntimeError("no device to serve")
        devices.push_back(dev)
    cdef bytes endpoint = f"{host}:{port}".encode()
    cdef bytes cache = os.fsencode(cache_dir) if cache_dir is not None else b""
    cdef const char * cendpoint = endpoint
    cdef const char * ccache = NULL
    if cache_dir is not None:
        ccache = cache
    with nogil:
        ggml_rpc.ggml_backend_rpc_start_server(cendpoint, ccache, n_threads, devices.size(), devices.data())
    raise OSError(f"the RPC worker could not listen on {host}:{port} (address in use, or not an IPv4 "
                  f"address of this machine)")


def rpc_protocol_version():
    """The RPC protocol this build speaks: (major, minor, patch)."""
    return (ggml_rpc.RPC_PROTO_MAJOR_VERSION, ggml_rpc.RPC_PROTO_MINOR_VERSION, ggml_rpc.RPC_PROTO_PATCH_VERSION)
