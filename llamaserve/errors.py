"""The server's exceptions: what went wrong, in the server's own terms and free of HTTP.

Every part of the server raises what it means (a full queue, an unknown model, a failed load, a
refused request); the API layer alone (llamaserve.api.errors.api_error_for) decides which status
and body a client gets for it, in a route, in a streamed response or in the last-resort handler.
"""

from __future__ import annotations


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


class RequestError(ValueError):
    """A request that cannot be served as asked (a client error); `param` names the field to blame,
    when one is, and `code` says what kind of refusal it is, when a client may act on that."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


class FieldError(RequestError):
    """A request field's value is refused."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message, param=param)


class UnsafePathError(PermissionError):
    """A client named a file outside the folders it may name (or runtime adapters are off)."""


class NameConflictError(Exception):
    """A runtime alias would take a name that is already in use."""


class AdapterUnavailableError(RuntimeError):
    """A runtime adapter failed to load with its base model (the message says why)."""


class RegistryWriteError(RuntimeError):
    """The runtime adapter registry file could not be written; nothing changed."""
