"""`Llama.create_chat_completion`: templates, streaming shapes, structured output validated by jsonschema."""

import json

import jsonschema
import pytest
from helpers import N_THREADS

from llamacore import Llama

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def llm(tiny_model_path):
    return Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS)


def test_chat_shape_and_stream(llm):
    out = llm.create_chat_completion(MESSAGES, max_tokens=8, temperature=0)
    assert out["object"] == "chat.completion" and out["choices"][0]["message"]["role"] == "assistant"
    chunks = list(llm.create_chat_completion(MESSAGES, max_tokens=8, temperature=0, stream=True))
    # the role comes first with no content yet (null, as llama-server and llama-cpp-python's server send it)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == out["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == out["choices"][0]["finish_reason"] == "length"


def test_prompt_uses_the_gguf_chatml_template(llm):
    expected = ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nSay something.<|im_end|>\n"
                "<|im_start|>assistant\n")
    out = llm.create_chat_completion(MESSAGES, max_tokens=1, temperature=0)
    assert out["usage"]["prompt_tokens"] == len(llm.tokenize(expected.encode()))


def test_named_chat_format_changes_the_prompt(tiny_model_path):
    llama3 = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS, chat_format="llama-3")
    chatml = Llama(tiny_model_path, n_ctx=512, n_threads=N_THREADS)
    a = llama3.create_chat_completion(MESSAGES, max_tokens=1, temperature=0)["usage"]["prompt_tokens"]
    b = chatml.create_chat_completion(MESSAGES, max_tokens=1, temperature=0)["usage"]["prompt_tokens"]
    assert a != b


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "why": {"type": ["string", "null"], "maxLength": 8},
                                      "score": {"type": "number"}}, "required": ["ok"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"enum": ["a", "b", 3, None]},
                                                "minItems": 1, "maxItems": 3}},
     "required": ["items"]},
    {"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}, "required": ["tree"],
     "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                   "maxItems": 1}},
                        "required": ["v"]}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("seed", [1, 2])
def test_json_schema_outputs_validate(llm, schema, seed):
    out = llm.create_chat_completion(MESSAGES, max_tokens=300, temperature=0.8, seed=seed,
                                     response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    choice = out["choices"][0]
    assert choice["finish_reason"] == "stop", choice["message"]["content"]
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


def test_unsupported_schema_keyword_is_a_clear_error(llm):
    with pytest.raises(ValueError, match="lookaround"):
        llm.create_chat_completion(MESSAGES, response_format={
            "type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "^(?=a)a+$"}}})
