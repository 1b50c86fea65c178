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
