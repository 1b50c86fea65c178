"""A model's worker process (`isolation: process`): one Engine (or embedder) per process.

Started by llamaserve.worker.client as ``python -m llamaserve.worker.child FD`` with one end of a
socket pair. It loads what the first frame names, answers ("ready", info), then runs the engine
and relays its events, one frame per engine step. A crash here (a llama.cpp abort, the OOM
killer, SIGKILL) ends only this process; the server sees the closed socket and fails this
model's requests alone. When the server goes away the socket closes and the worker exits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from llamacore import Llama
from llamacore.generation.events import EngineEvent, Failed
from llamaserve.engine.engine import Engine
from llamaserve.engine.request import GenRequest
from llamaserve.engine.speculative import drafter_spec
from llamaserve.runtime.logs import configure, loading_model, request_id
from llamaserve.worker.media import ChunkCache
from llamaserve.worker.protocol import (
    LAST_EVENTS,
    Call,
    Cancel,
    Close,
    Load,
    LoadFailed,
    Ready,
    Reply,
    Step,
    Submission,
    Submit,
    ToWorker,
    WireEvent,
    decode_sampling,
    encode_error,
    encode_event,
)
from llamaserve.worker.wire import ConnectionClosed, Wire

_SUBMISSION = msgspec.msgpack.Decoder(Submission)

log = logging.getLogger(__name__)

SWITCH_INTERVAL = 0.0005   # seconds a thread holds the GIL while another waits for it
BEAT = 0.5     # seconds: a step frame goes out at least this often while steps run (the server's watchdog)


class EngineHost:
    """Runs an Engine for the server: requests in, one frame of events per step out."""

    def __init__(self, wire: Wire, spec: dict[str, Any]) -> None:
        self.wire = wire
        speculative = spec.get("speculative")
        self.engine = Engine(
            spec["model"], [], parallel=spec["parallel"], max_queue=spec["max_queue"], n_ctx=spec["n_ctx"],
            kv_unified=spec["kv_unified"], share_prefixes=spec["share_prefixes"], cache_ram=spec["cache_ram"],
            seed=spec.get("seed"),
            speculative=drafter_spec(speculative, spec["model"]) if speculative else None,
            projector_path=spec.get("projector"),
            model_kwargs=spec["model_kwargs"], context_kwargs=spec["context_kwargs"])
        self.chunks = ChunkCache(self.engine.projector) if self.engine.projector is not None else None
        self.requests: dict[int, GenRequest] = {}
        self._events: list[WireEvent] = []
        self._lock = threading.Lock()
        self._last_sent = time.monotonic()

    def info(self) -> dict[str, Any]:
        e = self.engine
        return {"n_ctx_seq": e.n_ctx_seq, "capacity": e.capacity, "memory_bytes": e.memory_bytes()}

    def calls(self) -> dict[str, Callable[..., Any]]:
        def add_adapter(path: str) -> None:
            self.engine.add_adapter(path)

        def tokenize_media(parts: list[str | bytes], add_special: bool, parse_special: bool) -> list[Any]:
            if self.chunks is None:
                raise ValueError("image input is not supported: this model has no vision projector")
            return self.chunks.tokenize(parts, add_special, parse_special)
        return {"add_adapter": add_adapter, "remove_adapter": self.engine.remove_adapter,
                "tokenize_media": tokenize_media}

    def start(self) -> None:
        self.engine.on_step = self.flush
        self.engine.start()

    def submit(self, items: list[msgspec.Raw]) -> None:
        """Requests that arrived in one frame, queued together (they enter the same step)."""
        reqs: list[GenRequest] = []
        failed: list[tuple[GenRequest, Exception]] = []
        for raw in items:
            sub = _SUBMISSION.decode(raw)
            tokens = sub.tokens
            placed: dict[int, Any] = {}
            error: Exception | None = None
            if sub.images:
                try:
                    if self.chunks is None:
                        raise ValueError("image input is not supported: this model has no vision projector")
                    tokens, placed = self.chunks.prompt(tokens, sub.images)
                except ValueError as exc:
                    error = exc
            req = GenRequest(tokens, decode_sampling(sub.sampling), sub.max_tokens, tuple(sub.adapters),
                             self._emitter(sub.rid), n_logprobs=sub.n_logprobs, ignore_eos=sub.ignore_eos,
                             progress=sub.progress, images=placed)
            self.requests[sub.rid] = req
            if error is None:
                reqs.append(req)
            else:
                failed.append((req, error))
        refused = failed + [(req, e) for req, e in zip(reqs, self.engine.submit_all(reqs)) if e is not None]
        for req, problem in refused:     # the server checked the same limits; a race at most
            req.emit(Failed(problem))
        if refused:
            self.flush()

    def cancel(self, rid: int) -> None:
        req = self.requests.get(rid)
        if req is not None:
            req.cancel()

    def _emitter(self, rid: int) -> Callable[[EngineEvent], None]:
        def emit(event: EngineEvent) -> None:
            item = encode_event(rid, event)
            with self._lock:
                self._events.append(item)
            if isinstance(item, LAST_EVENTS):     # the request's last event
                self.requests.pop(rid, None)
        return emit

    def flush(self) -> None:
        """Send what this step produced (and a beat when nothing was produced for a while)."""
        with self._lock:
            events, self._events = self._events, []
        now = time.monotonic()
        if not events and now - self._last_sent < BEAT:
            return
        e = self.engine
        drafted, accepted = e.speculative_counts() or (0, 0)
        self.wire.send(Step(e.active, e.queued, drafted, accepted, events, e.decode_counts()))
        self._last_sent = now

    def close(self) -> None:
        self.engine.close()
        self.flush()


class EmbedHost:
    """An embedding model (llamacore.Llama with embedding=True); the server sends one call at a time."""

    def __init__(self, wire: Wire, spec: dict[str, Any]) -> None:
        self.llama = Llama(spec["model"], embedding=True, **spec["llama_kwargs"])

    def info(self) -> dict[str, Any]:
        return {"memory_bytes": self.llama.model.size, "n_embd_out": self.llama.model.n_embd_out,
                "pooling": self.llama.ctx.pooling, "n_ctx": self.llama.ctx.n_ctx}

    def calls(self) -> dict[str, Callable[..., Any]]:
        return {"create_embedding": self.create_embedding}

    def create_embedding(self, *args: Any) -> dict[str, Any]:
        """Llama.create_embedding's answer, with the decodes it took (for the server's metrics)."""
        before = self.llama.embed_decodes
        result = self.llama.create_embedding(*args)
        return {**result, "n_decode": self.llama.embed_decodes - before}

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def serve(wire: Wire, host: EngineHost | EmbedHost) -> None:
    """Read frames until Close or until the server's end closes."""
    calls = host.calls()
    while True:
        try:
            message = wire.recv()
        except ConnectionClosed:
            return
        if isinstance(message, Submit) and isinstance(host, EngineHost):
            host.submit(message.items)
        elif isinstance(message, Cancel) and isinstance(host, EngineHost):
            host.cancel(message.rid)
        elif isinstance(message, Call):
            threading.Thread(target=_answer, args=(wire, message.cid, calls[message.name], message.args),
                             daemon=True).start()
        elif isinstance(message, Close):
            return
        else:
            raise ValueError(f"unexpected frame {type(message).__name__}")


def _answer(wire: Wire, cid: int, call: Callable[..., Any], args: list) -> None:
    try:
        result = call(*args)
    except Exception as exc:
        reply = Reply(cid, False, encode_error(exc))
    else:
        reply = Reply(cid, True, result)
    try:
        wire.send(reply)
    except ConnectionClosed:
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C reaches the server; it closes its workers
    # the frame reader must get the GIL from the engine thread's Python work between decodes soon
    # after a request arrives, not after the default 5 ms
    sys.setswitchinterval(SWITCH_INTERVAL)
    wire = Wire(socket.socket(fileno=int(argv[0])), receives=ToWorker)
    load = wire.recv()
    assert isinstance(load, Load), load
    spec = load.spec
    configure(spec.get("log_level", "info"))
    loading_model.set(spec.get("label"))      # llama.cpp's lines from this process name the model
    loading_for = request_id.set(spec.get("request_id"))     # ...and, while it loads, the request that asked
    host: EngineHost | EmbedHost
    try:
        host = EmbedHost(wire, spec) if spec["kind"] == "embed" else EngineHost(wire, spec)
    except Exception as exc:
        wire.send(LoadFailed(encode_error(exc)))
        return 1
    finally:
        request_id.reset(loading_for)
    wire.send(Ready({**host.info(), "pid": os.getpid()}))
    host.start()
    try:
        serve(wire, host)
    finally:
        host.close()
        wire.close()
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main())
