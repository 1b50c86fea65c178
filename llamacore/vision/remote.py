"""Remote images: http(s) fetches bounded in time and size that reach public addresses only (every
connection, redirects' too, vetted after resolution and pinned), and fail without telling the client
what answered on the server's network."""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from typing import IO, Any

from llamacore.vision.policy import MediaError, MediaPolicy, too_big


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects only to http(s): a server must not bounce us to file:, ftp: and the like."""

    def http_error_302(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Message
    ) -> Any:
        location = headers.get("location") or headers.get("uri")
        if location is not None:
            target = urllib.parse.urljoin(req.full_url, location)
            if urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
                fp.close()
                raise MediaError(f"image URL redirected to a non-http(s) URL, refused: {target!r}")
        return super().http_error_302(req, fp, code, msg, headers)  # type: ignore[arg-type]

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


class _Watchdog:
    """Shuts a fetch's sockets down at its deadline: per-read timeouts alone let a server trickle forever."""

    def __init__(self, seconds: float) -> None:
        self.sockets: list[socket.socket] = []
        self.expired = False
        self.timer = threading.Timer(seconds, self._expire)
        self.timer.daemon = True

    def _expire(self) -> None:
        self.expired = True
        for sock in self.sockets:
            self._shutdown(sock)

    def _shutdown(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv, unlike close()

    def connection(self, base: type[http.client.HTTPConnection], allow: tuple[str, ...]
                   ) -> type[http.client.HTTPConnection]:
        watchdog = self

        class Connection(base):  # type: ignore[valid-type,misc]
            def connect(self) -> None:
                # the address is vetted after resolution and then connected to as vetted (a second lookup
                # could answer differently: DNS rebinding); TLS still checks the certificate for the name
                self._create_connection = lambda address, timeout, source: _public_connection(
                    address, timeout, source, allow)
                super().connect()
                watchdog.sockets.append(self.sock)
                if watchdog.expired:
                    watchdog._shutdown(self.sock)

        return Connection

    def opener(self, allow: tuple[str, ...] = ()) -> urllib.request.OpenerDirector:
        """http(s) only: no file:, ftp: or data: handlers at all, and no proxy (the addresses it would
        reach could not be vetted). Every connection, redirects' too, goes to a public address only."""
        watchdog, context = self, ssl.create_default_context()

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(watchdog.connection(http.client.HTTPConnection, allow), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(watchdog.connection(http.client.HTTPSConnection, allow), req, context=context)

        opener = urllib.request.OpenerDirector()
        for handler in (Http(), Https(context=context), _HttpOnlyRedirects(),
                        urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor()):
            opener.add_handler(handler)
        return opener


def load_remote(url: str, policy: MediaPolicy) -> bytes:
    if not policy.allow_remote:
        raise MediaError("remote image URLs are disabled; send the image as a data:image/<type>;base64,... "
                         "URI (or enable remote images in the server configuration)")
    watchdog = _Watchdog(policy.timeout)
    request = urllib.request.Request(url, headers={"User-Agent": "llamacore", "Accept": "image/*"})
    watchdog.timer.start()
    try:
        with watchdog.opener(policy.remote_allow).open(request, timeout=policy.timeout) as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > policy.max_bytes:
                raise too_big(int(length), policy)
            data = response.read(policy.max_bytes + 1)
        if watchdog.expired:  # the shutdown looks like the end of the body
            raise TimeoutError
        if len(data) > policy.max_bytes:
            raise too_big(len(data), policy)
        return data
    except MediaError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as err:
        # one answer for every failure: a status, a reason or a banner would tell the client what answers
        # on the server's network
        if isinstance(err, urllib.error.HTTPError):
            err.close()
        raise MediaError(f"could not fetch the image at {url}") from None
    finally:
        watchdog.timer.cancel()


def _public_connection(address: tuple[str, int], timeout: Any, source: Any,
                       allow: tuple[str, ...]) -> socket.socket:
    """A connection to `address` at an address it resolves to that is public (or in `allow`)."""
    host, port = address
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise MediaError(f"could not fetch the image: {host!r} does not resolve") from None
    for family, kind, proto, _, sockaddr in infos:
        if not _may_fetch(host, str(sockaddr[0]), allow):
            continue
        sock = socket.socket(family, kind, proto)
        try:
            if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                sock.settimeout(timeout)
            if source:
                sock.bind(source)
            sock.connect(sockaddr)
            return sock
        except OSError:
            sock.close()
            raise
    raise MediaError(f"image URLs may not name {host!r}: it is not a public address (loopback, private, "
                     f"link-local and the like are refused; media.remote_allow lists exceptions)")


def _may_fetch(host: str, address: str, allow: tuple[str, ...]) -> bool:
    """Whether `address` (what `host` resolved to) is public, or allowed by name, address or network."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        with contextlib.suppress(ValueError):
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
    return ip.is_global and not ip.is_multicast


__all__ = ["load_remote"]
