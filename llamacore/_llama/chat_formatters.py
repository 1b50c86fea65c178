"""llama-cpp-python's chat formatters: functions from messages to a prompt (`ChatFormatterResponse`).

The named `format_*` functions write the prompt text llama-cpp-python 0.3.x writes for the same
messages, quirks included (they are what code moving over from it was tuned against): most add a
system block even when there is no system message, several drop roles they have no name for, and
`format_open_orca` and `format_intel` ignore the conversation's system message. For a model's own
Jinja template, use `Jinja2ChatFormatter` or `hf_tokenizer_config_to_chat_formatter`
(llamacore._llama.chat_jinja, re-exported here).

llamacore.llama_chat_format registers each of them under its chat_format name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llamacore._llama.chat_jinja import (
    ChatFormatter,
    ChatFormatterResponse,
    Jinja2ChatFormatter,
    Messages,
    hf_autotokenizer_to_chat_formatter,
    hf_tokenizer_config_to_chat_formatter,
)

__all__ = [
    "FORMATTERS", "ChatFormatter", "ChatFormatterResponse", "Jinja2ChatFormatter",
    "hf_autotokenizer_to_chat_formatter", "hf_tokenizer_config_to_chat_formatter",
    "format_alpaca", "format_baichuan", "format_baichuan2", "format_chatglm3", "format_chatml", "format_gemma",
    "format_intel", "format_llama2", "format_llama3", "format_mistral_instruct", "format_mistrallite",
    "format_oasst_llama", "format_open_orca", "format_openbuddy", "format_openchat", "format_phind",
    "format_pygmalion", "format_qwen", "format_redpajama_incite", "format_saiga", "format_snoozy",
    "format_vicuna", "format_zephyr",
]

log = logging.getLogger(__name__)


# -- the named formats ---------------------------------------------------------------------------
# A conversation becomes `turns`: (role label, text or None) for each message whose role the format
# names, in order, text None unless it is a non-empty string; an open turn (text None) for the
# assistant usually ends it. The layouts join a head (system block) and the turns.

Turns = list[tuple[str, str | None]]
FORMATTERS: dict[str, ChatFormatter] = {}


def _named(name: str) -> Callable[[Callable[..., ChatFormatterResponse]], Callable[..., ChatFormatterResponse]]:
    def add(fn: Callable[..., ChatFormatterResponse]) -> Callable[..., ChatFormatterResponse]:
        FORMATTERS[name] = fn
        return fn
    return add


def _system(messages: Messages) -> str:
    """The first system message's text ("" when none)."""
    for m in messages:
        if m.get("role") == "system":
            content = m.get("content") or ""
            if isinstance(content, list):
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping))
            return str(content)
    return ""


def _turns(messages: Messages, labels: Mapping[str, str], open_role: str | None = "assistant") -> Turns:
    turns: Turns = []
    for m in messages:
        label = labels.get(m.get("role", ""))
        if label is not None:
            content = m.get("content")
            turns.append((label, content if isinstance(content, str) else None))
    if open_role is not None:
        turns.append((labels[open_role], None))
    return turns


def _colon(head: str, turns: Turns, seps: Sequence[str], open_mark: str = ":") -> str:
    """`head`, then "label: text" ended by the separators in turn; an open turn is label + open_mark."""
    out = head + seps[0]
    for i, (label, text) in enumerate(turns):
        out += f"{label}: {text}{seps[i % len(seps)]}" if text else label + open_mark
    return out


def _plain(head: str, turns: Turns, sep: str) -> str:
    """`head`, then label + text + sep per turn; an open turn is its label alone."""
    return head + "".join(label + text + sep if text else label for label, text in turns)


def _lines(head: str, turns: Turns, sep: str) -> str:
    """ChatML-like: head + sep on its own line (when there is a head), then label, newline, text, sep."""
    out = head + sep + "\n" if head else ""
    return out + "".join(f"{label}\n{text}{sep}\n" if text else label + "\n" for label, text in turns)


_USER_ASSISTANT = ("user", "assistant")


def _labels(user: str, assistant: str) -> dict[str, str]:
    return dict(zip(_USER_ASSISTANT, (user, assistant)))


@_named("llama-2")
def format_llama2(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    system = _system(messages)
    head = f"[INST] <<SYS>>\n{system}\n<</SYS>>" if system else ""
    out = head + " "
    for i, (label, text) in enumerate(_turns(messages, _labels("<s>[INST]", "[/INST]"), None)):
        end = "</s>" if i % 2 else " "
        if i == 0 and head:                 # the first turn's text follows the system block
            out += (text or "") + end
        else:
            out += label + text + " " + end if text else label + " "
    return ChatFormatterResponse(prompt=out + "[/INST]")


@_named("llama-3")
def format_llama3(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    labels = {role: f"<|start_header_id|>{role}<|end_header_id|>\n\n" for role in ("system", *_USER_ASSISTANT)}
    return ChatFormatterResponse(prompt=_plain("", _turns(messages, labels), "<|eot_id|>"), stop="<|eot_id|>")


@_named("alpaca")
def format_alpaca(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("### Instruction", "### Response"), None)
    return ChatFormatterResponse(prompt=_colon(_system(messages), turns, ("\n\n", "</s>")))


def _chatml_like(messages: Messages, system: str, sep: str = "<|im_end|>") -> str:
    return _lines(f"<|im_start|>system\n{system}",
                  _turns(messages, _labels("<|im_start|>user", "<|im_start|>assistant")), sep)


@_named("qwen")
def format_qwen(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    prompt = _chatml_like(messages, _system(messages) or "You are a helpful assistant.")
    return ChatFormatterResponse(prompt=prompt, stop="<|endoftext|>")


VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. "
                 "The assistant gives helpful, detailed, and polite answers to the user's questions.")


@_named("vicuna")
def format_vicuna(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("USER", "ASSISTANT"))
    return ChatFormatterResponse(prompt=_colon(VICUNA_SYSTEM, turns, (" ", "</s>")))


@_named("oasst_llama")
def format_oasst_llama(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    head = f"[INST] <<SYS>>\n{_system(messages)}\n<</SYS>>\n\n"
    turns = _turns(messages, _labels("<|prompter|>", "<|assistant|>"))
    return ChatFormatterResponse(prompt=_plain(head, turns, "</s>"))


@_named("baichuan-2")
def format_baichuan2(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("<reserved_106>", "<reserved_107>"))
    return ChatFormatterResponse(prompt=_plain(_system(messages), turns, ""))


@_named("baichuan")
def format_baichuan(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("<reserved_102>", "<reserved_103>"))
    return ChatFormatterResponse(prompt=_plain(_system(messages), turns, ""))


OPENBUDDY_SYSTEM = (
    "You are a helpful, respectful and honest INTP-T AI Assistant named Buddy. You are talking to a human User.\n"
    "Always answer as helpfully and logically as possible, while being safe. Your answers should not include any "
    "harmful, political, religious, unethical, racist, sexist, toxic, dangerous, or illegal content. Please ensure "
    "that your responses are socially unbiased and positive in nature.\n"
    "If a question does not make any sense, or is not factually coherent, explain why instead of answering "
    "something not correct. If you don't know the answer to a question, please don't share false information.\n"
    "You can speak fluently in many languages, for example: English, Chinese.\n"
    "You cannot access the internet, but you have vast knowledge, cutoff: 2021-09.\n"
    "You are trained by OpenBuddy team, (https://openbuddy.ai, https://github.com/OpenBuddy/OpenBuddy), you are "
    "based on LLaMA and Falcon transformers model, not related to GPT or OpenAI.\n\n"
)


@_named("openbuddy")
def format_openbuddy(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("User", "Assistant"))
    return ChatFormatterResponse(prompt=_colon(OPENBUDDY_SYSTEM, turns, ("\n",)))


@_named("redpajama-incite")
def format_redpajama_incite(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    prompt = _colon(_system(messages), _turns(messages, _labels("<human>", "<bot>")), ("\n",))
    return ChatFormatterResponse(prompt=prompt, stop="<human>")


SNOOZY_SYSTEM = ("The prompt below is a question to answer, a task to complete, or a conversation to respond to; "
                 "decide which and write an appropriate response.")


@_named("snoozy")
def format_snoozy(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("### Prompt", "### Response"))
    return ChatFormatterResponse(prompt=_colon(_system(messages) or SNOOZY_SYSTEM, turns, ("\n",)), stop="###")


@_named("phind")
def format_phind(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    head = "### System Prompt\nYou are an intelligent programming assistant."
    turns = _turns(messages, _labels("### User Message", "### Assistant"))
    return ChatFormatterResponse(prompt=_colon(head, turns, ("\n\n",)))


@_named("intel")
def format_intel(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    # llama-cpp-python never fills this head in: the placeholder stays in the prompt
    turns = _turns(messages, _labels("### User:", "### Assistant:"))
    return ChatFormatterResponse(prompt=_colon("### System:\n{system_message}", turns, ("\n",)))


OPEN_ORCA_SYSTEM = (
    "You are a helpful assistant. Please answer truthfully and write out your thinking step by step to be sure you "
    "get the right answer. If you make a mistake or encounter an error in your thinking, say so out loud and "
    "attempt to correct it. If you don't know or aren't sure about something, say so clearly. You will act as a "
    "professional logician, mathematician, and physicist. You will also act as the most appropriate type of expert "
    "to answer any particular question or solve the relevant problem; state which expert type your are, if so. Also "
    "think of any particular named expert that would be ideal to answer the relevant question or solve the relevant "
    "problem; name and act as them, if appropriate."
)


@_named("open-orca")
def format_open_orca(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    # llama-cpp-python matches the roles "User" and "Assistant" literally, so OpenAI's lower-case
    # roles are dropped and the prompt is the system text and an open assistant turn
    turns = _turns(messages, {"User": "User", "Assistant": "Assistant"}, "Assistant")
    return ChatFormatterResponse(prompt=_colon(OPEN_ORCA_SYSTEM, turns, ("<|end_of_turn|>\n",), ": "), stop="User")


@_named("mistrallite")
def format_mistrallite(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    head = f"<|system|>{_system(messages)}</s>"
    turns = _turns(messages, _labels("<|prompter|>", "</s>\n<|assistant|>"))
    return ChatFormatterResponse(prompt=_plain(head, turns, " "))


@_named("zephyr")
def format_zephyr(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("<|user|>\n", "<|assistant|>\n"))
    return ChatFormatterResponse(prompt=_lines(f"<|system|>\n{_system(messages)}", turns, "</s>"), stop="</s>")


@_named("pygmalion")
def format_pygmalion(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("<|user|>", "<|model|>"))
    return ChatFormatterResponse(prompt=_lines(f"<|system|>{_system(messages)}", turns, "\n"), stop="\n")


@_named("chatml")
def format_chatml(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    return ChatFormatterResponse(prompt=_chatml_like(messages, _system(messages)), stop="<|im_end|>")


@_named("mistral-instruct")
def format_mistral_instruct(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    prompt = ""
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, str):
            prompt += "[INST] " + content
        elif m.get("role") == "assistant" and content is not None:
            prompt += f" [/INST]{content}</s>"
    return ChatFormatterResponse(prompt=prompt + " [/INST]", stop="</s>")


@_named("chatglm3")
def format_chatglm3(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("<|user|>", "<|assistant|>"))
    prompt = f"<|system|>\n{_system(messages)}" + "".join(f"{label}\n {text}" if text else label
                                                          for label, text in turns)
    return ChatFormatterResponse(prompt=prompt, stop="</s>")


@_named("openchat")
def format_openchat(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    turns = _turns(messages, _labels("GPT4 Correct User: ", "<|end_of_turn|>GPT4 Correct Assistant: "))
    head = f"{_system(messages)}<|end_of_turn|>"
    return ChatFormatterResponse(prompt=_lines(head, turns, "<|end_of_turn|>"), stop="<|end_of_turn|>")


@_named("saiga")
def format_saiga(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    # the assistant's own turns are named "bot" here, so OpenAI "assistant" messages are dropped
    turns = _turns(messages, {"user": "user", "bot": "bot", "system": "system"}, None)
    body = "".join(f"<s>{label}\n{text}</s>" if text else f"<s>{label}\n" for label, text in turns)
    return ChatFormatterResponse(prompt=(body + "<s>bot").strip())


@_named("gemma")
def format_gemma(messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
    if _system(messages):
        log.debug("gemma chat format: system messages are dropped (Gemma has no system role)")
    turns = _turns(messages, _labels("<start_of_turn>user\n", "<start_of_turn>model\n"))
    return ChatFormatterResponse(prompt=_plain("", turns, "<end_of_turn>\n"), stop="<end_of_turn>\n")
