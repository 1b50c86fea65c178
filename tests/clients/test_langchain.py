"""LangChain (`langchain-openai`) against a real llamaserve: chat, streaming, structured output,
tool binding and embeddings, configured as a user points it at an OpenAI-compatible server."""

from __future__ import annotations

from typing import Literal

import pytest
from city import MAX_TOKENS, City

langchain_openai = pytest.importorskip("langchain_openai", reason="pip install -e '.[clients]'")
from langchain_core.tools import tool  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]


def chat(base_url: str, model: str = "base", **kw):
    return langchain_openai.ChatOpenAI(model=model, base_url=base_url, api_key="unused", temperature=0, **kw)


def test_invoke(base_url):
    message = chat(base_url, max_tokens=8).invoke("Hello")
    assert isinstance(message.content, str) and message.content
    assert message.response_metadata["finish_reason"] == "length"
    assert message.response_metadata["model_name"] == "base"
    assert message.usage_metadata["output_tokens"] == 8 and message.usage_metadata["input_tokens"] > 0


def test_stream_with_usage(base_url):
    chunks = list(chat(base_url, max_tokens=8, stream_usage=True).stream("Hello"))
    assert len(chunks) > 2
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert isinstance(whole.content, str) and whole.content
    assert whole.response_metadata["finish_reason"] == "length"
    assert whole.usage_metadata["output_tokens"] == 8


CITY = {"name": "Lyon", "population": 500, "capital": False, "size": "large"}


@tool
def get_weather(city: Literal["Paris", "Oslo"]) -> str:
    """The weather in a city."""
    return "sunny"


@pytest.fixture(scope="module")
def scripted_url(tmp_path_factory):
    """A server whose Qwen3-format models are scripted to call LangChain's tools as LangChain sends them
    (support/agent_script.py): random weights would write free text before a call."""
    from agent_script import Conversation, scripted_server
    from langchain_core.utils.function_calling import convert_to_openai_tool

    conversations = {
        "weather": Conversation("Qwen-Qwen3-0.6B", [convert_to_openai_tool(get_weather)],
                                "What is the weather in Paris?", [("get_weather", {"city": "Paris"}, "sunny")]),
        **{f"city-{strict}": Conversation("Qwen-Qwen3-0.6B", [convert_to_openai_tool(City, strict=strict)],
                                          "Describe a city", [("City", CITY, "ok")])
           for strict in (None, True)}}
    proc, _ = scripted_server(tmp_path_factory.mktemp("langchain"), conversations)
    yield proc.base_url + "/v1"
    proc.stop()


@pytest.mark.parametrize("strict", [None, True])
def test_with_structured_output(base_url, scripted_url, strict):
    """json_schema: the server's grammar shapes the tiny model's answer; function_calling: a forced call."""
    for method, url, model in (("json_schema", base_url, "base"), ("function_calling", scripted_url, f"city-{strict}")):
        structured = chat(url, model, max_tokens=MAX_TOKENS).with_structured_output(
            City, method=method, strict=strict, include_raw=True)
        out = structured.invoke("Describe a city")
        assert out["parsing_error"] is None
        assert isinstance(out["parsed"], City)
        finish = out["raw"].response_metadata["finish_reason"]
        assert finish == ("stop" if method == "json_schema" else "tool_calls")
        if method == "function_calling":
            assert out["parsed"] == City(**CITY)


@pytest.mark.parametrize("tool_choice", ["get_weather", "required"])
def test_bind_tools(scripted_url, tool_choice):
    message = chat(scripted_url, "weather", max_tokens=100).bind_tools([get_weather], tool_choice=tool_choice).invoke(
        "What is the weather in Paris?")
    assert message.invalid_tool_calls == []
    [call] = message.tool_calls
    assert call["name"] == "get_weather" and call["args"] == {"city": "Paris"} and call["id"]


def test_embeddings(base_url):
    # check_embedding_ctx_length=False sends the texts themselves: LangChain's setting for any
    # server that is not OpenAI's (by default it sends tiktoken cl100k token ids, which are not
    # this model's; the server answers those with a 400 naming the first token outside its vocabulary)
    embeddings = langchain_openai.OpenAIEmbeddings(model="emb", base_url=base_url, api_key="unused",
                                                   check_embedding_ctx_length=False)
    documents = embeddings.embed_documents(["hello world", "a second text"])
    query = embeddings.embed_query("hello world")
    assert len(documents) == 2 and len(documents[0]) == len(query) > 0
    assert query == pytest.approx(documents[0], abs=1e-5) and documents[0] != documents[1]
