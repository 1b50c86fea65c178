# Routes llama.cpp's log output to Python `logging` (logger "llamacore.llama_cpp").
# The C callback checks a level threshold before taking the GIL, so quiet runs pay nothing; on
# threads llama.cpp started itself it never takes the GIL (see _log_callback).
# Recent error lines are kept so that a failed load can say *why* it failed.
#
# Quiet by default: warnings and errors go to the logger, which (through the "llamacore" logger's
# NullHandler, added in llamacore/__init__.py) prints nothing unless the application configures logging. set_verbose(True) also
# shows info and writes llama.cpp's text to stderr unchanged, as llama-cpp-python's verbose=True.

_logger = logging.getLogger("llamacore.llama_cpp")
_verbose = False


class _RawStderr(logging.Handler):
    """llama.cpp's own text, pieces and newlines as it wrote them, on the current sys.stderr."""

    def emit(self, record):
        try:
            text = getattr(record, "llama_cpp_text", None)
            sys.stderr.write(text if text is not None else record.getMessage() + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


_stderr_handler = _RawStderr()
_recent_errors = collections.deque(maxlen=16)

cdef ggml.ggml_log_level _min_level = ggml.GGML_LOG_LEVEL_WARN     # info/debug are dropped before the GIL
cdef ggml.ggml_log_level _last_level = ggml.GGML_LOG_LEVEL_INFO
_PY_LEVELS = {ggml.GGML_LOG_LEVEL_DEBUG: logging.DEBUG, ggml.GGML_LOG_LEVEL_INFO: logging.INFO,
              ggml.GGML_LOG_LEVEL_WARN: logging.WARNING, ggml.GGML_LOG_LEVEL_ERROR: logging.ERROR}


cdef void _log_to_python(ggml.ggml_log_level lvl, const char * text) noexcept with gil:
    try:
        raw = text.decode("utf-8", "replace")
        message = raw.rstrip("\n")
        if not message:
            if _verbose and raw:            # the newline that ends a line of progress dots
                sys.stderr.write(raw)
            return
        if lvl == ggml.GGML_LOG_LEVEL_ERROR:
            _recent_errors.append(message)
        if lvl >= _min_level:
            _logger.log(_PY_LEVELS.get(lvl, logging.INFO), message, extra={"llama_cpp_text": raw})
    except BaseException:
        pass


cdef void _log_callback(ggml.ggml_log_level level, const char * text, void * user_data) noexcept nogil:
    # no Python object in here: Cython would take the GIL on every return to release it
    global _last_level
    cdef ggml.ggml_log_level lvl = level
    if lvl == ggml.GGML_LOG_LEVEL_CONT:     # continues the previous message
        lvl = _last_level
    else:
        _last_level = lvl
    if lvl < _min_level and lvl != ggml.GGML_LOG_LEVEL_ERROR:   # errors are always kept
        return
    if PyGILState_GetThisThreadState() == NULL:
        # a thread llama.cpp started (the RPC client's sender, OpenMP workers): it must not wait for
        # the GIL, which a Python thread may hold while it waits for this very thread (a decode's
        # synchronize); its warnings and errors go to stderr as they are
        fputs(text, stderr)
        return
    _log_to_python(lvl, text)


cdef _install_log_callback():
    llama.llama_log_set(_log_callback, NULL)
    mtmd.mtmd_helper_log_set(_log_callback, NULL)      # libmtmd (projectors) logs on its own


def set_verbose(bint verbose):
    """Show llama.cpp's log (model loading, context setup, warnings) on stderr, or keep it quiet.

    Quiet (the default) still passes warnings and errors to the "llamacore.llama_cpp" logger, for
    applications that configure logging; verbose writes llama.cpp's text to stderr as it comes
    (not also through the application's handlers) and includes its informational lines.
    """
    global _min_level, _verbose
    _verbose = verbose
    _min_level = ggml.GGML_LOG_LEVEL_INFO if verbose else ggml.GGML_LOG_LEVEL_WARN
    _logger.setLevel(logging.INFO if verbose else logging.WARNING)
    if verbose:
        if _stderr_handler not in _logger.handlers:
            _logger.addHandler(_stderr_handler)
        _logger.propagate = False
    else:
        _logger.removeHandler(_stderr_handler)
        _logger.propagate = True


cdef int _error_mark():
    _recent_errors.clear()
    return 0


cdef str _errors_since_mark():
    return "; ".join(_recent_errors)

