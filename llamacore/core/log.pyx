# Routes llama.cpp's log output to Python `logging` (logger "llamacore.llama_cpp").
# The C callback checks a level threshold before taking the GIL, so quiet runs pay nothing.
# Recent error lines are kept so that a failed load can say *why* it failed.

_logger = logging.getLogger("llamacore.llama_cpp")
_recent_errors = collections.deque(maxlen=16)

cdef ggml.ggml_log_level _min_level = ggml.GGML_LOG_LEVEL_WARN     # info/debug are dropped before the GIL
cdef ggml.ggml_log_level _last_level = ggml.GGML_LOG_LEVEL_INFO
_PY_LEVELS = {ggml.GGML_LOG_LEVEL_DEBUG: logging.DEBUG, ggml.GGML_LOG_LEVEL_INFO: logging.INFO,
              ggml.GGML_LOG_LEVEL_WARN: logging.WARNING, ggml.GGML_LOG_LEVEL_ERROR: logging.ERROR}


cdef void _log_callback(ggml.ggml_log_level level, const char * text, void * user_data) noexcept nogil:
    global _last_level
    cdef ggml.ggml_log_level lvl = level
    if lvl == ggml.GGML_LOG_LEVEL_CONT:     # continues the previous message
        lvl = _last_level
    else:
        _last_level = lvl
    if lvl < _min_level and lvl != ggml.GGML_LOG_LEVEL_ERROR:   # errors are always kept
        return
    with gil:
        try:
            message = text.decode("utf-8", "replace").rstrip("\n")
            if not message:
                return
            if lvl == ggml.GGML_LOG_LEVEL_ERROR:
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
    _min_level = ggml.GGML_LOG_LEVEL_INFO if verbose else ggml.GGML_LOG_LEVEL_WARN
    if verbose and not _logger.handlers and not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO)
    _logger.setLevel(logging.INFO if verbose else logging.WARNING)


cdef int _error_mark():
    _recent_errors.clear()
    return 0


cdef str _errors_since_mark():
    return "; ".join(_recent_errors)

