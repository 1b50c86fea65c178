"""Images for a model in a worker process (`isolation: process`): the projector lives in the worker.

The server holds no projector. To lay out a prompt with images it asks the worker
(`RemoteProjector.tokenize`, a call over the worker's wire): the worker decodes the images,
tokenizes text and images with its projector and keeps each image's chunk by its SHA-256 in a
small cache (`ChunkCache`); the answer is the token layout (an image as its id and its number of
positions). The submission then names the images by id and position (`wire_prompt`), and the
worker puts its chunks back in place (`ChunkCache.prompt`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from llamacore.vision.prompt import placeholder


@dataclass(frozen=True)
class RemoteImage:
    """An image's encoded bytes, sent to the worker to decode; `id` is their SHA-256 (the worker's
    decoder gives the same id)."""

    data: bytes
    id: str


@dataclass(frozen=True)
class RemoteImageChunk:
    """Where the worker placed an image: its id and how many positions it takes."""

    id: str
    n_tokens: int


class RemoteProjector:
    """The worker's projector, as prompt layout needs it. Its calls block: use it off the event loop."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def image(self, data: bytes) -> RemoteImage:
        return RemoteImage(bytes(data), hashlib.sha256(data).hexdigest())

    def tokenize(self, parts: list[Any], *, add_special: bool = True,
                 parse_special: bool = True) -> list[list[int] | RemoteImageChunk]:
        sent = [p.data if isinstance(p, RemoteImage) else p for p in parts]
        layout = self.worker.call("tokenize_media", sent, add_special, parse_special)
        return [RemoteImageChunk(item[1], item[2]) if item and item[0] == "image" else item for item in layout]


def wire_prompt(tokens: list[int], images: dict[int, Any]) -> tuple[list[int], list[tuple[int, str]]]:
    """A prompt's tokens for the wire (image rows as -1: placeholders do not fit in 64 bits) and its
    images as [start, id] pairs."""
    if not images:
        return tokens, []
    return [t if t >= 0 else -1 for t in tokens], [(start, chunk.id) for start, chunk in sorted(images.items())]


class ChunkCache:
    """The worker's side: tokenizes for the server and keeps the chunks of the latest images."""

    def __init__(self, projector: Any, size: int = 32) -> None:
        self.projector = projector
        self.size = size
        self._chunks: OrderedDict[str, Any] = OrderedDict()

    def tokenize(self, parts: list[str | bytes], add_special: bool, parse_special: bool) -> list[Any]:
        """The layout of `parts` (text and encoded images); ValueError for an image that does not decode."""
        decoded = [self.projector.image(p) if isinstance(p, bytes) else p for p in parts]
        layout: list[Any] = []
        for chunk in self.projector.tokenize(decoded, add_special=add_special, parse_special=parse_special):
            if isinstance(chunk, list):
                layout.append(chunk)
                continue
            self._chunks[chunk.id] = chunk
            self._chunks.move_to_end(chunk.id)
            layout.append(["image", chunk.id, chunk.n_tokens])
        while len(self._chunks) > self.size:
            self._chunks.popitem(last=False)
        return layout

    def prompt(self, tokens: list[int], images: list[tuple[int, str]]) -> tuple[list[int], dict[int, Any]]:
        """A submission's tokens with placeholders back in place, and its chunks by position."""
        placed: dict[int, Any] = {}
        tokens = list(tokens)
        for start, image_id in images:
            chunk = self._chunks.get(image_id)
            if chunk is None:
                raise ValueError("an image of this request is no longer cached in the model's worker; send it again")
            placed[start] = chunk
            tokens[start:start + chunk.n_tokens] = [placeholder(image_id, i) for i in range(chunk.n_tokens)]
        return tokens, placed
