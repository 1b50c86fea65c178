"""instructor against a real llamaserve: `instructor.from_openai(OpenAI(base_url=...))` extracting
a pydantic model in the modes whose output the server's grammar guarantees.

Mode.JSON and Mode.MD_JSON are left out: they ask for the schema in the prompt only
(`response_format: json_object` has no schema), which a real model follows and the random test
model does not.
"""

from __future__ import annotations

import asyncio

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


@pytest.mark.parametrize("mode", MODES)
def test_create(base_url, mode):
    client = instructor.from_openai(openai.OpenAI(base_url=base_url, api_key="unused"),
                                    mode=getattr(instructor.Mode, mode))
    city, completion = client.chat.completions.create_with_completion(
        model="base", response_model=City, messages=MESSAGES, max_tokens=MAX_TOKENS, max_retries=0, temperature=0)
    assert isinstance(city, City)
    assert completion.choices[0].finish_reason == ("stop" if mode == "JSON_SCHEMA" else "tool_calls")


def test_async_create(base_url):
    client = instructor.from_openai(openai.AsyncOpenAI(base_url=base_url, api_key="unused"),
                                    mode=instructor.Mode.JSON_SCHEMA)
    city = asyncio.run(client.chat.completions.create(model="base", response_model=City, messages=MESSAGES,
                                                      max_tokens=MAX_TOKENS, max_retries=0, temperature=0))
    assert isinstance(city, City)


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_create_partial(base_url, mode):
    client = instructor.from_openai(openai.OpenAI(base_url=base_url, api_key="unused"),
                                    mode=getattr(instructor.Mode, mode))
    partials = list(client.chat.completions.create_partial(
        model="base", response_model=City, messages=MESSAGES, max_tokens=MAX_TOKENS, max_retries=0, temperature=0))
    assert partials
    City.model_validate(partials[-1].model_dump())         # the last partial is the whole object
