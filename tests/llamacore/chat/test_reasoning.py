"""Thinking models (llamacore.chat.reasoning): `reasoning_format` splits a `<think>` block into
`reasoning_content` (and streamed `delta.reasoning_content`), per request and per model; a template's
`enable_thinking` follows `reasoning` (on/off/auto) and `chat_template_kwargs`; the Anthropic and
Responses routes carry the reasoning as thinking blocks and reasoning items.

A random tiny model never thinks by itself: a grammar makes it write a known text, and a template
whose generation prompt ends with `<think>` (thinking forced open) makes the first part reasoning.
"""

from __future__ import annotations

import json

import httpx
import pytest
import yaml
from helpers import N_THREADS
from server import ServerProcess

from llamacore.chat.reasoning import Reasoning, template_kwargs
from llamaserve.config.parse import parse_config

pytestmark = [pytest.mark.server, pytest.mark.slow]

# Qwen3-like: the generation prompt opens a think block while thinking is on, and writes an empty
# one when it is off; earlier answers show their reasoning_content
THINK_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif -%}"
    "{{ m.content or '' }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n"
    "{%- if enable_thinking -%}<think>\n{%- else -%}<think>\n\n</think>\n\n{%- endif -%}{%- endif -%}"
)
THOUGHT, ANSWER = "I reason here.", "The answer."
# what the model writes inside a block the prompt opened, and a whole block it opens itself
OPEN = f'root ::= "{THOUGHT}" "</think>" "{ANSWER}"'
WHOLE = f'root ::= "<think>" "{THOUGHT}" "</think>" "{ANSWER}"'
USER = [{"role": "user", "content": "Why?"}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    entry = {"model": str(tiny_model_path), "chat_template": THINK_TEMPLATE}
    config = {"defaults": {"n_ctx": 512, "n_threads": N_THREADS}, "models": [
        {**entry, "alias": "think"},
        {**entry, "alias": "think-none", "reasoning_format": "none"},
        {**entry, "alias": "think-off", "reasoning": "off"},
        {**entry, "alias": "think-kwargs", "chat_template_kwargs": {"enable_thinking": False, "extra": "X"}},
        {"model": str(tiny_model_path), "alias": "plain", "chat_format": "chatml"},
    ]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("reasoning")).start()
    yield proc
    proc.stop()


def chat(srv, grammar: str = OPEN, **fields) -> dict:
    r = srv.post("/v1/chat/completions", json={"model": "think", "messages": USER, "max_tokens": 40,
                                               "grammar": grammar, **fields})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


def stream_chat(srv, grammar: str = OPEN, **fields) -> list[dict]:
    """The deltas of a streamed chat answer, in order."""
    body = {"model": "think", "messages": USER, "max_tokens": 40, "grammar": grammar, "stream": True, **fields}
    deltas = []
    with httpx.stream("POST", srv.base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                deltas += [c["delta"] for c in json.loads(line[6:])["choices"]]
    return deltas


def joined(deltas: list[dict], key: str) -> str:
    return "".join(d.get(key) or "" for d in deltas)


def prompt(srv, model: str = "think", **fields) -> str:
    r = srv.post("/apply-template", json={"model": model, "messages": USER, **fields})
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


# -- chat completions ---------------------------------------------------------------------------


def test_forced_open_thinking_is_split_by_default(srv):
    assert prompt(srv).endswith("<|im_start|>assistant<think>")        # enable_thinking: true (auto)
    message = chat(srv)
    assert message["reasoning_content"] == THOUGHT
    assert message["content"] == ANSWER


@pytest.mark.parametrize("fmt", ["deepseek", "auto", "deepseek-legacy"])
def test_formats_that_split(srv, fmt):
    message = chat(srv, reasoning_format=fmt)
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)


def test_reasoning_format_none_leaves_the_text_in_content(srv):
    message = chat(srv, reasoning_format="none")
    assert message["content"] == f"{THOUGHT}</think>{ANSWER}"
    assert "reasoning_content" not in message


def test_per_model_reasoning_format_and_the_request_overriding_it(srv):
    message = chat(srv, model="think-none")
    assert message["content"] == f"{THOUGHT}</think>{ANSWER}" and "reasoning_content" not in message
    message = chat(srv, model="think-none", reasoning_format="deepseek")
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)


def test_a_block_the_model_opens_itself_is_split_too(srv):
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert prompt(srv, **off).endswith("<think>\n\n</think>")
    message = chat(srv, grammar=WHOLE, **off)
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)
    message = chat(srv, grammar=OPEN, **off)     # nothing opened: a stray end tag is just text
    assert message["content"] == f"{THOUGHT}</think>{ANSWER}" and "reasoning_content" not in message


def test_auto_splits_only_for_templates_that_think(srv):
    message = chat(srv, model="plain", grammar=WHOLE)           # chatml knows no thinking: text as written
    assert message["content"] == f"<think>{THOUGHT}</think>{ANSWER}" and "reasoning_content" not in message
    message = chat(srv, model="plain", grammar=WHOLE, reasoning_format="deepseek")
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)
    deltas = stream_chat(srv, model="plain", grammar=WHOLE, reasoning_format="deepseek")
    assert (joined(deltas, "reasoning_content"), joined(deltas, "content")) == (THOUGHT, ANSWER)


def test_reasoning_cut_by_max_tokens_is_all_reasoning(srv):
    message = chat(srv, max_tokens=3)
    assert message["content"] == "" and THOUGHT.startswith(message["reasoning_content"])


@pytest.mark.parametrize("fmt", ["deepseek", None])
def test_streamed_reasoning_comes_as_reasoning_content_deltas(srv, fmt):
    deltas = stream_chat(srv, **({"reasoning_format": fmt} if fmt else {}))
    assert joined(deltas, "reasoning_content") == THOUGHT
    assert joined(deltas, "content") == ANSWER
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning_content")     # all reasoning first


def test_streamed_with_reasoning_format_none_and_legacy(srv):
    deltas = stream_chat(srv, reasoning_format="none")
    assert joined(deltas, "content") == f"{THOUGHT}</think>{ANSWER}" and not joined(deltas, "reasoning_content")
    deltas = stream_chat(srv, reasoning_format="deepseek-legacy")       # inline, tags and all
    assert joined(deltas, "content") == f"<think>{THOUGHT}</think>{ANSWER}"
    deltas = stream_chat(srv, model="think-none")
    assert joined(deltas, "content") == f"{THOUGHT}</think>{ANSWER}"


def test_reasoning_with_tools_offered(srv):
    """Content waits for the end (it may be a tool call); the reasoning still streams as it comes."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    message = chat(srv, tools=tools)
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)
    deltas = stream_chat(srv, tools=tools)
    assert joined(deltas, "reasoning_content") == THOUGHT and joined(deltas, "content") == ANSWER
    assert [d["content"] for d in deltas if d.get("content")] == [ANSWER]     # held, then sent whole


def test_several_choices_split_alike(srv):
    r = srv.post("/v1/chat/completions", json={"model": "think", "messages": USER, "max_tokens": 40,
                                               "grammar": OPEN, "n": 2, "temperature": 1.0})
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert (choice["message"]["reasoning_content"], choice["message"]["content"]) == (THOUGHT, ANSWER)


# -- enable_thinking: reasoning (on/off/auto), chat_template_kwargs, reasoning_effort ------------------


def test_enable_thinking_from_the_model_and_the_request(srv):
    assert prompt(srv, "think-off").endswith("<think>\n\n</think>")          # reasoning: off
    assert prompt(srv, "think-off", chat_template_kwargs={"enable_thinking": True}).endswith("<think>")
    assert prompt(srv, "think-kwargs").endswith("<think>\n\n</think>")      # the model's kwargs
    assert prompt(srv, "think-kwargs", chat_template_kwargs={"enable_thinking": True}).endswith("<think>")
    assert prompt(srv, reasoning_effort="none").endswith("<think>\n\n</think>")
    assert prompt(srv, reasoning_effort="high").endswith("<think>")
    # with thinking off nothing is forced open: the model's text is all answer
    message = chat(srv, model="think-off")
    assert message["content"] == f"{THOUGHT}</think>{ANSWER}" and "reasoning_content" not in message


def test_template_kwargs_reach_the_template(srv, tmp_path, tiny_model_path):
    template = "{{ extra }}|{{ enable_thinking }}|{% for m in messages %}{{ m.content }}{% endfor %}"
    config = {"defaults": {"n_ctx": 256, "n_threads": N_THREADS}, "models": [
        {"alias": "k", "model": str(tiny_model_path), "chat_template": template,
         "chat_template_kwargs": {"extra": "model"}}]}
    proc = ServerProcess(config, tmp_path).start()
    try:
        r = proc.post("/apply-template", json={"messages": USER})
        assert r.json()["prompt"] == "model|True|Why?"     # a template that reads enable_thinking thinks
        r = proc.post("/apply-template", json={"messages": USER, "reasoning_effort": "none",
                                               "chat_template_kwargs": {"extra": "request"}})
        assert r.json()["prompt"] == "request|False|Why?"
    finally:
        proc.stop()


@pytest.mark.parametrize("fields, param", [
    ({"reasoning_format": "bogus"}, "reasoning_format"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "enable_thinking"),
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_values_are_a_400(srv, fields, param, stream):
    r = srv.post("/v1/chat/completions", json={"model": "think", "messages": USER, "max_tokens": 4,
                                               "stream": stream, **fields})
    assert r.status_code == 400, r.text
    assert param in r.text


def test_history_reasoning_reaches_the_template(srv):
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"},
                {"role": "user", "content": "Why?"}]
    r = srv.post("/apply-template", json={"model": "think", "messages": messages})
    assert "<think>greet back</think>Hello" in r.json()["prompt"]


# -- Anthropic messages -------------------------------------------------------------------------


def test_anthropic_thinking_blocks(srv):
    # Anthropic's API has no grammar: the template's forced-open block makes the model's free text reasoning
    r = srv.post("/v1/messages", json={"model": "think", "max_tokens": 12, "messages": USER,
                                       "thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert r.status_code == 200, r.text
    content = r.json()["content"]
    assert content and content[0]["type"] == "thinking" and content[0]["signature"] == ""
    assert content[0]["thinking"]


def test_anthropic_thinking_disabled_turns_thinking_off(srv):
    r = srv.post("/v1/messages", json={"model": "think", "max_tokens": 12, "messages": USER,
                                       "thinking": {"type": "disabled"}})
    assert r.status_code == 200, r.text
    assert all(b["type"] != "thinking" for b in r.json()["content"])
    r = srv.post("/v1/messages", json={"model": "think", "max_tokens": 12, "messages": USER,
                                       "thinking": {"type": "sometimes"}})
    assert r.status_code == 400 and "thinking.type" in r.text


def test_anthropic_streamed_thinking(srv):
    body = {"model": "think", "max_tokens": 12, "messages": USER, "stream": True, "temperature": 0,
            "thinking": {"type": "enabled", "budget_tokens": 1024}}
    events = []
    with httpx.stream("POST", srv.base_url + "/v1/messages", json=body, timeout=120) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert starts[0]["index"] == 0 and starts[0]["content_block"]["type"] == "thinking"
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == 0]
    assert deltas[0]["type"] == "thinking_delta" and deltas[-1] == {"type": "signature_delta", "signature": ""}
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert stops == [s["index"] for s in starts]
    non_stream = srv.post("/v1/messages", json={**body, "stream": False}).json()
    thinking = "".join(d.get("thinking", "") for d in deltas)
    assert thinking == non_stream["content"][0]["thinking"]     # greedy sampling: the same text


def test_anthropic_thinking_history_is_rendered(srv):
    history = [{"role": "user", "content": "Hi"},
               {"role": "assistant", "content": [{"type": "thinking", "thinking": "greet back", "signature": ""},
                                                 {"type": "text", "text": "Hello"}]},
               {"role": "user", "content": "Why?"}]
    plain = [history[0], {"role": "assistant", "content": "Hello"}, history[2]]
    with_thinking = srv.post("/v1/messages/count_tokens", json={"model": "think", "messages": history})
    without = srv.post("/v1/messages/count_tokens", json={"model": "think", "messages": plain})
    assert with_thinking.status_code == 200, with_thinking.text
    assert with_thinking.json()["input_tokens"] > without.json()["input_tokens"]


# -- Responses API ------------------------------------------------------------------------------


def test_responses_reasoning_item(srv):
    r = srv.post("/v1/responses", json={"model": "think", "input": "Why?", "max_output_tokens": 12, "temperature": 0})
    assert r.status_code == 200, r.text
    output = r.json()["output"]
    assert [o["type"] for o in output] == ["reasoning", "message"]
    thought = output[0]["content"][0]["text"]
    assert output[0]["content"][0]["type"] == "reasoning_text" and thought
    # the stream carries the same items, reasoning first
    body = {"model": "think", "input": "Why?", "max_output_tokens": 12, "stream": True, "temperature": 0}
    with httpx.stream("POST", srv.base_url + "/v1/responses", json=body, timeout=120) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert deltas == thought
    done = [e["item"]["type"] for e in events if e["type"] == "response.output_item.done"]
    assert done == ["reasoning", "message"]
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["reasoning", "message"]
    # a continuation renders the earlier reasoning item with its answer
    follow = srv.post("/v1/responses", json={"model": "think", "input": "And?", "max_output_tokens": 2,
                                             "previous_response_id": r.json()["id"]})
    assert follow.status_code == 200, follow.text


def test_responses_reasoning_effort_none_turns_thinking_off(srv):
    r = srv.post("/v1/responses", json={"model": "think", "input": "Why?", "max_output_tokens": 12,
                                        "reasoning": {"effort": "none"}})
    assert r.status_code == 200, r.text
    assert [o["type"] for o in r.json()["output"]] == ["message"]


# -- the pieces, without a server -----------------------------------------------------------------


@pytest.mark.parametrize("text", [f"{THOUGHT}</think>{ANSWER}", f"\n{THOUGHT} \n</think>\n\n{ANSWER}",
                                  THOUGHT, "", " </think>x", "</thi"])
def test_streamed_split_matches_the_whole_split(text):
    for forced in (True, False):
        for body in (text, "<think>" + text, "  <think>" + text, "no think " + text):
            r = Reasoning(forced_open=forced)
            for size in (1, 2, 5):
                splitter, parts = r.splitter(), []
                for i in range(0, len(body), size):
                    parts += splitter.push(body[i:i + size])
                parts += splitter.finish()
                thought = "".join(t for k, t in parts if k == "reasoning")
                assert (thought or None, "".join(t for k, t in parts if k == "content")) == r.split(body)


def test_template_kwargs_rules():
    assert template_kwargs("<think>")["enable_thinking"] is True
    assert template_kwargs("plain")["enable_thinking"] is False
    assert template_kwargs("plain", reasoning="on")["enable_thinking"] is True
    assert template_kwargs("<think>", reasoning="off")["enable_thinking"] is False
    assert template_kwargs("<think>", reasoning="off", request={"enable_thinking": True})["enable_thinking"] is True
    assert template_kwargs("<think>", reasoning_effort="none")["enable_thinking"] is False
    assert template_kwargs("x", reasoning_effort="low")["reasoning_effort"] == "low"
    with pytest.raises(ValueError, match="enable_thinking"):
        template_kwargs("x", request={"enable_thinking": "true"})


def test_config_keys(tmp_path, tiny_model_path):
    text = yaml.safe_dump({"models": [{"model": str(tiny_model_path), "reasoning": "off",
                                       "reasoning_format": "none", "chat_template_kwargs": {"a": 1}}]})
    text = text.replace("reasoning: 'off'", "reasoning: off")      # YAML's bare off is a boolean
    entry = parse_config(yaml.safe_load(text), None, tmp_path).models[0]
    assert (entry.reasoning, entry.reasoning_format, dict(entry.chat_template_kwargs)) == ("off", "none", {"a": 1})
    for bad in ({"reasoning": "maybe"}, {"reasoning_format": "r1"}, {"chat_template_kwargs": {"enable_thinking": 1}}):
        with pytest.raises(Exception, match=next(iter(bad))):
            parse_config({"models": [{"model": str(tiny_model_path), **bad}]}, None, tmp_path)


def test_library_chat_completion(tiny_model_path):
    import llamacore

    llm = llamacore.Llama(str(tiny_model_path), n_ctx=256, n_threads=N_THREADS, chat_template=THINK_TEMPLATE,
                          verbose=False)
    kwargs = {"grammar": OPEN, "max_tokens": 40, "chat_template_kwargs": {"enable_thinking": True}}
    message = llm.create_chat_completion(USER, **kwargs)["choices"][0]["message"]
    assert message["content"] == f"{THOUGHT}</think>{ANSWER}"        # default none, as llama-cpp-python
    message = llm.create_chat_completion(USER, reasoning_format="deepseek", **kwargs)["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)
    chunks = list(llm.create_chat_completion(USER, reasoning_format="deepseek", stream=True, **kwargs))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert (joined(deltas, "reasoning_content"), joined(deltas, "content")) == (THOUGHT, ANSWER)
    with pytest.raises(ValueError, match="reasoning_format"):
        llm.create_chat_completion(USER, reasoning_format="r1")
