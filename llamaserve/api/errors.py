"""An APIError as the HTTP response OpenAI's clients expect: its JSON body, status and headers.

The error itself (llamaserve.errors) carries no HTTP framework, so the engine, the workers and the
registry that raise it do not import Starlette."""

from __future__ import annotations

from starlette.responses import JSONResponse

from llamaserve.errors import APIError


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
