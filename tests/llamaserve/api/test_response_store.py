"""The Responses API's store: bounded by count, least recently used out first, 404 once gone."""

from __future__ import annotations

import pytest

from llamaserve.api.errors import APIError
from llamaserve.api.responses.store import ResponseStore


def response(rid: str, text: str = "ok") -> dict:
    return {"id": rid, "object": "response", "output": [{"type": "message", "role": "assistant",
                                                         "content": [{"type": "output_text", "text": text}]}]}


def test_least_recently_used_goes_first():
    store = ResponseStore(2)
    store.put([], response("a"))
    store.put([], response("b"))
    store.get("a")                      # a read counts as a use
    store.put([], response("c"))
    assert len(store) == 2 and store.get("a") and store.get("c")
    with pytest.raises(APIError) as info:
        store.get("b", "previous_response_id")
    assert info.value.status == 404 and info.value.param == "previous_response_id"


def test_conversation_is_input_then_output_and_survives_its_ancestors():
    store = ResponseStore(1)
    user = {"role": "user", "content": "hi"}
    store.put([user], response("a", "hello"))
    turn = store.get("a").conversation()
    assert turn == [user, *response("a", "hello")["output"]]
    store.put([*turn, {"role": "user", "content": "more"}], response("b"))     # evicts a
    assert [item.get("role") for item in store.get("b").conversation()] == ["user", "assistant", "user", "assistant"]


def test_delete_and_size_zero():
    store = ResponseStore(3)
    store.put([], response("a"))
    store.delete("a")
    with pytest.raises(APIError):
        store.delete("a")
    empty = ResponseStore(0)
    empty.put([], response("a"))
    with pytest.raises(APIError, match="responses_store_size is 0"):
        empty.get("a")


def test_bounded_by_bytes_too():
    """Finding: bounded by count only, 1000 responses of 3.5 MB each were 3.5 GB."""
    store = ResponseStore(1000, max_bytes=10_000)
    big = "x" * 3000
    for rid in "abcde":
        store.put([{"role": "user", "content": big}], response(rid))
    assert len(store) == 3 and store.bytes <= 10_000
    with pytest.raises(APIError):
        store.get("a")
    store.put([], response("huge", "y" * 20_000))          # more than the whole store: not kept
    with pytest.raises(APIError):
        store.get("huge")
    assert store.get("e")


def test_a_continued_turn_weighs_only_what_it_added():
    store = ResponseStore(10, max_bytes=1_000_000)
    history = [{"role": "user", "content": "x" * 10_000}]
    store.put(history, response("a"))
    first = store.bytes
    store.put([*store.get("a").conversation(), {"role": "user", "content": "more"}], response("b"), new_items=1)
    assert store.bytes - first < 1000

