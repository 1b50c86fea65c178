# Routes llama.cpp's log output to Python `logging` (logger "llamacore.llama_cpp").
# The C callback checks a level threshold before taking the GIL, so quiet runs pay nothing.
# Recent error lines are kept so that a failed load can say *why* it failed.
import collections
import logging

from llamacore.includes.ggml cimport ggml_log_level

_logger = logging.getLogger("llamacore.llama_cpp")
_recent_errors = collections.deque(maxlen=16)

cdef int _min_level = 3          # GGML_LOG_LEVEL_WARN: info/debug are dropped before the GIL
cdef int _last_level = 2
_PY_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


cdef void _log_callback(ggml_log_level level, const char * text, void * user_data) noexcept nogil:
    global _last_level
    cdef int lvl = <int>level
    if lvl == 5:                 # GGML_LOG_LEVEL_CONT continues the previous message
        lvl = _last_level
    else:
        _last_level = lvl
    if lvl < _min_level and lvl != 4:
        return
    with gil:
        try:
            message = text.decode("utf-8", "replace").rstrip("\n")
            if not message:
                return
            if lvl == 4:
                _recent_errors.append(message)
            if lvl >= _min_level:
                _logger.log(_PY_LEVELS.get(lvl, logging.INFO), message)
        except BaseException:
            pass


cdef _install_log_callback():
    llama.llama_log_set(_log_callback, NULL)


def set_verbose(bint verbose):
    """Show llama.cpp's informational output (model loading, context setup) or keep it quiet."""
    global _min_level
    _min_level = 2 if verbose else 3
    if verbose and not _logger.handlers and not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO)
    _logger.setLevel(logging.INFO if verbose else logging.WARNING)


cdef int _error_mark():
    _recent_errors.clear()
    return 0


cdef str _errors_since_mark():
    return "; ".join(_recent_errors)


def system_info():
    """llama.cpp's description of the CPU features and backends compiled in."""
    return llama.llama_print_system_info().decode()


def llama_cpp_version():
    return llama.llama_version().decode()


def supports_gpu_offload():
    return llama.llama_supports_gpu_offload()


def max_parallel_sequences():
    return llama.llama_max_parallel_sequences()
