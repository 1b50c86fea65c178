"""Tests for llamacore.chat.templates: real templates render exactly, the sandbox holds, fallbacks match."""

import json
from datetime import datetime

import pytest
from helpers import REPO_ROOT

from llamacore.chat.templates import (
    TEMPLATES,
    ChatTemplateError,
    get_template,
    render_chat,
    resolve_template,
)

TEMPLATE_DIR = REPO_ROOT / "vendor/llama.cpp/models/templates"

CHAT = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "How are you?"},
]
NO_SYSTEM = CHAT[1:]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo actuelle",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def real_template(name: str) -> str:
    path = TEMPLATE_DIR / name
    if not path.is_file():
        pytest.skip(f"llama.cpp template {path} not found (vendor/llama.cpp not extracted)")
    return path.read_text(encoding="utf-8")


# --- real templates from vendor/llama.cpp/models/templates --------------------


def test_qwen25_chatml():
    out = render_chat(real_template("Qwen-Qwen2.5-7B-Instruct.jinja"), CHAT)
    assert out == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen25_tools_use_hf_tojson():
    out = render_chat(real_template("Qwen-Qwen2.5-7B-Instruct.jinja"), NO_SYSTEM[:1], tools=[WEATHER_TOOL])
    # HF's tojson: ", "/": " separators, no HTML escaping, non-ASCII kept.
    tool_json = (
        '{"type": "function", "function": {"name": "get_weather", "description": "Météo actuelle", '
        '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}'
    )
    assert out == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n"
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + tool_json
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_llama31():
    template = real_template("meta-llama-Llama-3.1-8B-Instruct.jinja")
    out = render_chat(template, CHAT, bos_token="<|begin_of_text|>")
    today = datetime.now().strftime("%d %b %Y")         # the template reads date_string, given as today
    assert out == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: {today}\n\n"
        "You are helpful.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_llama31_tools_and_extra_variables():
    out = render_chat(
        real_template("meta-llama-Llama-3.1-8B-Instruct.jinja"),
        NO_SYSTEM[:1],
        tools=[WEATHER_TOOL],
        date_string="01 Jan 2025",
    )
    assert out == (
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 01 Jan 2025\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call "
        "with its proper arguments that best answers the given prompt.\n\n"
        'Respond in the format {"name": function name, '
        '"parameters": dictionary of argument name and its value}.'
        "Do not use variables.\n\n"
        + json.dumps(WEATHER_TOOL, indent=4, ensure_ascii=False)
        + "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_mistral_nemo_puts_system_in_last_user_turn():
    template = real_template("mistralai-Mistral-Nemo-Instruct-2407.jinja")
    out = render_chat(template, CHAT, bos_token="<s>", eos_token="</s>")
    assert out == "<s>[INST]Hi[/INST]Hello!</s>[INST]You are helpful.\n\nHow are you?[/INST]"


def test_mistral_nemo_raise_exception_on_non_alternating_roles():
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(ChatTemplateError, match="conversation roles must alternate"):
        render_chat(real_template("mistralai-Mistral-Nemo-Instruct-2407.jinja"), bad)


def test_gemma2():
    out = render_chat(real_template("google-gemma-2-2b-it.jinja"), NO_SYSTEM, bos_token="<bos>")
    assert out == (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nHow are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gemma2_rejects_system_via_raise_exception():
    with pytest.raises(ChatTemplateError, match="^System role not supported$"):
        render_chat(real_template("google-gemma-2-2b-it.jinja"), CHAT)


def test_phi35():
    template = real_template("microsoft-Phi-3.5-mini-instruct.jinja")
    expected = (
        "<|system|>\nYou are helpful.<|end|>\n"
        "<|user|>\nHi<|end|>\n"
        "<|assistant|>\nHello!<|end|>\n"
        "<|user|>\nHow are you?<|end|>\n"
    )
    assert render_chat(template, CHAT) == expected + "<|assistant|>\n"
    assert render_chat(template, CHAT, add_generation_prompt=False, eos_token="<|endoftext|>") == (
        expected + "<|endoftext|>"
    )


def test_deepseek_r1_distill_extra_kwargs():
    template = real_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    head = (
        "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>"
        "<｜User｜>How are you?<｜Assistant｜><think>\n"
    )
    bos = "<｜begin▁of▁sentence｜>"
    assert render_chat(template, CHAT, bos_token=bos, enable_thinking=True) == head
    assert render_chat(template, CHAT, bos_token=bos, enable_thinking=False) == head + "</think>"


def test_content_parts_are_flattened():
    parts = [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]
    messages = [{"role": "user", "content": parts}]
    out = render_chat(real_template("Qwen-Qwen2.5-7B-Instruct.jinja"), messages, add_generation_prompt=False)
    assert out.endswith("<|im_start|>user\nHi\nthere<|im_end|>\n")
    assert messages[0]["content"] is parts  # caller's messages are not mutated


def test_image_part_without_a_projector_rejected():
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(ChatTemplateError, match="no vision projector"):
        render_chat(TEMPLATES["chatml"], messages)


def test_other_content_parts_rejected():
    messages = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}]
    with pytest.raises(ChatTemplateError, match="input_audio"):
        render_chat(TEMPLATES["chatml"], messages)


def test_image_parts_become_the_marker_without_newlines():
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": "u"},
                                             {"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}]
    assert "a<M>b\nc" in render_chat(TEMPLATES["chatml"], messages, media_marker="<M>")


# --- jinja environment behaviour ----------------------------------------------


def test_raise_exception_is_chat_template_error():
    with pytest.raises(ChatTemplateError, match="^custom failure$") as info:
        render_chat("{{ raise_exception('custom failure') }}", [])
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__init__.__globals__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages.append(1) }}",
        "{% set d = {} %}{{ d.update({'a': 1}) }}",
    ],
)
def test_sandbox_blocks_escapes(template):
    with pytest.raises(ChatTemplateError, match="unsafe"):
        render_chat(template, [{"role": "user", "content": "x"}])


def test_syntax_error_is_chat_template_error():
    with pytest.raises(ChatTemplateError, match="invalid chat template"):
        render_chat("{% if %}", [])


def test_render_type_error_is_chat_template_error():
    with pytest.raises(ChatTemplateError, match="TypeError"):
        render_chat("{{ 'a' + messages[0].content }}", [{"role": "user", "content": 5}])


def test_tojson_matches_hf():
    value = {"b": "é<&>'", "a": [1, None, True]}
    assert render_chat("{{ v | tojson }}", [], v=value) == '{"b": "é<&>\'", "a": [1, null, true]}'
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    assert render_chat("{{ v | tojson(indent=2) }}", [], v=value) == pretty


def test_strftime_now_and_whitespace_options():
    template = "{% for m in messages %}\n  {{ m.role }}\n{% endfor %}{{ strftime_now('%Y') | length }}"
    assert render_chat(template, NO_SYSTEM[:2]) == "  user\n  assistant\n4"


def test_loopcontrols_and_generation_tag():
    template = (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    )
    assert render_chat(template, NO_SYSTEM) == "[Hi][Hello!]"


def test_variables_passed():
    template = (
        "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|"
        "{{ tools is none }}|{{ messages | length }}"
    )
    assert render_chat(template, CHAT, bos_token="<s>", eos_token="</s>") == "<s>|</s>|True|True|4"


# --- named fallbacks ------------------------------------------------------------

FALLBACK_EXPECTED = {
    "chatml": (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
    "llama-2": (
        "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
        "<s>[INST] How are you? [/INST]"
    ),
    "llama-3": (
        "<s><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "mistral-instruct": "<s>[INST] You are helpful.\n\nHi [/INST]Hello!</s>[INST] How are you? [/INST]",
    "gemma": (
        "<s><start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n"
    ),
    "phi-3": (
        "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
        "<|user|>\nHow are you?<|end|>\n<|assistant|>\n"
    ),
    "zephyr": (
        "<|system|>\nYou are helpful.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
        "<|user|>\nHow are you?</s>\n<|assistant|>\n"
    ),
    "vicuna": "You are helpful. USER: Hi ASSISTANT: Hello!</s>USER: How are you? ASSISTANT:",
    "alpaca": (
        "You are helpful.\n\n### Instruction:\nHi\n\n### Response:\nHello!\n\n"
        "### Instruction:\nHow are you?\n\n### Response:\n"
    ),
    "command-r": (      # llama.cpp's LLM_CHAT_TEMPLATE_COMMAND_R layout (src/llama-chat.cpp)
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are helpful.<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>How are you?<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    ),
    "llava-1-5": (      # llama-cpp-python's Llava15ChatHandler layout
        "You are helpful.\nUSER: Hi\nASSISTANT: Hello!</s>\nUSER: How are you?\nASSISTANT: "
    ),
}


def test_fallback_set_is_complete():
    assert set(TEMPLATES) == set(FALLBACK_EXPECTED)


@pytest.mark.parametrize("name", sorted(FALLBACK_EXPECTED))
def test_fallback_renders_canonical_format(name):
    assert render_chat(get_template(name), CHAT, bos_token="<s>", eos_token="</s>") == FALLBACK_EXPECTED[name]


VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
ALPACA_SYSTEM = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request."
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("chatml", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"),
        ("llama-2", "[INST] Hi [/INST] Hello! "),
        ("mistral-instruct", "[INST] Hi [/INST]Hello!"),
        ("gemma", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"),
        ("vicuna", VICUNA_SYSTEM + " USER: Hi ASSISTANT: Hello!"),
        ("alpaca", ALPACA_SYSTEM + "\n\n### Instruction:\nHi\n\n### Response:\nHello!\n\n"),
    ],
)
def test_fallback_without_system_or_generation_prompt(name, expected):
    assert render_chat(get_template(name), NO_SYSTEM[:2], add_generation_prompt=False) == expected


def test_get_template_unknown_name():
    with pytest.raises(ValueError, match="unknown chat format 'nope'.*chatml"):
        get_template("nope")


def test_resolve_template_precedence():
    assert resolve_template("llama-3", "EXPLICIT", "GGUF") == "EXPLICIT"
    assert resolve_template("llama-3", None, "GGUF") == TEMPLATES["llama-3"]
    assert resolve_template(None, "", "GGUF") == "GGUF"
    assert resolve_template(None, None, None) == TEMPLATES["chatml"]
    assert resolve_template("", "", "") == TEMPLATES["chatml"]
    with pytest.raises(ValueError):
        resolve_template("nope", None, "GGUF")


def test_null_content_renders_as_empty_text():
    # OpenAI clients send content: null on assistant messages that carry tool_calls.
    out = render_chat("{% for m in messages %}[{{ m.content }}]{% endfor %}",
                      [{"role": "assistant", "content": None}])
    assert out == "[]"
