"""Safe loading of chat images: the `url` of an OpenAI `image_url` content part to encoded image bytes.

Requests are untrusted, so unlike llama-cpp-python (any URL to `urlopen`, no timeout, no size limit, `file://`
allowed) data: URIs are the default, http(s) needs `allow_remote`, files need `allowed_dirs`, all bounded; the
format and pixel count are checked from the header before any decoder sees the bytes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import ipaddress
import os
import re
import socket
import ssl
import stat
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.message import Message
from typing import IO, Any


class MediaError(ValueError):
    """An image was refused; the message says why and what to change (the server answers HTTP 400)."""


@dataclass(frozen=True)
class MediaPolicy:
    """Where images may come from and how big they may be."""

    allow_remote: bool = False
    max_bytes: int = 20 * 1024 * 1024
    timeout: float = 10.0  # seconds for a remote fetch: connect plus the whole read
    allowed_dirs: tuple[str, ...] = ()
    # width*height of one image (16 MP, 48 MB decoded): projectors downscale to about 1 MP anyway, and
    # a decoder allocates the declared size whatever the file holds (decompression bombs)
    max_pixels: int = 16 * 1024 * 1024
    max_request_pixels: int = 32 * 1024 * 1024   # all the images of one request together
    max_decoding_pixels: int = 64 * 1024 * 1024  # all requests' images being decoded at once
    max_images: int = 8           # images in one request
    # remote hosts (names, addresses or networks) that may be fetched although they are not public
    remote_allow: tuple[str, ...] = ()


_DATA_URI = re.compile(r"data:image/([a-z0-9][a-z0-9.+-]*);base64,(.*)", re.IGNORECASE | re.DOTALL)
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]+):", re.IGNORECASE)  # 2+ chars, so "C:\x.png" stays a path
_UNSUPPORTED = "unsupported image format: only PNG, JPEG, GIF and BMP are accepted"


def load_image(url: str, policy: MediaPolicy) -> bytes:
    """The checked bytes of the image that `url` names (data: URI, http(s) URL, file:// URL or path)."""
    if not isinstance(url, str) or not url.strip():
        raise MediaError("image URL is empty: send a data:image/<type>;base64,... URI")
    url = url.strip()
    scheme_match = _SCHEME.match(url)
    scheme = scheme_match.group(1).lower() if scheme_match else ""
    if scheme == "data":
        data = _load_data_uri(url, policy)
    elif scheme in ("http", "https"):
        data = _load_remote(url, policy)
    elif scheme == "file":
        parts = urllib.parse.urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise MediaError(f"file:// URL with a remote host is not supported: {url!r}")
        data = _load_local(urllib.request.url2pathname(parts.path), url, policy)
    elif scheme:
        raise MediaError(f"unsupported image URL scheme {scheme!r}: use a data:image/<type>;base64,... URI")
    else:
        data = _load_local(url, url, policy)
    check_image(data, policy)
    return data


def _too_big(n: int, policy: MediaPolicy) -> MediaError:
    return MediaError(f"image is larger than the limit of {policy.max_bytes} bytes ({n} bytes or more)")


def _load_data_uri(url: str, policy: MediaPolicy) -> bytes:
    match = _DATA_URI.fullmatch(url)
    if match is None:
        raise MediaError("invalid data URI: expected data:image/<type>;base64,<data>")
    payload = "".join(match.group(2).split())
    least = len(payload) // 4 * 3 - 2  # the fewest bytes valid base64 of this length decodes to
    if least > policy.max_bytes:
        raise _too_big(least, policy)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("invalid data URI: the image data is not valid base64") from None
    if len(data) > policy.max_bytes:
        raise _too_big(len(data), policy)
    return data


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


def _load_remote(url: str, policy: MediaPolicy) -> bytes:
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
                raise _too_big(int(length), policy)
            data = response.read(policy.max_bytes + 1)
        if watchdog.expired:  # the shutdown looks like the end of the body
            raise TimeoutError
        if len(data) > policy.max_bytes:
            raise _too_big(len(data), policy)
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


def _load_local(path: str, shown: str, policy: MediaPolicy) -> bytes:
    if not policy.allowed_dirs:
        raise MediaError("local image paths are not allowed; send the image as a "
                         "data:image/<type>;base64,... URI")
    try:
        real = os.path.realpath(path)  # resolves symlinks, so a link cannot point out of the allowed folders
        roots = [os.path.realpath(d) for d in policy.allowed_dirs]
        inside = any(os.path.commonpath([root, real]) == root for root in roots)
    except ValueError:  # NUL byte, different Windows drives
        inside = False
    if not inside:
        raise MediaError(f"image path {shown!r} is outside the allowed media folders")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(real, flags)  # non-blocking: a FIFO must not hang us; regular files are checked below
    except FileNotFoundError:
        raise MediaError(f"image file not found: {shown!r}") from None
    except OSError as err:
        raise MediaError(f"could not open image file {shown!r}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MediaError(f"image path {shown!r} is not a regular file")
        if info.st_size > policy.max_bytes:
            raise _too_big(info.st_size, policy)
        with open(fd, "rb", closefd=False) as file:
            data = file.read(policy.max_bytes + 1)  # the file may have grown since fstat
    finally:
        os.close(fd)
    if len(data) > policy.max_bytes:
        raise _too_big(len(data), policy)
    return data


def sniff_format(data: bytes) -> str:
    """The image format by its magic bytes; anything but PNG, JPEG, GIF and BMP is refused."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if data.startswith(b"BM"):
        return "bmp"
    raise MediaError(_UNSUPPORTED)


def image_size(data: bytes, fmt: str) -> tuple[int, int]:
    """(width, height) from the header alone, so huge images are refused before decoding."""
    try:
        if fmt == "png":
            if data[12:16] != b"IHDR":
                raise struct.error
            return struct.unpack_from(">II", data, 16)
        if fmt == "gif":
            return struct.unpack_from("<HH", data, 6)
        if fmt == "bmp":
            (header_size,) = struct.unpack_from("<I", data, 14)
            if header_size == 12:  # BITMAPCOREHEADER: 16-bit unsigned
                return struct.unpack_from("<HH", data, 18)
            if header_size < 16:
                raise struct.error
            width, height = struct.unpack_from("<ii", data, 18)
            if width < 0:
                raise struct.error
            return width, abs(height)  # negative height: rows stored top-down
        if fmt == "jpeg":
            return _jpeg_size(data)
    except struct.error:
        raise MediaError(f"{fmt.upper()} image is truncated or corrupt") from None
    raise MediaError(_UNSUPPORTED)


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """Walks the JPEG markers to the first start-of-frame (SOF0..SOF15 but DHT C4, JPG C8, DAC CC)."""
    i = 2
    while True:
        if i >= len(data) or data[i] != 0xFF:
            raise struct.error
        while i < len(data) and data[i] == 0xFF:  # fill bytes
            i += 1
        if i >= len(data):
            raise struct.error
        marker = data[i]
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # standalone markers: TEM, RSTn, SOI
            i += 1
            continue
        if marker in (0xD9, 0xDA):  # end of image or scan data before any frame header
            raise struct.error
        (length,) = struct.unpack_from(">H", data, i + 1)
        if length < 2:
            raise struct.error
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack_from(">HH", data, i + 4)  # after length and sample precision
            return width, height
        i += 1 + length


def image_pixels(data: bytes) -> int:
    """width*height of a checked image, from its header."""
    width, height = image_size(data, sniff_format(data))
    return width * height


class PixelBudget:
    """Pixels being decoded at once in this process: a decoder allocates the whole declared image, so
    requests wait here (up to `wait` seconds) rather than all decode together."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, pixels: int, wait: float = 30.0) -> Any:
        pixels = min(pixels, self.capacity)
        with self.cond:
            if not self.cond.wait_for(lambda: self.used + pixels <= self.capacity, timeout=wait):
                raise MediaError("the server is busy decoding other images; retry shortly")
            self.used += pixels
        try:
            yield
        finally:
            with self.cond:
                self.used -= pixels
                self.cond.notify_all()


_budgets: dict[int, PixelBudget] = {}
_budgets_lock = threading.Lock()


def decoding_budget(capacity: int) -> PixelBudget:
    """The process's budget of `capacity` pixels (one per capacity: a server's policy has one)."""
    with _budgets_lock:
        return _budgets.setdefault(capacity, PixelBudget(capacity))


def check_image(data: bytes, policy: MediaPolicy) -> str:
    """The format of `data`, after refusing unknown formats, bad headers, empty, oversize and huge images."""
    if len(data) > policy.max_bytes:
        raise _too_big(len(data), policy)
    fmt = sniff_format(data)
    width, height = image_size(data, fmt)
    if width == 0 or height == 0:
        raise MediaError(f"{fmt.upper()} image has a zero dimension ({width}x{height})")
    if width * height > policy.max_pixels:
        raise MediaError(f"image is {width}x{height} pixels, over the limit of {policy.max_pixels} pixels")
    if not _complete(data, fmt):
        raise MediaError(f"{fmt.upper()} image is truncated (its data ends before its end marker)")
    return fmt


def _complete(data: bytes, fmt: str) -> bool:
    """Whether the file reaches its format's end: stb_image decodes a cut-off JPEG or GIF without
    complaint, filling the missing part with grey."""
    tail = data.rstrip(b"\0")        # some writers pad the end
    if fmt == "png":
        return b"IEND" in data[-64:]
    if fmt == "jpeg":
        return tail.endswith(b"\xff\xd9")
    if fmt == "gif":
        return tail.endswith(b"\x3b")
    try:
        return len(data) >= _bmp_needs(data)
    except struct.error:
        return False


def _bmp_needs(data: bytes) -> int:
    """The bytes an uncompressed BMP must hold for the size it declares (a header alone would be
    decoded as a zero-filled image of that size); compressed ones, the file size they record."""
    declared = struct.unpack_from("<I", data, 2)[0]
    offset, header_size = struct.unpack_from("<II", data, 10)
    if header_size == 12:
        width, height, _, bits = struct.unpack_from("<HHHH", data, 18)
        compression = 0
    else:
        width, height, _, bits, compression = struct.unpack_from("<iiHHI", data, 18)
    if compression not in (0, 3, 6):                     # BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS
        return declared
    stride = (abs(width) * bits + 31) // 32 * 4
    return max(declared, offset + stride * abs(height))


def image_urls(messages: Iterable[Any]) -> list[str]:
    """The URLs of the `image_url` content parts of OpenAI chat messages, in order (str or {"url": ...})."""
    urls: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "image_url":
                continue
            value = part.get("image_url")
            url = value.get("url") if isinstance(value, Mapping) else value
            if not isinstance(url, str) or not url:
                raise MediaError('image_url content part has no url: expected {"image_url": {"url": "..."}}')
            urls.append(url)
    return urls
