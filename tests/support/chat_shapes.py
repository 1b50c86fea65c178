"""Conversation shapes rendered through every chat template llama.cpp ships, here and in llama-server
(tests/llamacore/chat/test_template_parity.py; record_llama_server_prompts.py records llama-server's)."""

from __future__ import annotations

from typing import Any

from helpers import REPO_ROOT

TEMPLATES = REPO_ROOT / "vendor" / "llama.cpp" / "models" / "templates"
PROMPTS = REPO_ROOT / "tests" / "llamacore" / "chat" / "llama_server_prompts.json"
MODEL = REPO_ROOT / "llamaserve" / "demo" / "stories260K.gguf"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a timezone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}


def _call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


ASK = {"role": "user", "content": "What is the weather in Paris?"}
SHAPES: dict[str, dict[str, Any]] = {
    "plain": {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]},
    "multi_turn": {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                {"role": "user", "content": "How are you?"}]},
    "tools_offered": {"messages": [ASK], "tools": [WEATHER, TIME]},
    "tool_round_trip": {"messages": [
        ASK, {"role": "assistant", "content": "", "tool_calls": [_call("call_1", "get_weather", '{"city": "Paris"}')]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}], "tools": [WEATHER, TIME]},
    "parallel_calls": {"messages": [
        {"role": "user", "content": "Weather in Paris and the time in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            _call("call_1", "get_weather", '{"city": "Paris", "days": 2}'),
            _call("call_2", "get_time", '{"tz": "Asia/Tokyo"}')]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "09:00"}], "tools": [WEATHER, TIME]},
    "reasoning_in_history": {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "And 3+3?"}]},
    "thinking_off": {"messages": [{"role": "user", "content": "Hello"}],
                     "chat_template_kwargs": {"enable_thinking": False}},
}
