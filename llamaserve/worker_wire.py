"""The framing between the server and a model's worker process: length-prefixed msgpack over a socket pair.

One frame is a 4-byte big-endian length and a msgpack body (msgspec). The worker sends one
frame of events per engine step (every token every running sequence sampled in that step),
never a frame per token, and the server sends one frame per request, cancel or call. Messages
are plain tuples of numbers, strings and lists, so decoding runs no code the peer chose (unlike
pickle).
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
from typing import Any

import msgspec

_HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024        # a frame claiming more than this is a broken peer


class ConnectionClosed(EOFError):
    """The peer closed its end (or died)."""


class Wire:
    """One end of the socket pair: `recv` from one thread, `send` from any (sends are serialised)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder()
        self._send_lock = threading.Lock()
        self._buffer = bytearray()

    def encode(self, message: Any) -> bytes:
        """The frame for `message`; ValueError when it holds what msgpack cannot carry (an int past 64 bits)."""
        try:
            body = self._encoder.encode(message)
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"the request holds a value that cannot be processed: {exc}") from None
        return _HEADER.pack(len(body)) + body

    def send(self, message: Any) -> None:
        self.send_frame(self.encode(message))

    def send_frame(self, frame: bytes) -> None:
        with self._send_lock:
            try:
                self.sock.sendall(frame)
            except OSError as exc:
                raise ConnectionClosed(str(exc)) from None

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


class Outbox:
    """Sends from a thread of its own: a caller (the event loop) never blocks on a full socket
    buffer, even when the peer has stopped reading (a hung or stopped worker)."""

    def __init__(self, wire: Wire, name: str) -> None:
        self.wire = wire
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()     # frames, and _STOP
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, message: Any) -> None:
        """Encode `message` now (a bad value raises ValueError here, in the caller) and send it soon."""
        self._queue.put(self.wire.encode(message))

    def put_frame(self, frame: bytes) -> None:
        """Send a frame already made with Wire.encode."""
        self._queue.put(frame)

    def stop(self) -> None:
        self._queue.put(_STOP)

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if message is _STOP:
                return
            try:
                self.wire.send_frame(message)
            except ConnectionClosed:
                return           # the reader sees the closed connection and reports it


_STOP = object()

__all__ = ["ConnectionClosed", "MAX_FRAME", "Outbox", "Wire"]
