"""llamacore.vision.remote through load_image: http(s) image URLs against a real loopback HTTP server and
sockets: limits of time and size, redirects, SSRF (only public addresses), and failures that tell the
client nothing about the peer."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from tiny_vision import image_bytes, pattern_image

from llamacore.vision.media import MediaError, MediaPolicy, load_image

PNG = image_bytes(pattern_image(0, size=8))       # a small real PNG, within the 1000-byte limit below
BIG = PNG + b"\0" * 5000


class Handler(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def log_message(self, *args):
        pass

    def send(self, status: int, body: bytes = b"", length: bool = True, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.hits.append(self.path)
        try:
            if self.path == "/cat.png":
                self.send(200, PNG, Content_Type="image/png")
            elif self.path == "/page":
                self.send(200, b"<html>not an image</html>", Content_Type="text/html")
            elif self.path == "/big":
                self.send(200, BIG)
            elif self.path == "/big-unsized":  # no Content-Length: the read itself must stop
                self.send(200, BIG, length=False)
            elif self.path == "/slow":
                time.sleep(1.5)
                self.send(200, PNG)
            elif self.path == "/trickle":  # one byte every 0.1 s: no single read times out
                self.send(200, length=False, Content_Length=str(len(PNG)))
                for byte in PNG:
                    time.sleep(0.1)
                    self.wfile.write(bytes([byte]))
            elif self.path == "/trickle-headers":
                self.wfile.write(b"HTTP/1.0 200 OK\r\nX-Slow: ")
                for _ in range(30):
                    time.sleep(0.1)
                    self.wfile.write(b"a")
            elif self.path == "/stall":  # part of the body, then silence longer than the timeout
                self.send(200, length=False, Content_Length=str(len(PNG)))
                self.wfile.write(PNG[:10])
                time.sleep(0.3)
                self.wfile.write(PNG[10:20])
                time.sleep(1.5)
            elif self.path == "/to-file":
                self.send(302, Location="file:///etc/passwd")
            elif self.path == "/to-ftp":
                self.send(301, Location="ftp://127.0.0.1/cat.png")
            elif self.path == "/to-cat":
                self.send(307, Location="/cat.png")
            elif self.path == "/to-v6-loopback":
                self.send(302, Location=f"http://[::1]:{self.server.server_address[1]}/cat.png")
            elif self.path == "/to-metadata":
                self.send(302, Location="http://169.254.169.254/latest/meta-data/")
            else:
                self.send(404, b"not found")
        except OSError:  # the client gave up
            pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


# the stand-in server is on loopback: allowed by address, as a deployment would allow an internal host
REMOTE = MediaPolicy(allow_remote=True, timeout=0.5, max_bytes=1000, remote_allow=("127.0.0.1",))
PUBLIC_ONLY = MediaPolicy(allow_remote=True, timeout=0.5, max_bytes=1000)


def test_remote_refused_by_default(server):
    Handler.hits.clear()
    for url in (f"{server}/cat.png", "HTTPS://127.0.0.1:1/cat.png"):
        with pytest.raises(MediaError, match="remote image URLs are disabled"):
            load_image(url, MediaPolicy())
    assert Handler.hits == []


def test_remote_served_and_redirected_within_http(server):
    assert load_image(f"{server}/cat.png", REMOTE) == PNG
    assert load_image(f"{server}/to-cat", REMOTE) == PNG


@pytest.mark.parametrize(("path", "message"), [
    ("/nope", "could not fetch the image at"),
    ("/page", "unsupported image format"),
    ("/big", "larger than the limit of 1000 bytes"),
    ("/big-unsized", "larger than the limit of 1000 bytes"),
    ("/to-file", "redirected to a non-http\\(s\\) URL, refused: 'file:///etc/passwd'"),
    ("/to-ftp", "redirected to a non-http\\(s\\) URL"),
])
def test_remote_refusals(server, path, message):
    with pytest.raises(MediaError, match=message):
        load_image(server + path, REMOTE)


@pytest.mark.parametrize("path", ["/slow", "/trickle", "/trickle-headers", "/stall"])
def test_remote_deadline(server, path):
    start = time.monotonic()
    with pytest.raises(MediaError, match="could not fetch the image at"):
        load_image(server + path, REMOTE)
    assert time.monotonic() - start < 0.8  # the whole fetch, not each read


def test_remote_connection_errors(server):
    port = int(server.rsplit(":", 1)[1])
    with pytest.raises(MediaError, match="could not fetch the image at"):
        load_image("http://127.0.0.1:1/cat.png", REMOTE)  # nothing listens on port 1
    with pytest.raises(MediaError, match="could not fetch the image at"):
        load_image(f"http://127.0.0.1:{port}x/cat.png", REMOTE)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.1", "0x7f000001", "2130706433", "[::1]",
                                  "[::ffff:127.0.0.1]", "0.0.0.0", "10.0.0.1", "192.168.0.1", "169.254.169.254",
                                  "[fe80::1]", "224.0.0.1"])
def test_loopback_and_private_addresses_are_never_fetched(server, host):
    """SSRF: every spelling of this machine, private, link-local, multicast and unspecified addresses."""
    port = int(server.rsplit(":", 1)[1])
    Handler.hits.clear()
    with pytest.raises(MediaError, match="not a public address"):
        load_image(f"http://{host}:{port}/cat.png", PUBLIC_ONLY)
    assert Handler.hits == []


@pytest.mark.parametrize("path", ["/to-v6-loopback", "/to-metadata"])
def test_a_redirect_to_a_private_address_is_refused(server, path):
    with pytest.raises(MediaError, match="not a public address"):
        load_image(server + path, REMOTE)


def test_failures_do_not_echo_the_peer():
    """A banner, a status or a reason would tell the client what answers on the server's network."""
    listener = socket.create_server(("127.0.0.1", 0))

    def banner() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            conn.sendall(b"SSH-2.0-OpenSSH_9.0\r\n")
            time.sleep(0.2)
            conn.close()
    threading.Thread(target=banner, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/cat.png"
    with pytest.raises(MediaError) as info:
        load_image(url, REMOTE)
    listener.close()
    assert str(info.value) == f"could not fetch the image at {url}"
