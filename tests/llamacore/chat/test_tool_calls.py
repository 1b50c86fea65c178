"""Tool-call styles: the forcing grammar accepts what parse() reads back."""

import json

import pytest
from helpers import N_THREADS

from llamacore import Llama
from llamacore.chat import tool_calls

ADDRESS_TOOL = {"type": "function", "function": {"name": "ship", "parameters": {
    "type": "object", "properties": {"to": {"$ref": "#/$defs/address"}}, "required": ["to"],
    "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                          "required": ["city"]}}}}}
PING_TOOL = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("text,style,name,args", [
    ('<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>', "hermes", "ping", {}),
    ('[TOOL_CALLS][{"name": "ship", "arguments": {"to": {"city": "Oslo"}}}]', "mistral", "ship",
     {"to": {"city": "Oslo"}}),
    ('{"name": "ship", "parameters": {"to": {"city": "Rome"}}}', "llama3", "ship", {"to": {"city": "Rome"}}),
    ('<|python_tag|>{"name": "ping", "parameters": {}}', "llama3", "ping", {}),
])
def test_parse_styles(text, style, name, args):
    content, calls = tool_calls.parse(text, style)
    assert content is None
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == name
    assert json.loads(calls[0]["function"]["arguments"]) == args


def test_plain_text_is_not_a_call():
    assert tool_calls.parse("The answer is {not json", "hermes") == ("The answer is {not json", [])


@pytest.mark.parametrize("template,style", [
    ("{{ '<tool_call>' }}", "hermes"), ("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"), ("plain", "hermes"),
])
def test_style_follows_template_markers(template, style):
    assert tool_calls.style_for(template) == style


@pytest.mark.parametrize("style", ["hermes", "mistral", "llama3"])
def test_forced_call_with_refs_parses(tiny_model_path, style):
    llm = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS)
    grammar = tool_calls.forcing_grammar([ADDRESS_TOOL, PING_TOOL], style)
    out = llm("Call a tool:", max_tokens=200, temperature=0.8, seed=4, grammar=grammar)
    assert out["choices"][0]["finish_reason"] == "stop", out["choices"][0]["text"]
    _, calls = tool_calls.parse(out["choices"][0]["text"], style)
    assert len(calls) == 1 and calls[0]["function"]["name"] in ("ship", "ping")
    json.loads(calls[0]["function"]["arguments"])


def test_conflicting_definitions_are_refused():
    other = {"type": "function", "function": {"name": "x", "parameters": {
        "type": "object", "$defs": {"address": {"type": "string"}}}}}
    with pytest.raises(ValueError, match="address"):
        tool_calls.forcing_grammar([ADDRESS_TOOL, other], "hermes")


@pytest.mark.parametrize("text, style, content, name, args", [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', "hermes", None, "get_weather", '{"city": "Par'),
    ("<tool_ca", "hermes", None, "", ""),
    ("Sure. <tool_call>\n{\"na", "hermes", "Sure.", "", ""),
    ('[TOOL_CALLS][{"name": "f", "arguments": {"a": [1', "mistral", None, "f", '{"a": [1'),
    ('{"name": "f", "parameters": {"a": 1', "llama3", None, "f", '{"a": 1'),
])
def test_partial_call_keeps_name_and_arguments_so_far(text, style, content, name, args):
    got_content, calls = tool_calls.parse_partial(text, style)
    assert got_content == content
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [(name, args)]


@pytest.mark.parametrize("text", ["plain text cut", "x <", "the <b"])
def test_text_without_a_call_is_not_a_partial_call(text):
    assert tool_calls.parse_partial(text, "hermes") == (text, [])
