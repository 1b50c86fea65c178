"""Safe loading of chat images: the `url` of an OpenAI `image_url` content part to encoded image bytes.

Requests are untrusted, so unlike llama-cpp-python (any URL to `urlopen`, no timeout, no size limit, `file://`
allowed) data: URIs are the default, http(s) needs `allow_remote`, files need `allowed_dirs`, all bounded; the
format and pixel count are checked from the header before any decoder sees the bytes
(llamacore.vision.image_check); remote fetches are llamacore.vision.remote's.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from llamacore.vision.image_check import check_image
from llamacore.vision.policy import MediaError, MediaPolicy, too_big
from llamacore.vision.remote import load_remote

_DATA_URI = re.compile(r"data:image/([a-z0-9][a-z0-9.+-]*);base64,(.*)", re.IGNORECASE | re.DOTALL)
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]+):", re.IGNORECASE)  # 2+ chars, so "C:\x.png" stays a path


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
        data = load_remote(url, policy)
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


def _load_data_uri(url: str, policy: MediaPolicy) -> bytes:
    match = _DATA_URI.fullmatch(url)
    if match is None:
        raise MediaError("invalid data URI: expected data:image/<type>;base64,<data>")
    payload = "".join(match.group(2).split())
    least = len(payload) // 4 * 3 - 2  # the fewest bytes valid base64 of this length decodes to
    if least > policy.max_bytes:
        raise too_big(least, policy)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("invalid data URI: the image data is not valid base64") from None
    if len(data) > policy.max_bytes:
        raise too_big(len(data), policy)
    return data


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
            raise too_big(info.st_size, policy)
        with open(fd, "rb", closefd=False) as file:
            data = file.read(policy.max_bytes + 1)  # the file may have grown since fstat
    finally:
        os.close(fd)
    if len(data) > policy.max_bytes:
        raise too_big(len(data), policy)
    return data


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


__all__ = ["MediaError", "MediaPolicy", "image_urls", "load_image"]
