"""GET /openapi.json: the routes and their request schemas (from the pydantic models)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from llamaserve.schemas import ChatRequest, CompletionRequest, EmbeddingRequest

ERROR = {"$ref": "#/components/schemas/Error"}


def _post(summary: str, schema: str) -> dict[str, Any]:
    errors = {str(code): {"description": text, "content": {"application/json": {"schema": ERROR}}}
              for code, text in [(400, "invalid request"), (401, "bad API key"), (404, "unknown model"),
                                 (413, "body too large"), (503, "queue full or model busy")]}
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{schema}"}}}},
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}},
                                                              "text/event-stream": {"schema": {"type": "string"}}}},
                      **errors},
    }}


def _get(summary: str) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": {"description": "OK"}}}}


@cache
def openapi_schema() -> dict[str, Any]:
    _, defs = models_json_schema(
        [(m, "validation") for m in (CompletionRequest, ChatRequest, EmbeddingRequest)],
        ref_template="#/components/schemas/{model}",
    )
    schemas = dict(defs.get("$defs", {}))
    schemas["Error"] = {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "llamaserve", "version": "0.1.0"},
        "paths": {
            "/v1/completions": _post("Text completion", "CompletionRequest"),
            "/v1/chat/completions": _post("Chat completion", "ChatRequest"),
            "/v1/embeddings": _post("Embeddings", "EmbeddingRequest"),
            "/v1/models": _get("List models"),
            "/health": _get("Liveness"),
            "/metrics": _get("Prometheus metrics"),
        },
        "components": {"schemas": schemas},
    }
