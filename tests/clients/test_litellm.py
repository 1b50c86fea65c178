"""litellm against a real llamaserve, as its docs address an OpenAI-compatible server:
model "openai/<alias>" with api_base and api_key; chat, streaming, async, text completion,
response_format and embeddings."""

from __future__ import annotations

import asyncio

import pytest
from city import MAX_TOKENS, City

pytestmark = [
    pytest.mark.server, pytest.mark.slow,
    # litellm's own types, as pydantic compiles them on first use: not about this server
    pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning",
                               "ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

MESSAGES = [{"role": "user", "content": "Hello"}]
MODEL = "openai/base"        # litellm's prefix for an OpenAI-compatible server, then the alias


@pytest.fixture(scope="module")
def litellm():
    # the bundled model cost map instead of fetching it from GitHub at import: CI runs offline
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        return pytest.importorskip("litellm", reason="pip install -e '.[clients]'")


@pytest.fixture()
def openai_kw(base_url):
    return {"api_base": base_url, "api_key": "unused"}


def test_completion(litellm, openai_kw):
    response = litellm.completion(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, **openai_kw)
    assert response.choices[0].message.content and response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == 8 and response.usage.prompt_tokens > 0


def test_streaming(litellm, openai_kw):
    chunks = list(litellm.completion(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0,
                                     stream=True, stream_options={"include_usage": True}, **openai_kw))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].usage.completion_tokens == 8


def test_async_completion(litellm, openai_kw):
    response = asyncio.run(litellm.acompletion(model=MODEL, messages=MESSAGES, max_tokens=4, **openai_kw))
    assert response.choices[0].finish_reason == "length" and response.usage.completion_tokens == 4


def test_text_completion(litellm, openai_kw):
    response = litellm.text_completion(model=MODEL, prompt="Once upon a time", max_tokens=8, **openai_kw)
    assert response.choices[0].text and response.choices[0].finish_reason == "length"


def test_response_format(litellm, openai_kw):
    response = litellm.completion(model=MODEL, messages=[{"role": "user", "content": "Describe a city"}],
                                  response_format=City, max_tokens=MAX_TOKENS, **openai_kw)
    assert response.choices[0].finish_reason == "stop"
    City.model_validate_json(response.choices[0].message.content)


def test_embedding(litellm, openai_kw):
    response = litellm.embedding(model="openai/emb", input=["hello world", "a second text"], **openai_kw)
    assert [d["index"] for d in response.data] == [0, 1]
    first, second = (d["embedding"] for d in response.data)
    assert len(first) == len(second) > 0 and first != second
    assert response.usage.prompt_tokens > 0
