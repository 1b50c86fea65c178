"""ggml RPC workers: endpoints, the handshake check made before llama.cpp sees an endpoint, serving.

llama.cpp's RPC client aborts the whole process when it cannot connect to a worker, when the
handshake fails or when the worker speaks another protocol version, and a worker that is busy
with another client never answers the handshake at all (it serves one client at a time). So
before `Model(..., rpc_servers=[...])` hands an endpoint to llama.cpp, `preflight` makes the same
handshake itself, with a timeout, and raises RPCUnavailableError saying what is wrong.

Wire format (ggml/src/ggml-rpc/ggml-rpc.cpp): a request is ``cmd:u8 | size:u64le | payload``, a
response ``size:u64le | payload``. HELLO (command 14) carries 24 bytes of transport capabilities
(zero: plain TCP) and is answered with ``major:u8 minor:u8 patch:u8 pad:u8`` and 24 bytes.

The protocol has no authentication and no encryption: a worker must only listen on loopback or a
trusted private network, and only the operator's configuration names endpoints.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

RPC_CMD_HELLO = 14
CONN_CAPS_SIZE = 24
DEFAULT_PORT = 50052


class RPCUnavailableError(ConnectionError):
    """An RPC worker cannot be used: unreachable, busy with another client, or another protocol version."""


def parse_endpoint(endpoint: str) -> str:
    """"host:port" checked (an IPv4 address or a host name, a port in 1..65535); returns it stripped."""
    text = str(endpoint).strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"RPC endpoint {endpoint!r} is not host:port (e.g. 127.0.0.1:{DEFAULT_PORT})")
    if ":" in host or "[" in host:
        raise ValueError(f"RPC endpoint {endpoint!r}: IPv6 addresses are not supported by ggml's RPC backend")
    return f"{host}:{int(port)}"


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def preflight(endpoint: str, timeout: float = 5.0) -> tuple[int, int, int]:
    """Connect to the worker and make the RPC handshake; returns its protocol version.

    Raises RPCUnavailableError when the worker refuses the connection, does not answer within
    `timeout` (busy serving another client, or not an RPC worker), or speaks another version.
    The connection is closed at once, which frees the worker for the real client.
    """
    from llamacore._core import rpc_protocol_version

    endpoint = parse_endpoint(endpoint)
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<BQ", RPC_CMD_HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
            answer = _recv_exactly(sock, 8 + 4 + CONN_CAPS_SIZE)
    except TimeoutError:
        raise RPCUnavailableError(f"RPC worker {endpoint} did not answer the handshake within {timeout:g} s "
                                  f"(busy serving another client, or not an RPC worker)") from None
    except OSError as exc:
        raise RPCUnavailableError(f"RPC worker {endpoint} is not reachable: {exc.strerror or exc}") from None
    size = struct.unpack_from("<Q", answer)[0]
    major, minor, patch = answer[8], answer[9], answer[10]
    ours = rpc_protocol_version()
    if size != 4 + CONN_CAPS_SIZE or major != ours[0] or minor > ours[1]:
        raise RPCUnavailableError(f"RPC worker {endpoint} speaks RPC protocol {major}.{minor}.{patch}; this "
                                  f"build speaks {ours[0]}.{ours[1]}.{ours[2]} (run the same llamacore version)")
    return major, minor, patch


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError("the worker closed the connection during the handshake")
        data += chunk
    return bytes(data)


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, threads: int | None = None,
          cache_dir: str | None = None) -> None:
    """Run this process as an RPC worker (its GPUs, else its CPU) until it is stopped; raises
    OSError when it cannot listen. Ctrl-C and SIGTERM end it (llama.cpp's loop holds no GIL)."""
    import os
    import signal

    from llamacore._core import serve_rpc

    parse_endpoint(f"{host}:{port}")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"an RPC worker listens on an IPv4 address of this machine (127.0.0.1, 0.0.0.0, ...), "
                         f"not {host!r}") from None
    signal.signal(signal.SIGINT, signal.SIG_DFL)       # the C loop never returns to Python's handler
    serve_rpc(host, port, threads or os.cpu_count() or 1, cache_dir)


__all__ = ["DEFAULT_PORT", "RPCUnavailableError", "is_loopback", "parse_endpoint", "preflight", "serve"]
