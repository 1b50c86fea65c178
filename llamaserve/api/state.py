"""What the routes share for the application's life, typed: one object on Starlette's `app.state`
instead of loose attributes, so a type checker sees every use."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from llamacore.grammar.cache import GrammarCache
from llamaserve.api.responses.store import ResponseStore
from llamaserve.api.shutdown import Drain
from llamaserve.config.settings import ServerConfig
from llamaserve.models.registry import Registry
from llamaserve.runtime.metrics import Metrics


@dataclass(frozen=True)
class ServerState:
    config: ServerConfig
    registry: Registry
    metrics: Metrics
    drain: Drain
    grammars: GrammarCache                  # response_format schemas as GBNF, bounded
    responses: ResponseStore                # the Responses API's stored responses


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.server
    return state


__all__ = ["ServerState", "server_state"]
