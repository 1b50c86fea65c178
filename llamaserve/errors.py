"""The server's exceptions, OpenAI-shaped error responses, and the one table from exception to HTTP status.

Every part of the server raises what it means (a full queue, an unknown model, a failed load);
`api_error_for` alone decides which status and body a client gets for it, whether the error
surfaces in a route, in a streamed response or in the application's last-resort handler.
"""

from __future__ import annotations

import math

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


class QueueFullError(Exception):
    """The model's queue is at max_queue; the client should retry later."""


class EngineClosedError(Exception):
    """The model was unloaded while the request waited or ran."""


class WorkerCrashedError(RuntimeError):
    """A model's worker process died (crash, kill, watchdog, max_rss); the model reloads on the next request."""

    def __init__(self, message: str, cause: str = "exit") -> None:
        super().__init__(message)
        self.cause = cause      # llamaserve.worker.process.CAUSES


class ModelFailedError(RuntimeError):
    """A model crashed repeatedly and waits out its backoff before the next load."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UnknownModelError(LookupError):
    def __init__(self, name: str, available: list[str], what: tuple[str, str] = ("model", "models")) -> None:
        super().__init__(f"The {what[0]} '{name}' does not exist. Available {what[1]}: "
                         f"{', '.join(available) or 'none'}")
        self.name = name


class ModelLoadError(RuntimeError):
    """Loading failed; the message says why. The server stays up."""


class CapacityError(RuntimeError):
    """No room to load a model: everything loaded is busy."""


class FieldError(ValueError):
    """A request field's value is refused (a 400 whose `param` names the field)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class UnsafePathError(PermissionError):
    """A client named a file outside the folders it may name (or runtime adapters are off)."""


class NameConflictError(Exception):
    """A runtime alias would take a name that is already in use."""


class AdapterUnavailableError(RuntimeError):
    """A runtime adapter failed to load with its base model (the message says why)."""


class RegistryWriteError(RuntimeError):
    """The runtime adapter registry file could not be written; nothing changed."""


# Raised by the registry and engines; the application answers each with `api_error_for`.
KNOWN_ERRORS = (QueueFullError, EngineClosedError, CapacityError, UnknownModelError, ModelLoadError,
                UnsafePathError, NameConflictError, AdapterUnavailableError, RegistryWriteError,
                WorkerCrashedError, ModelFailedError)


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
    if isinstance(exc, FieldError):
        return APIError(400, str(exc), param=exc.param)
    if isinstance(exc, ValueError):
        return APIError(400, str(exc), param=param)
    return APIError(500, f"generation failed: {type(exc).__name__}: {exc}")
