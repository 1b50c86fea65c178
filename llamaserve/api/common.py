"""Reading a request (JSON body into a schema, model lookup, shared validation) and answering it."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore.generation.sampling import SamplingParams
from llamaserve.api.errors import APIError, api_error_for
from llamaserve.api.openai.protocol import AdapterFields
from llamaserve.api.sse import CLIENT_CLOSED_REQUEST, event, first_event, sse_response, unless_gone
from llamaserve.api.state import server_state
from llamaserve.config.settings import ModelEntry
from llamaserve.engine.client import EngineClient
from llamaserve.errors import AdapterUnavailableError
from llamaserve.lora.selection import Selection, select_adapters
from llamaserve.models.registry import Loaded, Registry
from llamaserve.serving.choices import Choice, ChoiceEvents

T = TypeVar("T", bound=BaseModel)


def is_admin(request: Request) -> bool:
    """Whether the client may see the server's own paths (APIKeyAuth decides; with no admin_key, anyone)."""
    return bool(getattr(request.state, "admin", True))


def shown_path(request: Request, path: str | os.PathLike[str]) -> str:
    """A file's path as the client sees it: whole for admins, else its name."""
    return os.fspath(path) if is_admin(request) else os.path.basename(os.fspath(path))


# messages (or Responses input items) one request may hold: each is validated and rendered
MAX_MESSAGES = 4096


def _is_json(content_type: str) -> bool:
    """application/json, or a JSON type (application/x+json), parameters aside."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def parse_body(request: Request, schema: type[T]) -> T:
    """The request's JSON body as `schema`. Only a JSON Content-Type is read: a page can POST text/plain
    to any site without the browser asking the server first (a CORS "simple request")."""
    limit = server_state(request).config.max_body_bytes
    if not _is_json(request.headers.get("content-type", "")) and request.headers.get("content-length") != "0" \
            and ("content-length" in request.headers or "transfer-encoding" in request.headers):
        raise APIError(415, "send the body as JSON, with Content-Type: application/json")
    if int(request.headers.get("content-length") or 0) > limit:
        raise APIError(413, f"request body is larger than {limit} bytes")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise APIError(413, f"request body is larger than {limit} bytes")
    try:
        data = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:      # ~1000 nested [ or {: json's decoder recurses
        raise APIError(400, "request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object")
    for key in ("messages", "input"):
        if isinstance(data.get(key), list) and len(data[key]) > MAX_MESSAGES:
            raise APIError(400, f"{key}: {len(data[key])} items; at most {MAX_MESSAGES} are accepted", param=key)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise APIError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param) from None


async def acquire(stack: AsyncExitStack, registry: Registry, name: str | None) -> tuple[ModelEntry, Loaded]:
    """(entry, loaded base) for a request, pinned until `stack` closes.

    An unknown model, a failed load or no room to load raise the registry's errors, which the
    application answers through `api_error_for`.
    """
    entry = registry.entry(name, fallback=True)
    loaded: Loaded = await stack.enter_async_context(registry.use(entry))
    return entry, loaded


@dataclass(frozen=True)
class Acquired:
    """A generation request's model: its entry, the loaded base and engine, and its adapters."""

    entry: ModelEntry
    loaded: Loaded
    engine: EngineClient
    selection: Selection


async def acquire_engine(stack: AsyncExitStack, registry: Registry, body: AdapterFields,
                         name: str | None) -> Acquired:
    """The generation model a request names and the adapters it selects, pinned until `stack` closes.

    Adapter names and ids are checked before the base loads (a 400 costs no load); the selected
    adapters are pinned first, so a removal while this request waits for the load or runs frees
    them only when it ends.
    """
    entry = registry.entry(name, fallback=True)
    apply_sampling_defaults(body, entry)
    selection = select_adapters(registry.catalog(entry), entry, body)
    registry.pin(selection.used)
    stack.callback(registry.unpin, entry, selection.used)
    loaded: Loaded = await stack.enter_async_context(registry.use(entry))
    if loaded.engine is None:
        raise APIError(400, f"model '{entry.alias}' is an embedding model; use /v1/embeddings", param="model")
    for adapter in selection.used:
        if adapter.path not in loaded.engine.adapters:
            raise AdapterUnavailableError(f"adapter '{adapter.name}' did not load with model '{entry.alias}': "
                                          f"{adapter.error or 'unknown reason'}")
    return Acquired(entry, loaded, loaded.engine, selection)


# the names one default goes by in the different request shapes; a request that sets any keeps its own
_SPELLINGS = {"max_tokens": ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict")}


def apply_sampling_defaults(body: BaseModel, entry: ModelEntry) -> None:
    """Give the fields `body` leaves out the model's `sampling:` defaults (as llama-server's --temp etc.)."""
    for key, value in entry.sampling.items():
        names = _SPELLINGS.get(key, (key,))
        if any(n in body.model_fields_set for n in names):
            continue
        name = next((n for n in names if n in type(body).model_fields), None)
        if name is not None:
            setattr(body, name, value)


# what the OpenAI routes use for samplers OpenAI has no field for (llama.cpp's own defaults differ)
_OPENAI_NEUTRAL = {"top_k": 0, "min_p": 0.0}


def sampling_for(entry: ModelEntry, body: BaseModel, **given: Any) -> SamplingParams:
    """SamplingParams from the request's own fields (`given`), plus the model's `sampling:` defaults
    for parameters the request's API has no field for (top_k and min_p on the Responses API...)."""
    names = {f.name for f in dataclasses.fields(SamplingParams)}
    defaults = {("mirostat_mode" if k == "mirostat" else k): v for k, v in entry.sampling.items()}
    extra = {k: v for k, v in defaults.items() if k in names and k not in type(body).model_fields}
    return SamplingParams(**{**_OPENAI_NEUTRAL, **extra, **given})


def count_adapter_usage(stack: AsyncExitStack, registry: Registry, acquired: Acquired, n_prompt: int,
                        choices: list[Choice]) -> None:
    """Once the request ends, count it and its tokens for each adapter it decoded with."""
    if acquired.selection.used:
        stack.callback(lambda: registry.record_usage(acquired.entry, acquired.selection.used, n_prompt,
                                                     sum(c.n_generated for c in choices)))


def check_prompt_fits(n_tokens: int, n_ctx: int, param: str = "messages") -> None:
    if n_tokens >= n_ctx:
        raise APIError(400, f"This model's maximum context length is {n_ctx} tokens, but the prompt has "
                            f"{n_tokens} tokens. Please shorten the prompt.", param=param,
                       code="context_length_exceeded")


# (events to drain, the stream's chunks, the JSON result once drained)
Prepared = tuple[ChoiceEvents[Any], Callable[[], AsyncGenerator[Any, None]], Callable[[], Mapping[str, Any]]]


async def respond(request: Request, stream: bool, prepare: Callable[[AsyncExitStack], Awaitable[Prepared]], *,
                  encode: Callable[[Any], str] = event, end: str = "data: [DONE]\n\n",
                  on_error: Callable[[APIError], str] | None = None) -> Response:
    """Run a generation route: `prepare(stack)` pins the model and submits the work, returning
    (events, make_chunks, make_result).

    Streamed, the SSE response starts with the first event (`first_event`), then takes over `stack`
    and closes it when the stream ends or the client leaves; otherwise the events are drained and
    the stack closed here, before the JSON is built. `encode`, `end` and `on_error` write another
    API's stream (`sse_response`).
    """
    stack = AsyncExitStack()
    handed_over = False
    try:
        events, make_chunks, make_result = await prepare(stack)
        if stream:
            if (left := await first_event(events, request)) is not None:
                return left
            handed_over = True
            return sse_response(make_chunks(), release=stack.aclose, encode=encode, end=end, on_error=on_error)
        if not await drained_unless_gone(events, request):
            return Response(status_code=CLIENT_CLOSED_REQUEST)      # its work is cancelled as the stack closes
    except Exception as exc:        # the server's own errors, and an engine's failure, as the client sees them
        raise api_error_for(exc) from None
    finally:
        if not handed_over:
            await stack.aclose()
    return JSONResponse(make_result())


async def drained_unless_gone(events: AsyncIterator[Any], request: Request) -> bool:
    """Consume `events` to their end (True), unless the client disconnects first (False): a non-streamed
    answer nobody will read must not keep its slot (llama-server cancels these too)."""
    async def drain() -> None:
        async for _ in events:
            pass
    return await unless_gone(drain(), request)
