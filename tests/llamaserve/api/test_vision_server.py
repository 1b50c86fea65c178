"""Images through llamaserve: a vision model (clip_model_path) beside a text-only one, on a real server."""

from __future__ import annotations

import base64
import concurrent.futures
import http.server
import threading
import time

import httpx
import pytest
from helpers import N_THREADS, assert_openai_error
from image_bombs import bmp_bomb, zero_png
from tiny_vision import IMAGE_TOKENS, image_bytes, pattern_image

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("media")
    (folder / "pic.png").write_bytes(image_bytes(pattern_image(0)))
    return folder


@pytest.fixture(scope="module")
def slow_url():
    """An http URL that answers only after 3 s (the server's media timeout is 1 s)."""
    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(3)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/pic.png"
    httpd.shutdown()


@pytest.fixture(scope="module", params=["thread", "process"])
def vision_server(request, tmp_path_factory, tiny_model_path, projector_path, media_dir):
    """The vision model in the server process, or in a worker process (its projector there too)."""
    from server import ServerProcess

    # per-sequence KV caches: in the unified cache the attention window of a sequence spans what the
    # others hold, so its sums round differently with the company it decodes in (images take many
    # cells), and "concurrent equals one by one" would hold only up to rounding
    config = {
        "parallel": 4, "kv_unified": False,
        "defaults": {"n_ctx": 256, "n_threads": N_THREADS, "isolation": request.param},
        "media": {"max_images_per_request": 3, "max_bytes": "64KiB", "timeout": "1s",
                  "allowed_dirs": [str(media_dir)]},
        "models": [
            {"alias": "vision", "model": str(tiny_model_path), "clip_model_path": str(projector_path)},
            {"alias": "text", "model": str(tiny_model_path)},
        ],
    }
    proc = ServerProcess(config, tmp_path_factory.mktemp("vision-server")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(vision_server):
    from openai import OpenAI

    return OpenAI(base_url=vision_server.base_url + "/v1", api_key="x", max_retries=0)


def data_uri(kind: int, fmt: str = "PNG") -> str:
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(image_bytes(pattern_image(kind), fmt)).decode()


def message(*urls: str, text: str = "What is in the picture?") -> list[dict]:
    parts = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": parts}]


def answer(client, *urls: str, model: str = "vision", text: str = "What is in the picture?"):
    out = client.chat.completions.create(model=model, messages=message(*urls, text=text), temperature=0,
                                         max_tokens=8)
    return out.choices[0].message.content, out.usage.prompt_tokens


def post(vision_server, body: dict) -> httpx.Response:
    return httpx.post(vision_server.base_url + "/v1/chat/completions", json=body, timeout=30)


def test_models_list_vision_capability(client):
    cards = {m.id: m for m in client.models.list().data}
    assert cards["vision"].capabilities == ["completion", "vision"]
    assert cards["text"].capabilities == ["completion"]


def test_different_images_different_answers_same_image_same_answer(client):
    first, n_prompt = answer(client, data_uri(0))
    assert n_prompt > IMAGE_TOKENS
    assert answer(client, data_uri(0)) == (first, n_prompt)
    assert answer(client, data_uri(1))[0] != first
    assert answer(client, data_uri(0), data_uri(1))[1] == n_prompt + IMAGE_TOKENS


def test_streaming_with_an_image(client):
    stream = client.chat.completions.create(model="vision", messages=message(data_uri(2)), temperature=0,
                                            max_tokens=8, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == answer(client, data_uri(2))[0]


def test_every_image_format_and_an_allowed_file(client, media_dir):
    png = answer(client, data_uri(0))
    for fmt in ("JPEG", "GIF", "BMP"):
        assert answer(client, data_uri(0, fmt))[1] == png[1]
    assert answer(client, str(media_dir / "pic.png")) == png
    assert answer(client, (media_dir / "pic.png").as_uri()) == png


def test_concurrent_mixed_requests_equal_one_by_one(client):
    """8 clients, half with images (different ones), give what each gives alone."""
    jobs = [((data_uri(k % 3),) if k % 2 == 0 else (), f"Question number {k}") for k in range(8)]
    alone = [answer(client, *urls, text=text) for urls, text in jobs]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda job: answer(client, *job[0], text=job[1]), jobs))
    assert together == alone


@pytest.mark.parametrize("url, match", [
    ("data:image/png;base64,iVBORw0KGgo=", "truncated or corrupt"),
    ("data:text/html;base64,PGgxPmhpPC9oMT4=", "data:image"),
    ("data:image/png;base64,%%%not-base64", "base64"),
    ("http://127.0.0.1:9/pic.png", "remote image URLs are disabled"),
    ("/etc/passwd", "outside the allowed"),
])
def test_bad_images_are_400(vision_server, url, match):
    resp = post(vision_server, {"model": "vision", "messages": message(url), "max_tokens": 2})
    error = assert_openai_error(resp, 400)
    assert match in error["message"]


def test_truncated_unsupported_oversize_and_too_many(vision_server):
    png = image_bytes(pattern_image(0))
    cases = {
        "truncated": "data:image/png;base64," + base64.b64encode(png[:-20]).decode(),
        "unsupported image format": "data:image/webp;base64," + base64.b64encode(b"RIFF\0\0\0\0WEBPVP8 " * 4).decode(),
        "larger than the limit": "data:image/png;base64," + base64.b64encode(png + b"\0" * 70_000).decode(),
    }
    for match, url in cases.items():
        error = assert_openai_error(post(vision_server, {"model": "vision", "messages": message(url)}), 400)
        assert match in error["message"], (match, error)
    error = assert_openai_error(post(vision_server, {"model": "vision", "messages": message(*[data_uri(0)] * 4)}), 400)
    assert "at most 3" in error["message"]


def test_image_to_a_text_only_model_is_400(vision_server):
    error = assert_openai_error(post(vision_server, {"model": "text", "messages": message(data_uri(0))}), 400)
    assert "no vision projector" in error["message"]


def test_remote_timeout_is_400_and_server_keeps_serving(tmp_path_factory, tiny_model_path, projector_path,
                                                        slow_url):
    from server import ServerProcess

    config = {"defaults": {"n_ctx": 256, "n_threads": N_THREADS},
              "media": {"allow_remote": True, "timeout": "1s", "remote_allow": ["127.0.0.1"]},
              "models": [{"alias": "vision", "model": str(tiny_model_path), "mmproj": str(projector_path)}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("vision-remote")).start()
    try:
        started = time.monotonic()
        error = assert_openai_error(post(proc, {"model": "vision", "messages": message(slow_url)}), 400)
        assert "could not fetch the image" in error["message"] and time.monotonic() - started < 2.5
        # the same server is not fetched under another loopback name: only the address allowed is
        private = slow_url.replace("127.0.0.1", "[::1]")
        error = assert_openai_error(post(proc, {"model": "vision", "messages": message(private)}), 400)
        assert "not a public address" in error["message"]
        ok = post(proc, {"model": "vision", "messages": message(data_uri(0)), "max_tokens": 2})
        assert ok.status_code == 200
    finally:
        proc.stop()


def test_server_keeps_serving_after_bad_images(client, vision_server):
    for url in ("data:image/png;base64,AAAA", "data:image/gif;base64,R0lGODlh"):
        post(vision_server, {"model": "vision", "messages": message(url)})
    assert answer(client, data_uri(0))[1] > IMAGE_TOKENS


def test_anthropic_image_block_equals_chat(client, vision_server):
    import anthropic

    png = base64.b64encode(image_bytes(pattern_image(1))).decode()
    claude = anthropic.Anthropic(base_url=vision_server.base_url, api_key="x", max_retries=0)
    out = claude.messages.create(model="vision", max_tokens=8, extra_body={"temperature": 0},
                                 messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]}])
    n_prompt = out.usage.input_tokens + (out.usage.cache_read_input_tokens or 0)    # Anthropic's split
    assert (out.content[0].text, n_prompt) == answer(client, data_uri(1))


def test_responses_input_image_equals_chat(client):
    out = client.responses.create(model="vision", max_output_tokens=8, temperature=0,
                                  input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is in the picture?"},
        {"type": "input_image", "image_url": data_uri(2)}]}])
    assert (out.output_text, out.usage.input_tokens) == answer(client, data_uri(2))


def _rss(proc) -> int:
    status = open(f"/proc/{proc.proc.pid}/status").read()
    return int(status.split("VmRSS:")[1].split()[0]) * 1024


def test_image_bombs_cost_the_server_no_memory(vision_server):
    """Findings: 54-byte BMP headers declaring the most pixels allowed (4000x4000, 48 MB each decoded) and
    an all-zero PNG of 7000x7000, several a request. Each is a 400 before any decoder runs, and the server's
    memory stays put."""
    before = _rss(vision_server)
    bmp = "data:image/bmp;base64," + base64.b64encode(bmp_bomb(4000, 4000)).decode()
    png = "data:image/png;base64," + base64.b64encode(zero_png(7000, 7000)).decode()
    started = time.monotonic()
    for _ in range(4):
        error = assert_openai_error(post(vision_server, {"model": "vision", "messages": message(bmp, bmp, bmp)}), 400)
        assert "truncated" in error["message"]
        error = assert_openai_error(post(vision_server, {"model": "vision", "messages": message(png)}), 400)
        assert "over the limit of 16777216" in error["message"]
    # three images under the per-image limit but over the request's 32 MP together
    photo = "data:image/png;base64," + base64.b64encode(zero_png(4000, 3000)).decode()
    error = assert_openai_error(post(vision_server, {"model": "vision", "messages": message(photo, photo, photo)}),
                                400)
    assert "pixels together, over the limit of 33554432" in error["message"]
    assert time.monotonic() - started < 10
    assert _rss(vision_server) - before < 64 * 1024 * 1024
