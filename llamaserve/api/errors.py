"""The errors a client sees: OpenAI's error shape, its HTTP status, and the one table from the server's
exceptions (llamaserve.errors, free of HTTP) to those."""

from __future__ import annotations

import math
import re

from starlette.responses import JSONResponse

from llamaserve.errors import (
    AdapterUnavailableError,
    CapacityError,
    EngineClosedError,
    ModelFailedError,
    ModelLoadError,
    NameConflictError,
    QueueFullError,
    RegistryWriteError,
    RequestError,
    UnknownModelError,
    UnsafePathError,
    WorkerCrashedError,
)

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "invalid_request_error", 405: "invalid_request_error", 409: "invalid_request_error",
         413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 501: "not_supported_error",
         503: "server_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


# raised by the registry, the engines and the serving pipeline; the application answers each with
# `api_error_for`
KNOWN_ERRORS = (QueueFullError, EngineClosedError, CapacityError, UnknownModelError, ModelLoadError,
                UnsafePathError, NameConflictError, AdapterUnavailableError, RegistryWriteError,
                WorkerCrashedError, ModelFailedError, RequestError)


def api_error_for(exc: BaseException, *, param: str | None = None) -> APIError:
    """The API error a client gets for `exc` (`param`: the request field it concerns, if known)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, QueueFullError):
        return APIError(503, f"{exc}; retry later", headers={"Retry-After": "1"})
    if isinstance(exc, EngineClosedError):
        return APIError(503, str(exc), headers={"Retry-After": "1"})
    if isinstance(exc, WorkerCrashedError):
        return APIError(503, f"{exc}; retry shortly", code="model_crashed", headers={"Retry-After": "1"})
    if isinstance(exc, ModelFailedError):
        return APIError(503, str(exc), code="model_failed",
                        headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))})
    if isinstance(exc, CapacityError):
        return APIError(503, str(exc), headers={"Retry-After": "2"})
    if isinstance(exc, UnknownModelError):
        return APIError(404, str(exc), param=param or "model", code="model_not_found")
    if isinstance(exc, ModelLoadError):
        return APIError(500, str(exc), code="model_load_failed")
    if isinstance(exc, RegistryWriteError):
        return APIError(500, str(exc), code="registry_write_failed")
    if isinstance(exc, AdapterUnavailableError):
        return APIError(500, str(exc), code="adapter_load_failed")
    if isinstance(exc, UnsafePathError):
        return APIError(403, str(exc), param=param or "path", code="path_not_allowed")
    if isinstance(exc, NameConflictError):
        return APIError(409, str(exc), param=param or "alias", code="name_taken")
    if isinstance(exc, FileNotFoundError):
        return APIError(404, str(exc), param=param or "path", code="file_not_found")
    if isinstance(exc, RequestError):
        return APIError(400, str(exc), param=exc.param or param, code=exc.code)
    if isinstance(exc, (ValueError, IndexError, OverflowError)):    # a token id outside the vocabulary
        return APIError(400, str(exc), param=param)
    return APIError(500, f"generation failed: {type(exc).__name__}: {exc}")


# an absolute path in a message; its last part is kept (the file name says what failed)
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s'\"/:]+/)+([^\s'\"/:,;)]+)")


def without_paths(text: str) -> str:
    """`text` with each absolute path cut to its file name: the server's folders are an admin's business."""
    return _ABSOLUTE_PATH.sub(r"\1", text)


def for_client(error: APIError, admin: bool) -> APIError:
    """`error` as a client sees it: paths cut to file names unless the client is an admin."""
    if admin or "/" not in error.message:
        return error
    return APIError(error.status, without_paths(error.message), param=error.param, code=error.code,
                    headers=error.headers)


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


__all__ = ["KNOWN_ERRORS", "TYPES", "APIError", "api_error_for", "error_response", "for_client", "without_paths"]
