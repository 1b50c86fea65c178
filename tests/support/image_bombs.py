"""Images that cost far more decoded than sent (hostile clients): a BMP header with no pixels, and
complete PNGs of zeros."""

from __future__ import annotations

import struct
import zlib


def bmp_bomb(width: int = 7000, height: int = 7000) -> bytes:
    """54 bytes: a BMP header declaring width x height x 24 bits and no pixel data (stb_image would
    allocate and zero-fill the whole image)."""
    header = struct.pack("<2sIHHI", b"BM", 54, 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return header + info


def zero_png(width: int, height: int) -> bytes:
    """A complete, valid PNG of zeros: a few hundred kB that decode to width*height pixels."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    packer, row = zlib.compressobj(9), b"\0" * (width + 1)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


__all__ = ["bmp_bomb", "zero_png"]
