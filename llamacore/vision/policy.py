"""What images a request may bring: where from and how big (MediaPolicy), and the error a refusal raises."""

from __future__ import annotations

from dataclasses import dataclass


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


def too_big(n: int, policy: MediaPolicy) -> MediaError:
    return MediaError(f"image is larger than the limit of {policy.max_bytes} bytes ({n} bytes or more)")


__all__ = ["MediaError", "MediaPolicy", "too_big"]
