"""Prompts with images: where image rows sit among a prompt's tokens, and how they are decoded.

An image takes `n_tokens` positions of a prompt, filled by embedding rows instead of token ids.
Those positions hold *placeholder ids* in the prompt's token list: negative numbers (no vocabulary
id is negative) built from the image's full SHA-256 and the row number. So the prefix matching
that reuses KV across requests works unchanged (two prompts share an image's rows only when they
hold the same image at the same place) and no digest collision short of SHA-256's can mix two images.

Chat templates see images as a marker in the text (`MEDIA_MARKER`, random per process, as
llama-server's); the rendered text is split on it and tokenized from parts, so a marker typed in
user text is at worst a count mismatch, never an image.
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING, Any

from llamacore.vision.image_check import decoding_budget, image_pixels
from llamacore.vision.media import MediaError, MediaPolicy, load_image

if TYPE_CHECKING:
    from llamacore._core import Batch, Context, Image, ImageChunk, Model, Projector

__all__ = ["MEDIA_MARKER", "MediaTokens", "decode_image", "image_boundary", "load_images", "load_projector",
           "placeholder", "tokenize_with_images"]

MEDIA_MARKER = f"<__media_{secrets.token_hex(8)}__>"
_ROW_BITS = 24                        # rows per image: far more than any projector produces


def placeholder(image_id: str, row: int) -> int:
    """The id standing for row `row` of the image whose SHA-256 hex digest is `image_id`."""
    return -1 - ((int(image_id, 16) << _ROW_BITS) | row)


def _row(token: int) -> int:
    return (-1 - token) & ((1 << _ROW_BITS) - 1)


class MediaTokens(list):
    """A prompt's token ids (placeholders at image rows) carrying `images`: the index of each
    image's first row -> its ImageChunk. A list, so it passes through every layer that takes a
    prompt's tokens unchanged; the layers that decode read `images`."""

    images: dict[int, ImageChunk]

    def __init__(self, tokens: list[int], images: dict[int, ImageChunk]) -> None:
        super().__init__(tokens)
        self.images = images


def images_of(tokens: list[int]) -> dict[int, ImageChunk]:
    """The images of a prompt (empty for plain token lists)."""
    return getattr(tokens, "images", None) or {}


def image_boundary(tokens: list[int], n: int) -> int:
    """The longest reusable prefix of `tokens` not longer than `n` that does not end inside an image
    (an image's rows are decoded together, from its encoding)."""
    if 0 < n < len(tokens) and tokens[n] < 0:
        return n - _row(tokens[n])
    return n


def load_projector(model: Model, path: str | os.PathLike[str], n_threads: int | None = None) -> Projector:
    """The projector at `path` for `model`; ValueError for one whose images take M-RoPE positions (Qwen-VL):
    prompts here place every position one after another."""
    from llamacore._core import Projector

    projector = Projector(model, path, n_threads=n_threads)
    if projector.uses_mrope:
        raise ValueError(f"{path}: projectors with M-RoPE image positions (Qwen-VL) are not supported yet")
    return projector


def load_images(projector: Projector, urls: list[str], policy: MediaPolicy) -> list[Image]:
    """Fetch (within `policy`) and decode the images at `urls`; MediaError for any that fails."""
    if len(urls) > policy.max_images:
        raise MediaError(f"{len(urls)} images in one request; at most {policy.max_images} are allowed")
    blobs = [load_image(url, policy) for url in urls]
    pixels = sum(map(image_pixels, blobs))
    if pixels > policy.max_request_pixels:
        raise MediaError(f"the request's images hold {pixels} pixels together, over the limit of "
                         f"{policy.max_request_pixels}")
    images = []
    with decoding_budget(policy.max_decoding_pixels).hold(pixels):
        for data in blobs:
            try:
                images.append(projector.image(data))
            except ValueError as exc:
                raise MediaError(str(exc)) from None
    return images


def tokenize_with_images(projector: Projector, model: Model, text: str, images: list[Image]) -> MediaTokens:
    """Tokenize `text`, whose MEDIA_MARKERs stand for `images` in order (special tokens parsed, BOS
    added when the model wants one and the text does not start with it)."""
    pieces = text.split(MEDIA_MARKER)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"the prompt has {len(pieces) - 1} image markers for {len(images)} images")
    parts: list[Any] = [pieces[0]]
    for image, piece in zip(images, pieces[1:]):
        parts += [image, piece]
    tokens: list[int] = []
    placed: dict[int, ImageChunk] = {}
    for chunk in projector.tokenize([p for p in parts if p != ""], add_special=False, parse_special=True):
        if isinstance(chunk, list):
            tokens += chunk
        else:
            placed[len(tokens)] = chunk
            tokens += [placeholder(chunk.id, i) for i in range(chunk.n_tokens)]
    if model.add_bos and (not tokens or tokens[0] != model.token_bos):
        tokens.insert(0, model.token_bos)
        placed = {start + 1: chunk for start, chunk in placed.items()}
    return MediaTokens(tokens, placed)


def decode_image(ctx: Context, batch: Batch, projector: Projector, chunk: ImageChunk, pos: int, seq_id: int,
                 logits_last: bool = False) -> None:
    """Encode `chunk`'s image and decode its rows into sequence `seq_id` at positions pos, pos+1, ...

    `batch` is an embeddings batch (Batch(n, embd=projector.n_embd)); an image longer than it is
    decoded in pieces, except for models that must see an image in one piece (non-causal).
    """
    rows = projector.encode(chunk)
    step = batch.capacity
    if chunk.non_causal and len(rows) > step:
        raise ValueError(f"the image takes {len(rows)} positions; this model decodes an image in one batch "
                         f"of at most {step} (raise n_batch and n_ubatch)")
    if chunk.non_causal:
        ctx.set_causal_attn(False)
    try:
        for start in range(0, len(rows), step):
            batch.clear()
            piece = rows[start:start + step]
            batch.add_embeddings(piece, pos + start, seq_id, logits_last and start + len(piece) == len(rows))
            ctx.decode(batch)
    finally:
        if chunk.non_causal:
            ctx.set_causal_attn(True)
