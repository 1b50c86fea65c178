"""Images in requests: fetching and decoding a chat's image parts for a model with a projector.

Fetching (a remote URL waits on the network) and decoding run on a worker thread, so the event
loop keeps serving; every refusal is a MediaError, which the routes answer with a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from llamacore.vision.media import MediaError, image_urls
from llamacore.vision.prompt import load_images
from llamaserve.serving.offload import off_loop

T = TypeVar("T")

if TYPE_CHECKING:
    from llamacore import Image, Projector
    from llamaserve.config.settings import ServerConfig


async def load_message_images(config: ServerConfig, projector: Projector | None, alias: str,
                              messages: list[dict[str, Any]]) -> tuple[Projector | None, list[Image] | None]:
    """(the model's projector, the messages' images in order), or (None, None) when they hold none.
    MediaError for an image the model cannot take or the media policy refuses."""
    urls = image_urls(messages)
    if not urls:
        return None, None
    if projector is None:
        raise MediaError(f"image input is not supported: model {alias!r} has no vision "
                         "projector (clip_model_path, or mmproj, in its config entry)")
    return projector, await off_loop(load_images, projector, urls, config.media)


async def prompt_off_loop(build: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """build(*args, **kwargs) for a prompt, on a worker thread: rendering (llama.cpp's chat layer releases
    the GIL) and tokenizing take milliseconds, and images are decoded while laid out (for a model in a
    worker process, waiting on that process)."""
    return await off_loop(build, *args, **kwargs)
