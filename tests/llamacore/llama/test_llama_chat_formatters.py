"""llama-cpp-python's chat formatters (llamacore.llama_chat_format): the named format_* functions
write the prompts llama-cpp-python 0.3.36 writes (expected strings worked out from its source),
Jinja templates, tokenizer_config.json, and the handler registry."""

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Llama
from llamacore import llama_chat_format as lcf
from llamacore.chat.templates import ChatTemplateError

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "What is 2+2?"},
]

EXPECTED = {
    "chatml": ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
               "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
               "<|im_start|>assistant\n", "<|im_end|>"),
    "llama-2": ("[INST] <<SYS>>\nBe brief.\n<</SYS>> Hi there [/INST]Hello! </s><s>[INST]What is 2+2?  [/INST]",
                None),
    "llama-3": ("<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
    "mistral-instruct": ("[INST] Hi there [/INST]Hello!</s>[INST] What is 2+2? [/INST]", "</s>"),
    "gemma": ("<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
              "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n", "<end_of_turn>\n"),
    "vicuna": ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
               "helpful, detailed, and polite answers to the user's questions. USER: Hi there ASSISTANT: Hello!</s>"
               "USER: What is 2+2? ASSISTANT:", None),
    "alpaca": ("Be brief.\n\n### Instruction: Hi there\n\n### Response: Hello!</s>### Instruction: What is 2+2?\n\n",
               None),
    "qwen": ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
             "Hello!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>"),
    "zephyr": ("<|system|>\nBe brief.</s>\n<|user|>\n\nHi there</s>\n<|assistant|>\n\nHello!</s>\n"
               "<|user|>\n\nWhat is 2+2?</s>\n<|assistant|>\n\n", "</s>"),
}

FUNCTIONS = {
    "chatml": lcf.format_chatml, "llama-2": lcf.format_llama2, "llama-3": lcf.format_llama3,
    "mistral-instruct": lcf.format_mistral_instruct, "gemma": lcf.format_gemma, "vicuna": lcf.format_vicuna,
    "alpaca": lcf.format_alpaca, "qwen": lcf.format_qwen, "zephyr": lcf.format_zephyr,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_named_format_matches_llama_cpp_python(name):
    prompt, stop = EXPECTED[name]
    result = FUNCTIONS[name](messages=CONVERSATION)
    assert isinstance(result, lcf.ChatFormatterResponse)
    assert result.prompt == prompt
    assert result.stop == stop
    assert result.added_special is False and result.stopping_criteria is None
    assert lcf.FORMATTERS[name] is FUNCTIONS[name]


def test_chatml_without_system_keeps_an_empty_system_block():
    # llama-cpp-python's chatml writes the system block even when there is no system message
    result = lcf.format_chatml(messages=[{"role": "user", "content": "Hi"}])
    assert result.prompt == "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_every_named_format_formats_and_is_registered():
    names = {"llama-2", "llama-3", "alpaca", "qwen", "vicuna", "oasst_llama", "baichuan-2", "baichuan", "openbuddy",
             "redpajama-incite", "snoozy", "phind", "intel", "open-orca", "mistrallite", "zephyr", "pygmalion",
             "chatml", "mistral-instruct", "chatglm3", "openchat", "saiga", "gemma"}
    assert set(lcf.FORMATTERS) == names
    for name, formatter in lcf.FORMATTERS.items():
        result = formatter(messages=CONVERSATION)
        assert isinstance(result.prompt, str) and result.prompt
        assert callable(lcf.get_chat_completion_handler(name))


def test_jinja2_chat_formatter():
    formatter = lcf.Jinja2ChatFormatter(lcf.CHATML_CHAT_TEMPLATE, eos_token="<|im_end|>", bos_token="<s>")
    result = formatter(messages=CONVERSATION)
    assert result.prompt == EXPECTED["chatml"][0]
    assert result.stop == ["<|im_end|>"] and result.added_special is True and result.stopping_criteria is None

    closed = lcf.Jinja2ChatFormatter(lcf.CHATML_CHAT_TEMPLATE, "<|im_end|>", "<s>", add_generation_prompt=False)
    assert closed(messages=CONVERSATION).prompt == EXPECTED["chatml"][0].removesuffix("<|im_start|>assistant\n")

    mistral = lcf.Jinja2ChatFormatter(lcf.MISTRAL_INSTRUCT_CHAT_TEMPLATE, "</s>", "<s>")
    assert mistral(messages=CONVERSATION[1:]).prompt == ("<s>[INST] Hi there [/INST]Hello!</s> "
                                                         "[INST] What is 2+2? [/INST]")
    with pytest.raises(ValueError, match="alternate"):          # the template's raise_exception
        mistral(messages=CONVERSATION[1:2] * 2)

    tools = lcf.Jinja2ChatFormatter("{{ tools[0].function.name }}|{{ tool_choice }}|{{ extra }}", "", "")
    assert tools(messages=[], tools=[{"function": {"name": "f"}}], tool_choice="auto", extra=3).prompt == "f|auto|3"


def test_jinja2_stop_token_ids_become_stopping_criteria():
    formatter = lcf.Jinja2ChatFormatter("{{ messages[0].content }}", "</s>", "<s>", stop_token_ids=[7, 9])
    criteria = formatter(messages=[{"role": "user", "content": "x"}]).stopping_criteria
    logits = np.zeros(4, dtype=np.single)
    assert criteria is not None
    assert criteria(np.array([1, 9], dtype=np.intc), logits)
    assert not criteria(np.array([9, 1], dtype=np.intc), logits)


def test_jinja2_bad_template_fails_at_construction():
    with pytest.raises(ChatTemplateError):
        lcf.Jinja2ChatFormatter("{% for %}", "", "")


def test_hf_tokenizer_config_to_chat_formatter():
    config = {"chat_template": lcf.CHATML_CHAT_TEMPLATE, "bos_token": "<s>",
              "eos_token": {"content": "<|im_end|>", "lstrip": False}}
    formatter = lcf.hf_tokenizer_config_to_chat_formatter(config)
    result = formatter(messages=CONVERSATION)
    # llama-cpp-python appends an empty assistant message instead of asking for a generation prompt
    assert result.prompt == EXPECTED["chatml"][0] + "<|im_end|>\n"
    assert result.stop == ["<|im_end|>", "<s>"] and result.added_special is True
    without = lcf.hf_tokenizer_config_to_chat_formatter(config, add_generation_prompt=False)
    assert without(messages=CONVERSATION).prompt == EXPECTED["chatml"][0].removesuffix("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="chat_template"):
        lcf.hf_tokenizer_config_to_chat_formatter({"bos_token": "<s>", "eos_token": "</s>"})


def test_guess_chat_format_from_gguf_metadata():
    guess = lcf.guess_chat_format_from_gguf_metadata
    assert guess({"tokenizer.chat_template": lcf.CHATML_CHAT_TEMPLATE}) == "chatml"
    assert guess({"tokenizer.chat_template": lcf.MIXTRAL_INSTRUCT_CHAT_TEMPLATE}) == "mistral-instruct"
    assert guess({"tokenizer.chat_template": lcf.LLAMA3_INSTRUCT_CHAT_TEMPLATE}) == "llama-3"
    assert guess({"tokenizer.chat_template": "{{ x }}"}) is None and guess({}) is None


def test_registry():
    registry = lcf.LlamaChatCompletionHandlerRegistry()
    with pytest.raises(lcf.LlamaChatCompletionHandlerNotFoundException, match="no-such-format"):
        lcf.get_chat_completion_handler("no-such-format")

    @lcf.register_chat_format("test-echo-format")
    def echo(messages, **kwargs):
        return lcf.ChatFormatterResponse(prompt=messages[-1]["content"])

    try:
        assert echo(messages=[{"role": "user", "content": "x"}]).prompt == "x"      # returned unchanged
        registry = lcf.LlamaChatCompletionHandlerRegistry()
        assert callable(registry.get_chat_completion_handler_by_name("test-echo-format"))
        with pytest.raises(ValueError, match="already"):
            registry.register_chat_completion_handler("test-echo-format", echo)
    finally:
        registry.unregister_chat_handler("test-echo-format")
    with pytest.raises(ValueError):
        registry.unregister_chat_handler("test-echo-format")


def test_handler_completes_the_formatted_prompt(tiny_model_path):
    llm = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    handler = lcf.get_chat_completion_handler("chatml")
    out = handler(llama=llm, messages=CONVERSATION, max_tokens=6, temperature=0)
    assert out["object"] == "chat.completion"
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant"

    tokens = llm.tokenize(EXPECTED["chatml"][0].encode(), add_bos=True, special=True)
    text = llm(tokens, max_tokens=6, temperature=0, stop=["<|im_end|>"])["choices"][0]["text"]
    assert message["content"] == text
    assert out["usage"]["prompt_tokens"] == len(tokens)

    chunks = list(handler(llama=llm, messages=CONVERSATION, max_tokens=6, temperature=0, stream=True))
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == text
    with pytest.raises(ValueError, match="tool"):
        handler(llama=llm, messages=CONVERSATION, tools=[{"type": "function", "function": {"name": "f"}}],
                tool_choice={"type": "function", "function": {"name": "f"}})
