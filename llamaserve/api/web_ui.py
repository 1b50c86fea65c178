"""GET /: the chat page, one static file shipped with the package (llamaserve/static/chat.html)."""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

# the page's own script and style are inline; it talks to this origin only and shows attached images
# as data: URLs; no other site may frame it
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                               "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def page() -> str:
    return resources.files("llamaserve").joinpath("static/chat.html").read_text(encoding="utf-8")


async def chat_page(request: Request) -> Response:
    return HTMLResponse(page(), headers=_HEADERS)
