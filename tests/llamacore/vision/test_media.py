"""llamacore.vision.media and .image_check: image URLs to checked bytes, against real images (Pillow) and real
files; every refusal is a MediaError (remote URLs: test_media_remote.py)."""

from __future__ import annotations

import base64
import io
import os
import struct
import threading
import time

import pytest
from image_bombs import bmp_bomb, zero_png
from PIL import Image

from llamacore.vision.image_check import PixelBudget, check_image, image_size, sniff_format
from llamacore.vision.media import MediaError, MediaPolicy, image_urls, load_image

FORMATS = {"png": "PNG", "jpeg": "JPEG", "gif": "GIF", "bmp": "BMP"}


def encode(fmt: str, size: tuple[int, int] = (7, 5), **options) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 90)).save(out, format=fmt, **options)
    return out.getvalue()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


PNG = encode("PNG")


def png_claiming(width: int, height: int) -> bytes:
    """A real PNG whose IHDR is patched to claim another size (the CRC is not checked by a header parser)."""
    return PNG[:16] + struct.pack(">II", width, height) + PNG[24:]


# -- formats and header sizes ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sniff_and_size_of_real_images(fmt):
    data = encode(FORMATS[fmt])
    assert sniff_format(data) == fmt
    assert image_size(data, fmt) == (7, 5)
    assert check_image(data, MediaPolicy()) == fmt


def test_progressive_jpeg_and_top_down_bmp():
    assert image_size(encode("JPEG", (9, 4), progressive=True), "jpeg") == (9, 4)  # SOF2, after DHT (C4)
    bmp = encode("BMP")
    top_down = bmp[:22] + struct.pack("<i", -5) + bmp[26:]
    assert image_size(top_down, "bmp") == (7, 5)


@pytest.mark.parametrize("data", [
    encode("WEBP"), encode("TIFF"), b"", b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"<html></html>",
    b"\x89PN",
])
def test_other_formats_are_refused(data):
    with pytest.raises(MediaError, match="only PNG, JPEG, GIF and BMP"):
        sniff_format(data)
    with pytest.raises(MediaError, match="unsupported image format"):
        check_image(data, MediaPolicy())


@pytest.mark.parametrize(("fmt", "data"), [
    ("png", PNG[:20]), ("png", PNG[:12] + b"IDAT" + PNG[16:]), ("jpeg", encode("JPEG")[:20]),
    ("jpeg", b"\xff\xd8\xff"), ("jpeg", b"\xff\xd8\xff\xd9"), ("gif", b"GIF89a\x07"),
    ("bmp", encode("BMP")[:20]),
])
def test_truncated_or_corrupt_headers(fmt, data):
    with pytest.raises(MediaError, match=f"{fmt.upper()} image is truncated or corrupt"):
        image_size(data, fmt)


def test_pixel_limit_is_checked_from_the_header():
    bomb = png_claiming(20000, 20000)
    assert image_size(bomb, "png") == (20000, 20000)
    with pytest.raises(MediaError, match="20000x20000 pixels, over the limit"):
        check_image(bomb, MediaPolicy())
    assert check_image(bomb, MediaPolicy(max_pixels=400_000_000)) == "png"
    with pytest.raises(MediaError, match="zero dimension"):
        check_image(png_claiming(0, 5), MediaPolicy())
    with pytest.raises(MediaError, match="larger than the limit of 10 bytes"):
        check_image(PNG, MediaPolicy(max_bytes=10))


def test_a_bmp_header_without_its_pixels_is_refused():
    """Finding: 54 bytes cost 280 MB decoded. Refused whatever the pixel limit, before any decoder."""
    bomb = bmp_bomb()
    assert len(bomb) == 54
    with pytest.raises(MediaError, match="BMP image is truncated"):
        check_image(bomb, MediaPolicy(max_pixels=10**9))
    whole = bmp_bomb(4, 3) + b"\0" * (12 * 3)              # 4x3x24 bits: rows of 12 bytes
    assert check_image(whole, MediaPolicy()) == "bmp"
    with pytest.raises(MediaError, match="truncated"):
        check_image(whole[:-1], MediaPolicy())


def test_a_complete_zero_png_is_bounded_by_its_pixels():
    """Finding: a 143 kB all-zero PNG at 7000x7000 decodes to 147 MB. Over the default 16 MP."""
    bomb = zero_png(7000, 7000)
    assert len(bomb) < 200_000
    with pytest.raises(MediaError, match="7000x7000 pixels, over the limit of 16777216"):
        check_image(bomb, MediaPolicy())


def test_decoding_waits_for_the_pixel_budget():
    budget = PixelBudget(100)
    order: list[str] = []
    with budget.hold(80):
        waiter = threading.Thread(target=lambda: (budget.hold(50).__enter__(), order.append("second")))
        waiter.start()
        time.sleep(0.2)
        order.append("first done")
    waiter.join(2)
    assert order == ["first done", "second"]
    with budget.hold(100), pytest.raises(MediaError, match="busy decoding"):
        with budget.hold(1, wait=0.1):
            pass


# -- data: URIs -------------------------------------------------------------------------------


def test_data_uris_accepted():
    assert load_image(data_uri(PNG), MediaPolicy()) == PNG
    jpeg = encode("JPEG")
    assert load_image(data_uri(jpeg, "IMAGE/JPEG").replace("data:", "DATA:").replace("base64", "BASE64"),
                      MediaPolicy()) == jpeg
    text = base64.b64encode(PNG).decode()
    wrapped = "data:image/png;base64," + "\n".join(text[i:i + 20] for i in range(0, len(text), 20))
    assert load_image(wrapped, MediaPolicy()) == PNG


@pytest.mark.parametrize(("url", "message"), [
    (data_uri(b"<script>alert(1)</script>", "text/html"), "invalid data URI"),
    (data_uri(PNG, "application/octet-stream"), "invalid data URI"),
    ("data:image/png," + PNG.decode("latin-1"), "invalid data URI"),
    ("data:image/png;charset=utf-8," + base64.b64encode(PNG).decode(), "invalid data URI"),
    ("data:image/png;base64,iVBORw0KGgo!!!!", "not valid base64"),
    ("data:image/png;base64,iVBORw0KGgo", "not valid base64"),  # bad padding
    ("data:image/png;base64,iVBOR\u00e9w0KGgo=", "not valid base64"),
    ("data:image/png;base64,", "unsupported image format"),
    (data_uri(encode("WEBP"), "image/webp"), "unsupported image format"),
    (base64.b64encode(PNG).decode(), "local image paths are not allowed"),  # raw base64, no data: prefix
    ("", "image URL is empty"),
    ("ftp://example.com/cat.png", "unsupported image URL scheme 'ftp'"),
    ("javascript:alert(1)", "unsupported image URL scheme"),
])
def test_bad_data_uris_and_schemes(url, message):
    with pytest.raises(MediaError, match=message):
        load_image(url, MediaPolicy())


def test_data_uri_size_limit():
    with pytest.raises(MediaError, match="larger than the limit of 20 bytes"):
        load_image(data_uri(PNG), MediaPolicy(max_bytes=20))
    huge = "data:image/png;base64," + "A" * 40_000_000  # refused from its length, before decoding
    start = time.monotonic()
    with pytest.raises(MediaError, match="larger than the limit"):
        load_image(huge, MediaPolicy(max_bytes=1000))
    assert time.monotonic() - start < 2


# -- local files ---------------------------------------------------------------------------------


@pytest.fixture
def folders(tmp_path):
    media, outside = tmp_path / "media", tmp_path / "outside"
    media.mkdir()
    outside.mkdir()
    (media / "cat.png").write_bytes(PNG)
    (outside / "secret.png").write_bytes(PNG)
    return media, outside


def test_local_files_inside_allowed_dirs(folders, tmp_path):
    media, _ = folders
    policy = MediaPolicy(allowed_dirs=(str(media),))
    assert load_image(str(media / "cat.png"), policy) == PNG
    assert load_image((media / "cat.png").as_uri(), policy) == PNG
    assert load_image(f"file://localhost{media / 'cat.png'}", policy) == PNG
    (tmp_path / "alias").symlink_to(media)  # an allowed folder given through a symlink
    assert load_image(str(media / "cat.png"), MediaPolicy(allowed_dirs=(str(tmp_path / "alias"),))) == PNG


def test_local_files_refused(folders, tmp_path):
    media, outside = folders
    policy = MediaPolicy(allowed_dirs=(str(media),))
    (media / "link.png").symlink_to(outside / "secret.png")
    (tmp_path / "media2").mkdir()  # shares the prefix "media" but is another folder
    (tmp_path / "media2" / "x.png").write_bytes(PNG)
    for path in (outside / "secret.png", media / "link.png", media / ".." / "outside" / "secret.png",
                 tmp_path / "media2" / "x.png", outside / "missing.png", "/etc/passwd"):
        for url in (str(path), f"file://{path}"):
            with pytest.raises(MediaError, match="is outside the allowed media folders"):
                load_image(url, policy)
    with pytest.raises(MediaError, match="local image paths are not allowed"):
        load_image(str(media / "cat.png"), MediaPolicy())
    with pytest.raises(MediaError, match="local image paths are not allowed"):
        load_image((media / "cat.png").as_uri(), MediaPolicy())
    with pytest.raises(MediaError, match="image file not found"):
        load_image(str(media / "missing.png"), policy)
    with pytest.raises(MediaError, match="not a regular file"):
        load_image(str(media), policy)
    with pytest.raises(MediaError, match="larger than the limit of 10 bytes"):
        load_image(str(media / "cat.png"), MediaPolicy(allowed_dirs=(str(media),), max_bytes=10))
    with pytest.raises(MediaError, match="remote host"):
        load_image(f"file://example.com{media / 'cat.png'}", policy)
    with pytest.raises(MediaError, match="outside the allowed"):
        load_image(str(media / "cat.png") + "\0", policy)


def test_fifo_inside_allowed_dir_does_not_hang(folders):
    media, _ = folders
    os.mkfifo(media / "pipe.png")
    with pytest.raises(MediaError, match="not a regular file"):
        load_image(str(media / "pipe.png"), MediaPolicy(allowed_dirs=(str(media),)))


# -- messages ------------------------------------------------------------------------------------


def test_image_urls_of_messages():
    messages = [
        {"role": "system", "content": "You look at pictures."},
        {"role": "user", "content": [
            {"type": "text", "text": "Compare"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            {"type": "image_url", "image_url": "https://example.com/b.png"},
        ]},
        {"role": "assistant", "content": None},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "c.png"}}]},
    ]
    assert image_urls(messages) == ["data:image/png;base64,AAAA", "https://example.com/b.png", "c.png"]
    assert image_urls([{"role": "user", "content": "no images"}]) == []
    for part in ({"type": "image_url"}, {"type": "image_url", "image_url": {}},
                 {"type": "image_url", "image_url": {"url": 3}}, {"type": "image_url", "image_url": ""}):
        with pytest.raises(MediaError, match="has no url"):
            image_urls([{"role": "user", "content": [part]}])
