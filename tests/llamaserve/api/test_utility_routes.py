"""llama.cpp server's utility routes (/tokenize, /detokenize, /apply-template) on a real server."""

import httpx
import pytest

from llamacore import Model
from llamacore.chat.native import for_model, render
from llamacore.chat.templates import resolve_template

pytestmark = [pytest.mark.server, pytest.mark.slow]

TEXT = "Once upon a time, a cat"


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return Model(tiny_model_path)


def test_tokenize_matches_the_library(http, model):
    got = http.post("/tokenize", json={"content": TEXT, "model": "base"})
    assert got.status_code == 200
    assert got.json() == {"tokens": model.tokenize(TEXT, add_special=False, parse_special=True)}
    with_bos = http.post("/tokenize", json={"content": TEXT, "add_special": True}).json()["tokens"]
    assert with_bos == model.tokenize(TEXT, add_special=True, parse_special=True)
    assert with_bos[0] == model.token_bos and with_bos[1:] == got.json()["tokens"]


def test_tokenize_with_pieces(http, model):
    pieces = http.post("/tokenize", json={"content": TEXT, "with_pieces": True}).json()["tokens"]
    tokens = model.tokenize(TEXT, add_special=False, parse_special=True)
    assert [p["id"] for p in pieces] == tokens
    raw = b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in pieces)
    assert raw == b"".join(model.token_to_piece(t, True) for t in tokens)


def test_detokenize_round_trip_and_bad_ids(http, model):
    tokens = model.tokenize(TEXT, add_special=False, parse_special=True)
    got = http.post("/detokenize", json={"tokens": tokens})
    assert got.status_code == 200 and got.json() == {"content": model.detokenize(tokens).decode()}
    assert TEXT in got.json()["content"]
    assert http.post("/detokenize", json={"tokens": []}).json() == {"content": ""}
    for bad in ([model.n_vocab], [-1], ["x"]):
        refused = http.post("/detokenize", json={"tokens": bad})
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["type"] == "invalid_request_error"


def test_apply_template_renders_what_chat_decodes(http, model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    got = http.post("/apply-template", json={"messages": messages, "model": "la"})
    assert got.status_code == 200
    template = resolve_template(None, None, model.chat_template())
    assert got.json() == {"prompt": render(for_model(model, template), messages).prompt}
    assert "Hi there" in got.json()["prompt"] and "Be brief." in got.json()["prompt"]
    assert http.post("/apply-template", json={"messages": []}).status_code == 400


def test_unknown_model_and_embedding_model(http, embed_model_path):
    missing = http.post("/tokenize", json={"content": "x", "model": "nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    emb = Model(embed_model_path)
    got = http.post("/tokenize", json={"content": "hello world", "model": "emb"}).json()["tokens"]
    assert got == emb.tokenize("hello world", add_special=False, parse_special=True)
