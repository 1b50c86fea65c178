"""What crosses the process line between the server and a model worker, as plain tuples.

Server -> worker:
    ("load", spec)                     first frame: what to load (WorkerSpec.as_message)
    ("submit", [[rid, tokens, sampling, max_tokens, adapters, n_logprobs, ignore_eos, progress, images], ...])
                                       images: [start, image id] (llamaserve.worker.media)
    ("cancel", rid)
    ("call", cid, name, args)          add_adapter / remove_adapter / tokenize_media / create_embedding
    ("close",)
Worker -> server:
    ("ready", info) or ("load_failed", error)
    ("step", active, queued, drafted, accepted, events, [decodes, busy, verified])   one frame per engine step
    ("reply", cid, ok, result_or_error)

An event is (rid, STARTED, n_cached, at), (rid, PROGRESS, n_processed, at), (rid, TOKEN, id, logprob), (rid, FINISHED, reason,
n_generated) or (rid, FAILED, error); an error is (type name, message) and comes back as the same exception
type when the server knows it, else as RuntimeError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llamacore.generation.events import EngineEvent, Failed, Finished, FinishReason, Progress, Started, Token
from llamacore.generation.logprobs import TokenLogprob
from llamacore.generation.sampling import SamplingParams
from llamacore.rpc import RPCUnavailableError
from llamaserve.errors import EngineClosedError, QueueFullError

TOKEN, FINISHED, FAILED, STARTED, PROGRESS = 0, 1, 2, 3, 4

# exception types that keep their type across the process line (the server maps them to statuses)
_ERRORS: dict[str, type[BaseException]] = {
    t.__name__: t for t in (ValueError, FileNotFoundError, PermissionError, KeyError, OverflowError,
                            EngineClosedError, QueueFullError, MemoryError, RPCUnavailableError)}


def encode_error(exc: BaseException) -> tuple[str, str]:
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return type(exc).__name__, str(message)


def decode_error(error: Any) -> BaseException:
    name, message = error
    kind = _ERRORS.get(name)
    return kind(message) if kind is not None else RuntimeError(f"{name}: {message}" if message else name)


def encode_event(rid: int, event: EngineEvent) -> tuple:
    if isinstance(event, Token):
        lp = event.logprob
        return rid, TOKEN, event.id, None if lp is None else (lp.token, lp.text, lp.logprob, lp.top)
    if isinstance(event, Finished):
        return rid, FINISHED, event.reason.value, event.n_generated
    if isinstance(event, Started):
        return rid, STARTED, event.n_cached, event.at
    if isinstance(event, Progress):
        return rid, PROGRESS, event.n_processed, event.at
    return rid, FAILED, encode_error(event.error), None


def decode_event(item: Any) -> tuple[int, EngineEvent]:
    rid, kind, a, b = item
    if kind == TOKEN:
        lp = None if b is None else TokenLogprob(b[0], b[1], b[2], [tuple(t) for t in b[3]])
        return rid, Token(a, lp)
    if kind == FINISHED:
        return rid, Finished(FinishReason(a), b)
    if kind == STARTED:
        return rid, Started(a, b)
    if kind == PROGRESS:
        return rid, Progress(a, b)
    return rid, Failed(decode_error(a))


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


__all__ = ["FAILED", "FINISHED", "TOKEN", "decode_error", "decode_event", "decode_sampling", "encode_error",
           "encode_event", "encode_sampling"]
