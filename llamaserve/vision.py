"""Images in requests: fetching and decoding a chat's image parts for a model with a projector.

Fetching (a remote URL waits on the network) and decoding run on a worker thread, so the event
loop keeps serving; every refusal is a MediaError, which the routes answer with a 400.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from llamacore.media import MediaError, image_urls
from llamacore.multimodal import load_images

if TYPE_CHECKING:
    from llamacore._core import Image, Projector
    from llamaserve.settings import ServerConfig


async def load_message_images(config: ServerConfig, engine: object, alias: str,
                              messages: list[dict[str, Any]]) -> tuple[Projector | None, list[Image] | None]:
    """(the model's projector, the messages' images in order), or (None, None) when they hold none.
    MediaError for an image the model cannot take or the media policy refuses."""
    urls = image_urls(messages)
    if not urls:
        return None, None
    projector = getattr(engine, "projector", None)
    if projector is None:
        raise MediaError(f"image input is not supported: model {alias!r} has no vision "
                         "projector (clip_model_path, or mmproj, in its config entry)")
    return projector, await run_in_threadpool(load_images, projector, urls, config.media)
