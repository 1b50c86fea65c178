"""The framing between the server and a model's worker process: length-prefixed msgpack over a socket pair.

`Wire` is the blocking side (the worker, and the server while a worker loads); `FrameProtocol`
reads the same frames on the server's event loop once the worker is up.

One frame is a 4-byte big-endian length and a msgpack body (msgspec). The worker sends one
frame of events per engine step (every token every running sequence sampled in that step),
never a frame per token, and the server sends one frame per request, cancel or call. Messages
are the structs of llamaserve.worker.protocol, numbers, strings and lists on the wire, so decoding
runs no code the peer chose (unlike pickle).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import msgspec

_HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024        # a frame claiming more than this is a broken peer


class ConnectionClosed(EOFError):
    """The peer closed its end (or died)."""


class Wire:
    """One end of the socket pair: `recv` from one thread, `send` from any (sends are serialised)."""

    def __init__(self, sock: socket.socket, receives: Any = Any) -> None:
        """`receives`: the type frames from the other end decode into (llamaserve.worker.protocol)."""
        self.sock = sock
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(receives)
        self._send_lock = threading.Lock()
        self._buffer = bytearray()

    def encode(self, message: Any) -> bytes:
        """The frame for `message`; ValueError when it holds what msgpack cannot carry (an int past 64 bits)."""
        try:
            body = self._encoder.encode(message)
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"the request holds a value that cannot be processed: {exc}") from None
        return _HEADER.pack(len(body)) + body

    def encode_item(self, item: Any) -> msgspec.Raw:
        """`item` encoded once, to be placed in a later frame as it is (ValueError as `encode`)."""
        try:
            return msgspec.Raw(self._encoder.encode(item))
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"the request holds a value that cannot be processed: {exc}") from None

    def send(self, message: Any) -> None:
        self.send_frame(self.encode(message))

    def send_frame(self, frame: bytes) -> None:
        with self._send_lock:
            try:
                self.sock.sendall(frame)
            except OSError as exc:
                raise ConnectionClosed(str(exc)) from None

    def leftover(self) -> bytes:
        """Bytes read past the last frame `recv` returned (for whoever reads the socket next)."""
        return bytes(self._buffer)

    def recv(self) -> Any:
        size = _HEADER.unpack(self._read(_HEADER.size))[0]
        if size > MAX_FRAME:
            raise ConnectionClosed(f"frame of {size} bytes is larger than {MAX_FRAME}")
        return self._decoder.decode(self._read(size))

    def _read(self, n: int) -> bytes:
        buf = self._buffer
        while len(buf) < n:
            try:
                chunk = self.sock.recv(max(65536, n - len(buf)))
            except OSError as exc:
                raise ConnectionClosed(str(exc)) from None
            if not chunk:
                raise ConnectionClosed("connection closed")
            buf += chunk
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class FrameProtocol(asyncio.Protocol):
    """The event loop's side of a socket: complete frames go to `on_message`, the end to `on_lost`.

    Reading on the loop itself (no reader thread) hands each step's tokens to the HTTP side
    with no thread switch and no wait for the GIL.
    """

    def __init__(self, on_message: Callable[[Any], None], on_lost: Callable[[], None], initial: bytes = b"",
                 receives: Any = Any) -> None:
        self.on_message, self.on_lost = on_message, on_lost
        self._decoder = msgspec.msgpack.Decoder(receives)
        self._buffer = bytearray(initial)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport      # type: ignore[assignment]
        self._drain()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._drain()

    def _drain(self) -> None:
        buf = self._buffer
        while len(buf) >= _HEADER.size:
            size = _HEADER.unpack_from(buf)[0]
            if size > MAX_FRAME:
                assert self.transport is not None
                self.transport.abort()
                return
            end = _HEADER.size + size
            if len(buf) < end:
                return
            message = self._decoder.decode(bytes(buf[_HEADER.size:end]))
            del buf[:end]
            self.on_message(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost()



__all__ = ["ConnectionClosed", "FrameProtocol", "MAX_FRAME", "Wire"]
