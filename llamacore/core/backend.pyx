# The llama.cpp build this module is linked with: its version, CPU features, backends and limits.
# llama.cpp's backends are process globals, initialised once when _core is imported.


cdef _backend_init():
    llama.llama_backend_init()


def system_info():
    """llama.cpp's description of the CPU features and backends compiled in."""
    return llama.llama_print_system_info().decode()


def llama_cpp_version():
    return llama.llama_version().decode()


def supports_gpu_offload():
    return llama.llama_supports_gpu_offload()


def numa_init(int strategy):
    """Apply a NUMA policy (ggml_numa_strategy: 1 distribute, 2 isolate, 3 numactl, 4 mirror) to this
    process's CPU threads; llama.cpp takes the first policy set and keeps it."""
    if not 0 <= strategy <= ggml.GGML_NUMA_STRATEGY_MIRROR:
        raise ValueError(f"numa strategy {strategy} is not one of 0..{int(ggml.GGML_NUMA_STRATEGY_MIRROR)}")
    if strategy != ggml.GGML_NUMA_STRATEGY_DISABLED:
        llama.llama_numa_init(<ggml.ggml_numa_strategy>strategy)


def max_parallel_sequences():
    return llama.llama_max_parallel_sequences()


def ggml_version():
    """ggml's version and the commit it was built from ("unknown" when built outside a git checkout)."""
    return ggml.ggml_version().decode(), ggml.ggml_commit().decode()


def backends():
    """The ggml backends compiled in, each with its devices: [{"name", "devices": [{"name", "description"}]}]."""
    cdef size_t i, j
    cdef ggml.ggml_backend_reg_t reg
    cdef ggml.ggml_backend_dev_t dev
    found = []
    for i in range(ggml.ggml_backend_reg_count()):
        reg = ggml.ggml_backend_reg_get(i)
        devices = []
        for j in range(ggml.ggml_backend_reg_dev_count(reg)):
            dev = ggml.ggml_backend_reg_dev_get(reg, j)
            devices.append({"name": ggml.ggml_backend_dev_name(dev).decode(errors="replace"),
                            "description": ggml.ggml_backend_dev_description(dev).decode(errors="replace")})
        found.append({"name": ggml.ggml_backend_reg_name(reg).decode(errors="replace"), "devices": devices})
    return found


cdef extern from *:
    """
    #ifndef LLAMACORE_BUILD_INFO
    #define LLAMACORE_BUILD_INFO "{}"
    #endif
    """
    const char * LLAMACORE_BUILD_INFO


def build_info():
    """How this extension was built (setup.py records it): llama.cpp source pin, CMake flags, compiler."""
    return json.loads(LLAMACORE_BUILD_INFO.decode())
