"""Answers to clients without the admin key carry file names, not the server's folders (hostile
clients, finding 8: /props and errors disclosed absolute paths)."""

from __future__ import annotations

from llamaserve.api.errors import APIError, for_client, without_paths


def test_messages_lose_absolute_paths_for_non_admins():
    err = APIError(500, "cannot read /srv/models/private/llama.gguf: No such file or directory")
    assert for_client(err, admin=False).message == "cannot read llama.gguf: No such file or directory"
    assert for_client(err, admin=True) is err


def test_urls_and_relative_paths_stay():
    text = "see https://hf.co/a/b.gguf and ./rel/x.gguf"
    assert without_paths(text) == text
