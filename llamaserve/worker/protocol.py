"""What crosses the process line between the server and a model worker: msgspec structs.

Each frame is a tagged, array-like struct: msgpack carries it as a short array whose first item is
the tag, as compact as a tuple, and the receiving side decodes it into named, typed fields (a
frame of another shape is a decode error, not a misread field).

Server -> worker (`ToWorker`): `Load` (the first frame), `Submit` (the submissions of one event-loop
turn), `Cancel`, `Call` (add_adapter, remove_adapter, tokenize_media, create_embedding), `Close`.
Worker -> server (`ToServer`): `Ready` or `LoadFailed`, then one `Step` per engine step (its events
for every sequence) and a `Reply` per call. Fork server -> server (`FromForkServer`): `ForkReady`,
then `Spawned` and `Exited` for each worker it forks. An error crosses as (type name, message) and comes back
as the same exception type when the server knows it, else as RuntimeError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from llamacore.errors import GrammarBudgetError
from llamacore.generation.events import EngineEvent, Failed, Finished, FinishReason, Progress, Started, Token
from llamacore.generation.logprobs import TokenLogprob
from llamacore.generation.sampling import SamplingParams
from llamacore.rpc import RPCUnavailableError
from llamaserve.errors import EngineClosedError, QueueFullError

WireError = tuple[str, str]          # (exception type name, message)


class _Frame(msgspec.Struct, array_like=True):
    pass


# -- server -> worker ------------------------------------------------------------------------------

class Load(_Frame, tag="load"):
    spec: dict[str, Any]                 # what to load (llamaserve.models.factory builds it)


class Submission(msgspec.Struct, array_like=True):
    """One generation request. Image rows are -1 in `tokens` (placeholders do not fit in 64 bits);
    `images` are (start, image id) pairs (llamaserve.worker.media)."""

    rid: int
    tokens: list[int]
    sampling: dict[str, Any]             # encode_sampling's form
    max_tokens: int
    adapters: list[tuple[str, float]]
    n_logprobs: int | None
    ignore_eos: bool
    progress: bool
    images: list[tuple[int, str]]


class Submit(_Frame, tag="submit"):
    items: list[msgspec.Raw]             # Submissions, each encoded when it arrived (so a request that
                                         # cannot cross fails alone, at once)


class Cancel(_Frame, tag="cancel"):
    rid: int


class Call(_Frame, tag="call"):
    cid: int
    name: str
    args: list[Any]


class Close(_Frame, tag="close"):
    pass


ToWorker = Load | Submit | Cancel | Call | Close


# -- worker -> server ------------------------------------------------------------------------------

class Ready(_Frame, tag="ready"):
    info: dict[str, Any]


class LoadFailed(_Frame, tag="load_failed"):
    error: WireError


class StartedEvent(msgspec.Struct, array_like=True, tag=0):
    rid: int
    n_cached: int
    at: float


class ProgressEvent(msgspec.Struct, array_like=True, tag=1):
    rid: int
    n_processed: int
    at: float


class TokenEvent(msgspec.Struct, array_like=True, tag=2):
    rid: int
    id: int
    logprob: tuple[int, str, float | None, list[tuple[int, str, float]]] | None


class FinishedEvent(msgspec.Struct, array_like=True, tag=3):
    rid: int
    reason: str
    n_generated: int


class FailedEvent(msgspec.Struct, array_like=True, tag=4):
    rid: int
    error: WireError


WireEvent = StartedEvent | ProgressEvent | TokenEvent | FinishedEvent | FailedEvent
LAST_EVENTS = (FinishedEvent, FailedEvent)      # a request's final event


class Step(_Frame, tag="step"):
    active: int
    queued: int
    drafted: int
    accepted: int
    events: list[WireEvent]
    decodes: tuple[int, int, int]        # decode calls, busy seconds' worth, verify batches (decode_counts)


class Reply(_Frame, tag="reply"):
    cid: int
    ok: bool
    value: Any                           # the call's result, or a WireError


ToServer = Ready | LoadFailed | Step | Reply


# -- the fork server (llamaserve.worker.forks) -> the server ---------------------------------------

class ForkReady(_Frame, tag="fork_ready"):
    pass


class Spawned(_Frame, tag="spawned"):
    pid: int                             # a worker forked for the socket the server sent last


class Exited(_Frame, tag="exited"):
    pid: int
    code: int                            # as os.waitstatus_to_exitcode gives it (-N: signal N)


FromForkServer = ForkReady | Spawned | Exited


# -- errors, events and sampling parameters ---------------------------------------------------------

# exception types that keep their type across the process line (the server maps them to statuses)
_ERRORS: dict[str, type[BaseException]] = {
    t.__name__: t for t in (ValueError, FileNotFoundError, PermissionError, KeyError, OverflowError, IndexError,
                            EngineClosedError, QueueFullError, MemoryError, RPCUnavailableError,
                            GrammarBudgetError)}


def encode_error(exc: BaseException) -> WireError:
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return type(exc).__name__, str(message)


def decode_error(error: WireError) -> BaseException:
    name, message = error
    kind = _ERRORS.get(name)
    return kind(message) if kind is not None else RuntimeError(f"{name}: {message}" if message else name)


def encode_event(rid: int, event: EngineEvent) -> WireEvent:
    if isinstance(event, Token):
        lp = event.logprob
        return TokenEvent(rid, event.id, None if lp is None else (lp.token, lp.text, lp.logprob, lp.top))
    if isinstance(event, Finished):
        return FinishedEvent(rid, event.reason.value, event.n_generated)
    if isinstance(event, Started):
        return StartedEvent(rid, event.n_cached, event.at)
    if isinstance(event, Progress):
        return ProgressEvent(rid, event.n_processed, event.at)
    return FailedEvent(rid, encode_error(event.error))


def decode_event(item: WireEvent) -> EngineEvent:
    if isinstance(item, TokenEvent):
        lp = item.logprob
        return Token(item.id, None if lp is None else TokenLogprob(lp[0], lp[1], lp[2], lp[3]))
    if isinstance(item, FinishedEvent):
        return Finished(FinishReason(item.reason), item.n_generated)
    if isinstance(item, StartedEvent):
        return Started(item.n_cached, item.at)
    if isinstance(item, ProgressEvent):
        return Progress(item.n_processed, item.at)
    return Failed(decode_error(item.error))


def encode_sampling(sampling: SamplingParams) -> dict[str, Any]:
    fields = dataclasses.asdict(sampling)
    fields["logit_bias"] = [[int(k), float(v)] for k, v in sampling.logit_bias.items()]
    seed = sampling.seed
    if seed is not None and not -2**63 <= seed < 2**63:
        # llama.cpp's samplers use the low 32 bits (a negative seed means "random" to dist): keep
        # both the bits and the sign in a number msgpack can carry
        fields["seed"] = seed & 0xFFFFFFFF if seed >= 0 else (seed & 0xFFFFFFFF) - 2**32
    return fields


def decode_sampling(fields: dict[str, Any]) -> SamplingParams:
    fields = dict(fields)
    fields["logit_bias"] = {int(k): float(v) for k, v in fields["logit_bias"]}
    return SamplingParams(**fields)


__all__ = ["LAST_EVENTS", "Call", "Cancel", "Close", "Exited", "FailedEvent", "FinishedEvent", "ForkReady",
           "FromForkServer", "Load", "LoadFailed", "Spawned",
           "ProgressEvent", "Ready", "Reply", "StartedEvent", "Step", "Submission", "Submit", "ToServer",
           "ToWorker", "TokenEvent", "WireError", "WireEvent", "decode_error", "decode_event", "decode_sampling",
           "encode_error", "encode_event", "encode_sampling"]
