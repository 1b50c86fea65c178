"""GET /openapi.json: the routes and their request schemas (from the pydantic models)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic.json_schema import models_json_schema

from llamaserve import __version__
from llamaserve.api.anthropic.protocol import MessagesRequest
from llamaserve.api.openai.protocol import (
    AddAdapterRequest,
    ApplyTemplateRequest,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    LoadLoraAdapterRequest,
    TokenizeRequest,
    UnloadLoraAdapterRequest,
)
from llamaserve.api.responses.protocol import ResponsesRequest

ERROR = {"$ref": "#/components/schemas/Error"}


_ERRORS = [(400, "invalid request"), (401, "bad API key"), (404, "unknown model"), (413, "body too large"),
           (503, "queue full or model busy")]
_ADMIN_ERRORS = [(400, "invalid request, or not an adapter for this base"), (401, "bad API key"),
                 (403, "path outside adapters_dir, or runtime adapters off"), (404, "unknown model or file"),
                 (409, "name already taken"), (413, "body too large")]


def _post(summary: str, schema: str, codes: list[tuple[int, str]] = _ERRORS) -> dict[str, Any]:
    errors = {str(code): {"description": text, "content": {"application/json": {"schema": ERROR}}}
              for code, text in codes}
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


def _with_name(param: str, operations: dict[str, Any]) -> dict[str, Any]:
    """`operations` of a path templated with {param}."""
    return {"parameters": [{"name": param, "in": "path", "required": True, "schema": {"type": "string"}}],
            **operations}


@cache
def openapi_schema() -> dict[str, Any]:
    _, defs = models_json_schema(
        [(m, "validation") for m in (CompletionRequest, ChatRequest, EmbeddingRequest, AddAdapterRequest,
                                     LoadLoraAdapterRequest, UnloadLoraAdapterRequest, TokenizeRequest,
                                     DetokenizeRequest, ApplyTemplateRequest, MessagesRequest,
                                     ResponsesRequest)],
        ref_template="#/components/schemas/{model}",
    )
    schemas = dict(defs.get("$defs", {}))
    schemas["Error"] = {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "llamaserve", "version": __version__},
        "paths": {
            "/v1/completions": _post("Text completion", "CompletionRequest"),
            "/v1/chat/completions": _post("Chat completion", "ChatRequest"),
            "/v1/embeddings": _post("Embeddings", "EmbeddingRequest"),
            "/v1/models": _get("List models (adapter-backed aliases carry parent and lora_adapters)"),
            "/v1/models/{model}": _with_name("model", _get("One model")),
            "/lora-adapters": _get("Adapters of a base model (?model=alias): id, path, scale, name"),
            "/admin/adapters": {**_get("Adapters per base model: load time, requests, memory"),
                                **_post("Load an adapter from adapters_dir and serve it as an alias",
                                        "AddAdapterRequest", _ADMIN_ERRORS)},
            "/admin/adapters/{alias}": _with_name("alias", {"delete": {
                "summary": "Remove a runtime alias (its adapter is freed when its last request ends)",
                "responses": {"200": {"description": "OK"}}}}),
            "/v1/load_lora_adapter": _post("vLLM-compatible adapter load", "LoadLoraAdapterRequest",
                                           _ADMIN_ERRORS),
            "/v1/unload_lora_adapter": _post("vLLM-compatible adapter unload", "UnloadLoraAdapterRequest",
                                             _ADMIN_ERRORS),
            "/tokenize": _post("Tokenize content (llama.cpp server's route; `model` picks the model)",
                               "TokenizeRequest"),
            "/detokenize": _post("Tokens back to text (llama.cpp server's route)", "DetokenizeRequest"),
            "/apply-template": _post("The prompt a chat template renders for messages (llama.cpp server's route)",
                                     "ApplyTemplateRequest"),
            "/v1/messages": _post("Anthropic Messages API (errors in Anthropic's shape)", "MessagesRequest"),
            "/v1/messages/count_tokens": _post("Anthropic's token count for a Messages request", "MessagesRequest"),
            "/v1/responses": _post("OpenAI Responses API (also at /responses)", "ResponsesRequest",
                                   [*_ERRORS, (404, "unknown model or previous_response_id")]),
            "/v1/responses/{response_id}": _with_name("response_id", {
                "get": {"summary": "A stored response (404 once deleted or evicted)",
                        "responses": {"200": {"description": "OK"}}},
                "delete": {"summary": "Delete a stored response", "responses": {"200": {"description": "OK"}}}}),
            "/health": _get("Liveness"),
            "/ready": _get("Readiness: 503 while loading (ready_requires_model) or draining"),
            "/metrics": _get("Prometheus metrics"),
        },
        "components": {"schemas": schemas},
    }
