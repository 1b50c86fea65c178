"""Every chat template llama.cpp ships x conversation shapes (tests/support/chat_shapes.py), rendered as
llamaserve renders a chat request, equals the prompt llama-server renders (recorded from its
/apply-template by tests/support/record_llama_server_prompts.py), byte for byte, a leading BOS aside."""

from __future__ import annotations

import hashlib
import json

import pytest
from chat_shapes import MODEL, PROMPTS, SHAPES, TEMPLATES

from llamacore import Model
from llamacore.chat import native
from llamacore.chat.prompt import tool_request
from llamacore.chat.thinking import template_kwargs

RECORDED = json.loads(PROMPTS.read_text())
CASES = [(t, s) for t in sorted(RECORDED) for s in SHAPES]


@pytest.fixture(scope="module")
def model():
    return Model(MODEL, vocab_only=True)


def test_every_shipped_template_is_recorded():
    assert sorted(RECORDED) == sorted(p.name for p in TEMPLATES.glob("*.jinja"))
    assert len(CASES) == len(RECORDED) * len(SHAPES) >= 70 * 7


@pytest.mark.parametrize("template, shape", CASES)
def test_prompt_equals_llama_server(model, template, shape):
    source = (TEMPLATES / template).read_text()
    body = SHAPES[shape]
    expected = RECORDED[template][shape]
    try:
        tools, choice = tool_request(body.get("tools"), None)
        kwargs = template_kwargs(source, request=body.get("chat_template_kwargs"))
        prompt = native.render(native.for_model(model, source), body["messages"], tools=tools, tool_choice=choice,
                               template_kwargs=kwargs).prompt
    except ValueError as exc:
        assert expected == "error", f"llama-server renders it; here: {exc}"
        return
    assert expected != "error", "llama-server refuses this conversation; here it rendered"
    # llama-server leaves out a leading BOS that the model's tokenizer adds itself; here it stays in the
    # text and tokenizes to the same BOS token
    bos = native.special_text(model, model.token_bos)
    assert expected in (sha256(prompt), sha256(prompt.removeprefix(bos))), prompt


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_tool_call_arguments_reach_the_template_as_objects(model):
    source = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    body = SHAPES["tool_round_trip"]
    prompt = native.render(native.for_model(model, source), body["messages"], tools=body["tools"]).prompt
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert '\\"city\\"' not in prompt
