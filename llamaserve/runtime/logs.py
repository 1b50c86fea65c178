"""The server process's logging: one format and level (config `log_level` / `--log-level`) for
llamaserve's loggers and llama.cpp's, whose lines carry the model they are about.

llama.cpp logs through one process-wide callback (llamacore.llama_cpp); while a model loads, the
loading thread's context names its alias, and an engine's thread is named after its model file.
"""

from __future__ import annotations

import logging
import re
import threading
from contextvars import ContextVar

# alias (or aliases) of the model whose load runs in this context
loading_model: ContextVar[str | None] = ContextVar("llamaserve_loading_model", default=None)
# the x-request-id of the request this context serves (llamaserve.api.middleware.RequestId)
request_id: ContextVar[str | None] = ContextVar("llamaserve_request_id", default=None)

LLAMA_CPP_LOGGER = "llamacore.llama_cpp"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ModelTag(logging.Filter):
    """Prefixes a llama.cpp record with ``[model]``: the alias being loaded, else the engine's model file."""

    def filter(self, record: logging.LogRecord) -> bool:
        model = loading_model.get()
        if model is None:
            thread = threading.current_thread().name
            model = thread.removeprefix("engine:") if thread.startswith("engine:") else None
        if model is not None and not getattr(record, "llamaserve_tagged", False):
            record.msg = f"[{model}] {record.msg}"
            record.llamaserve_tagged = True
        return True


class PooledContext(logging.Filter):
    """Drops llama.cpp's "n_ctx_seq (N) > n_ctx_train (M)": an engine's unified KV cache holds
    `parallel` sequences of n_ctx tokens, and llama.cpp takes that whole pool for one sequence, so
    the line fired on every correct setup. llamaserve.models.factory warns about n_ctx itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _POOLED_CONTEXT.search(record.getMessage())


_POOLED_CONTEXT = re.compile(r"n_ctx_seq \(\d+\) > n_ctx_train \(\d+\)")


class RequestTag(logging.Filter):
    """Prefixes a record logged while a request is served with ``[request <id>]``."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id.get()
        if rid is not None and not getattr(record, "llamaserve_request", False):
            record.msg = f"[request {rid}] {record.msg}"
            record.llamaserve_request = True
        return True


def configure(log_level: str) -> None:
    """Log to stderr at `log_level` (``trace`` is DEBUG), llama.cpp's warnings and errors included."""
    level = "DEBUG" if log_level.lower() == "trace" else log_level.upper()
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:        # every logger's records, whoever logs them
        if not any(isinstance(f, RequestTag) for f in handler.filters):
            handler.addFilter(RequestTag())
    llama_cpp = logging.getLogger(LLAMA_CPP_LOGGER)
    for tag in (PooledContext, ModelTag):
        if not any(isinstance(f, tag) for f in llama_cpp.filters):
            llama_cpp.addFilter(tag())
