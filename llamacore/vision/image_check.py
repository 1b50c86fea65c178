"""Encoded images checked from their headers before any decoder sees them (format, size, pixel count,
data present for the declared size), and the budget of pixels being decoded at once in the process:
a decoder allocates what an image declares, whatever the file holds."""

from __future__ import annotations

import contextlib
import struct
import threading
from typing import Any

from llamacore.vision.policy import MediaError, MediaPolicy, too_big

_UNSUPPORTED = "unsupported image format: only PNG, JPEG, GIF and BMP are accepted"


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
        raise too_big(len(data), policy)
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


__all__ = ["PixelBudget", "check_image", "decoding_budget", "image_pixels", "image_size", "sniff_format"]
