"""instructor against a real llamaserve: `instructor.from_openai(OpenAI(base_url=...))` extracting
a pydantic model in the modes whose output the server's grammar guarantees.

Mode.JSON and Mode.MD_JSON are left out: they ask for the schema in the prompt only
(`response_format: json_object` has no schema), which a real model follows and the random test
model does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from city import MAX_TOKENS, City

instructor = pytest.importorskip("instructor", reason="pip install -e '.[clients]'")
import openai  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.slow]

# every request decodes greedily (temperature=0): a sampled answer of the random tiny model may hold
# bytes that are no UTF-8, which the grammar counts as fewer characters than Python decodes them to
# (a name over its max_length)
MESSAGES = [{"role": "user", "content": "Describe a city"}]
MODES = ["TOOLS", "JSON_SCHEMA"]      # TOOLS_STRICT: deprecated by instructor in favour of TOOLS
CITY = {"name": "Lyon", "population": 500, "capital": False, "size": "large"}


def _offered_tools(partial: bool) -> list[dict]:
    """The tools instructor sends for City (or, streaming partials, for its PartialCity), read from the
    request it makes (to a closed port: only the body is wanted)."""
    import httpx

    bodies: list[dict] = []
    http = httpx.Client(event_hooks={"request": [lambda r: bodies.append(json.loads(r.content))]})
    client = instructor.from_openai(openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0,
                                                  http_client=http), mode=instructor.Mode.TOOLS)
    create = client.chat.completions.create_partial if partial else client.chat.completions.create
    with contextlib.suppress(Exception):
        answer = create(model="m", response_model=City, messages=MESSAGES, max_tokens=4, max_retries=0)
        list(answer)                  # a partial stream sends its request when read
    return bodies[0]["tools"]


@pytest.fixture(scope="module")
def scripted_url(tmp_path_factory):
    """Mode.TOOLS needs a model that calls the tool: Qwen3-format models scripted to call City (and
    PartialCity) as instructor offers them (support/agent_script.py); random weights would write free text."""
    from agent_script import Conversation, scripted_server

    conversations = {}
    for alias, partial in (("city", False), ("partial-city", True)):
        tools = _offered_tools(partial)
        conversations[alias] = Conversation("Qwen-Qwen3-0.6B", tools, MESSAGES[0]["content"],
                                            [(tools[0]["function"]["name"], CITY, "ok")])
    proc, _ = scripted_server(tmp_path_factory.mktemp("instructor"), conversations)
    yield proc.base_url + "/v1"
    proc.stop()


def _target(mode: str, base_url: str, scripted_url: str, partial: bool = False) -> tuple[str, str]:
    """The server and model for `mode`: JSON_SCHEMA's grammar shapes the tiny model's answer."""
    return (scripted_url, "partial-city" if partial else "city") if mode == "TOOLS" else (base_url, "base")


@pytest.mark.parametrize("mode", MODES)
def test_create(base_url, scripted_url, mode):
    url, model = _target(mode, base_url, scripted_url)
    client = instructor.from_openai(openai.OpenAI(base_url=url, api_key="unused"),
                                    mode=getattr(instructor.Mode, mode))
    city, completion = client.chat.completions.create_with_completion(
        model=model, response_model=City, messages=MESSAGES, max_tokens=MAX_TOKENS, max_retries=0, temperature=0)
    assert isinstance(city, City)
    assert completion.choices[0].finish_reason == ("stop" if mode == "JSON_SCHEMA" else "tool_calls")
    if mode == "TOOLS":
        assert city.model_dump() == CITY


def test_async_create(base_url):
    client = instructor.from_openai(openai.AsyncOpenAI(base_url=base_url, api_key="unused"),
                                    mode=instructor.Mode.JSON_SCHEMA)
    city = asyncio.run(client.chat.completions.create(model="base", response_model=City, messages=MESSAGES,
                                                      max_tokens=MAX_TOKENS, max_retries=0, temperature=0))
    assert isinstance(city, City)


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_create_partial(base_url, scripted_url, mode):
    url, model = _target(mode, base_url, scripted_url, partial=True)
    client = instructor.from_openai(openai.OpenAI(base_url=url, api_key="unused"),
                                    mode=getattr(instructor.Mode, mode))
    partials = list(client.chat.completions.create_partial(
        model=model, response_model=City, messages=MESSAGES, max_tokens=MAX_TOKENS, max_retries=0, temperature=0))
    assert partials
    City.model_validate(partials[-1].model_dump())         # the last partial is the whole object
