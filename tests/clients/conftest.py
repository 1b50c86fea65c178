"""Fixtures of the client-library flows: the shared `server` (tests/conftest.py) as an OpenAI base URL.

The tiny test models answer gibberish, so structured results come from the server's grammar
(`response_format` json_schema, or a forced tool call), never from the model following a prompt.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def base_url(server) -> str:
    """The OpenAI-compatible root the clients are pointed at; the server needs no API key."""
    return server.base_url + "/v1"
