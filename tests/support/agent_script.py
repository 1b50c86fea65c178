"""An agent's conversation scripted into generated models (scripted_model.py), one per chat-template family,
served by one llamaserve process: the tool-call tests of every API route talk to these models.

The conversation: a user asks for the weather and the time; the model calls get_weather, then get_time,
then answers with reasoning. Each answer is the text llama.cpp's template itself renders for that
assistant turn, written by the model at the position after the prompt the server is expected to render,
so a turn comes out right only when the server rendered exactly that prompt.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import N_THREADS, REPO_ROOT
from scripted_model import Script, write_scripted_model
from server import ServerProcess

from llamacore._core import ChatParser, Model
from llamacore.chat import native
from llamacore.chat.answer import AnswerReader
from llamacore.chat.prompt import chat_prompt

TEMPLATES = REPO_ROOT / "vendor" / "llama.cpp" / "models" / "templates"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a timezone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TOOLS = [WEATHER, TIME]
QUESTION = "What is the weather in Paris, and the time there?"
CALLS = [("get_weather", {"city": "Paris"}, "Sunny, 21 C"), ("get_time", {"tz": "Europe/Paris"}, "09:00")]
FINAL = "It is sunny and 21 C in Paris, and it is 9 in the morning."
REASONING = "Both tools have answered."
PLACEHOLDER_ID = "call_" + "0" * 24                # the length of the ids the server gives calls
# end-of-generation tokens of these families that their templates write as text: the scripted model
# ends its answer with its own end token there, as the real model does with these
END_TOKENS = ("<｜end▁of▁sentence｜>", "[e~[", "<|return|>", "<|call|>", "<|im_end|>")

@dataclass(frozen=True)
class Conversation:
    """What one scripted model is asked and answers: under `template`, `question` with `tools` offered,
    a call for each of `calls` (name, arguments, the result sent back) while its tool is offered, then `final`."""

    template: str                           # a file stem in llama.cpp's models/templates
    tools: list[dict] = field(default_factory=lambda: TOOLS)
    question: str = QUESTION
    calls: list[tuple[str, dict, str]] = field(default_factory=lambda: CALLS)
    final: str = FINAL


FAMILIES: dict[str, Conversation] = {
    "qwen3": Conversation("Qwen-Qwen3-0.6B"), "gpt-oss": Conversation("openai-gpt-oss-120b"),
    "llama3": Conversation("meta-llama-Llama-3.3-70B-Instruct"),
    "deepseek-v3": Conversation("deepseek-ai-DeepSeek-V3.1"), "glm": Conversation("GLM-4.6"),
    "qwen3-coder": Conversation("Qwen3-Coder"), "kimi-k2": Conversation("moonshotai-Kimi-K2"),
    "minimax-m2": Conversation("MiniMax-M2"),
    # tool_choice naming get_weather offers that tool alone: a prompt of its own
    "qwen3-weather": Conversation("Qwen-Qwen3-0.6B", [WEATHER]),
}


def assistant_call(call_id: str, name: str, args: dict) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _answer(templates, messages: list[dict], reply: dict, tools: list[dict], rendered) -> tuple[str, str]:
    """The text the template renders for `reply` after `messages`, up to its end-of-turn marker, and the
    reasoning it holds. A generation prompt that opens a thinking block the history leaves out (MiniMax
    M2, thinking forced on) gets a short thought closed by the template's end tag before that text."""
    before = native.render(templates, messages, tools=tools).prompt
    after = native.render(templates, [*messages, reply], tools=tools, add_generation_prompt=False).prompt
    reasoning = REASONING
    if not after.startswith(before):
        common = len(os.path.commonprefix([before, after]))
        opened = before[common:].strip()
        assert opened and opened == rendered.params.thinking_start_tag.strip(), (before[common:], after[common:])
        reasoning = "I will look it up." if reply.get("tool_calls") else REASONING
        before, after = before[:common], before[:common] + (
            f"{reasoning}\n{rendered.params.thinking_end_tags[0]}\n\n" + after[common:])
    text = after[len(before):]
    cut = min([text.find(s) for s in (*rendered.stops, *END_TOKENS) if s in text] or [len(text)])
    return text[:cut], reasoning if reasoning in text[:cut] else ""


def script_family(alias: str, conversation: Conversation, directory: Path) -> tuple[Path, list[tuple[str, str]]]:
    """Write the alias's model: each answer at the position after the prompt expected before it, and
    return it with the answers (text, reasoning). A call's id is the one its format carries (Kimi's
    functions.NAME:0), else one of the server's length."""
    template = (TEMPLATES / f"{conversation.template}.jinja").read_text()
    tools = conversation.tools
    vocab = Model(str(write_scripted_model(directory / f"{alias}-vocab.gguf")))
    templates = native.for_model(vocab, template)
    messages: list[dict] = [{"role": "user", "content": conversation.question}]
    script, answers = Script(), []
    offered = {t["function"]["name"] for t in tools}
    for name, args, result in [*conversation.calls, (None, None, None)]:
        if name is not None and name not in offered:      # a conversation with fewer tools ends here
            break
        reply = (assistant_call(PLACEHOLDER_ID, name, args) if name else
                 {"role": "assistant", "content": conversation.final, "reasoning_content": REASONING})
        rendered = chat_prompt(vocab, template, messages, tools)
        answers.append(_answer(templates, messages, reply, tools, rendered))
        script.answer(len(rendered.tokens), answers[-1][0])
        if name:
            reader = AnswerReader(ChatParser(rendered.params))
            reader.push(answers[-1][0])
            reader.finish()
            call_id = reader.message["tool_calls"][0]["id"] or PLACEHOLDER_ID
            messages = [*messages, assistant_call(call_id, name, args),
                        {"role": "tool", "tool_call_id": call_id, "content": result}]
    return write_scripted_model(directory / f"{alias}.gguf", script), answers


def scripted_server(directory: Path, conversations: dict[str, Conversation] | None = None
                    ) -> tuple[ServerProcess, dict[str, list[tuple[str, str]]]]:
    """A started server with a scripted model for each conversation (FAMILIES by default) under its
    alias, and each alias's answers."""
    models, answers = [], {}
    for alias, conversation in (conversations or FAMILIES).items():
        path, answers[alias] = script_family(alias, conversation, directory)
        template = TEMPLATES / f"{conversation.template}.jinja"
        models.append({"alias": alias, "model": str(path), "chat_template_file": str(template)})
    config = {"defaults": {"n_ctx": 4096, "n_threads": N_THREADS}, "models": models}
    return ServerProcess(config, directory).start(), answers


__all__ = ["CALLS", "FAMILIES", "FINAL", "QUESTION", "REASONING", "TIME", "TOOLS", "WEATHER", "Conversation",
           "assistant_call", "script_family", "scripted_server"]
