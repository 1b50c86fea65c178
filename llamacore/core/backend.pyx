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
