"""The Responses API's stored responses: what `previous_response_id` continues and GET/DELETE
/v1/responses/{id} read, kept in memory and bounded by count (`responses_store_size`) and by bytes
(`responses_store_bytes`: each entry weighs its response and the input items its turn added, as JSON).

An entry holds the whole conversation that led to its response (the input items of every turn
before and of its own) plus the response object, whose output items end the conversation.
Turns share their item objects, so a long chain costs a list of references per turn, and
evicting an old turn never breaks the newer ones that continue it. The least recently used
entry (created, read or continued) goes first; an evicted or deleted id is a 404 afterwards.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from llamaserve.api.errors import APIError

_JSON = msgspec.json.Encoder()


@dataclass(frozen=True)
class Stored:
    input: tuple[dict[str, Any], ...]     # every input item of the conversation so far, in order
    response: dict[str, Any]              # the response object as GET returns it

    def conversation(self) -> list[dict[str, Any]]:
        """The items a continuation starts from: the input, then this response's output."""
        return [*self.input, *self.response["output"]]


class ResponseStore:
    """At most `size` stored responses (0: none are kept) weighing at most `max_bytes` together, least
    recently used evicted first."""

    def __init__(self, size: int, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, Stored] = OrderedDict()
        self._weights: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, items: list[dict[str, Any]], response: dict[str, Any], new_items: int | None = None) -> None:
        """Keep `response` after its conversation's `items`, of which the last `new_items` are its own turn's
        (the others are shared with the response it continues)."""
        if self.size <= 0:
            return
        own = items[len(items) - new_items:] if new_items is not None else items
        weight = len(_JSON.encode([own, response]))
        if weight > self.max_bytes:
            return                      # larger than the whole store: not kept (a later GET is a 404)
        key = response["id"]
        self._forget(key)
        self._entries[key] = Stored(tuple(items), response)
        self._weights[key] = weight
        self.bytes += weight
        while len(self._entries) > self.size or self.bytes > self.max_bytes:
            self._forget(next(iter(self._entries)))

    def _forget(self, key: str) -> None:
        if self._entries.pop(key, None) is not None:
            self.bytes -= self._weights.pop(key)

    def get(self, response_id: str, param: str = "response_id") -> Stored:
        """The entry, now the most recently used; a 404 naming `param` when it is not (or no longer) kept."""
        entry = self._entries.get(response_id)
        if entry is None:
            why = (f"never stored, deleted, or evicted from the server's store of its last {self.size} responses"
                   if self.size > 0 else "this server stores no responses: responses_store_size is 0")
            raise APIError(404, f"Response with id '{response_id[:100]}' not found ({why}).", param=param,
                           code="response_not_found")
        self._entries.move_to_end(response_id)
        return entry

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        self._forget(response_id)
