"""OpenAI's chat request shapes (messages, content parts, tools, functions) as TypedDicts, under the
names of llama-cpp-python's `llama_types`; `llamacore.llama_types` re-exports them with the
response shapes, so `from llama_cpp.llama_types import ChatCompletionRequestUserMessage` style
imports work here too."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, Union

JsonType = Union[None, int, str, bool, list[Any], dict[str, Any]]


class ChatCompletionFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: dict[str, JsonType]


ChatCompletionFunctions = ChatCompletionFunction


class ChatCompletionFunctionCallOption(TypedDict):
    name: str


class ChatCompletionRequestResponseFormat(TypedDict):
    type: Literal["text", "json_object"]
    schema: NotRequired[JsonType]


class ChatCompletionRequestMessageContentPartText(TypedDict):
    type: Literal["text"]
    text: str


class ChatCompletionRequestMessageContentPartImageImageUrl(TypedDict):
    url: str
    detail: NotRequired[Literal["auto", "low", "high"]]


class ChatCompletionRequestMessageContentPartImage(TypedDict):
    type: Literal["image_url"]
    image_url: str | ChatCompletionRequestMessageContentPartImageImageUrl


ChatCompletionRequestMessageContentPart = Union[ChatCompletionRequestMessageContentPartText,
                                                ChatCompletionRequestMessageContentPartImage]


class ChatCompletionRequestSystemMessage(TypedDict):
    role: Literal["system"]
    content: str | None


class ChatCompletionRequestUserMessage(TypedDict):
    role: Literal["user"]
    content: str | list[ChatCompletionRequestMessageContentPart] | None


class ChatCompletionMessageToolCallFunction(TypedDict):
    name: str
    arguments: str


class ChatCompletionRequestAssistantMessageFunctionCall(TypedDict):
    name: str
    arguments: str


class ChatCompletionRequestAssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[str]
    tool_calls: NotRequired[list[Any]]            # ChatCompletionMessageToolCall (llama_types)
    function_call: NotRequired[ChatCompletionRequestAssistantMessageFunctionCall]   # deprecated by OpenAI


class ChatCompletionRequestToolMessage(TypedDict):
    role: Literal["tool"]
    content: str | None
    tool_call_id: str


class ChatCompletionRequestFunctionMessage(TypedDict):
    role: Literal["function"]
    content: str | None
    name: str


ChatCompletionRequestMessage = Union[ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage,
                                     ChatCompletionRequestAssistantMessage, ChatCompletionRequestToolMessage,
                                     ChatCompletionRequestFunctionMessage]


class ChatCompletionRequestFunctionCallOption(TypedDict):
    name: str


ChatCompletionRequestFunctionCall = Union[Literal["none", "auto"], ChatCompletionRequestFunctionCallOption]
ChatCompletionFunctionParameters = dict[str, JsonType]


class ChatCompletionToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: ChatCompletionFunctionParameters


class ChatCompletionTool(TypedDict):
    type: Literal["function"]
    function: ChatCompletionToolFunction


class ChatCompletionNamedToolChoiceFunction(TypedDict):
    name: str


class ChatCompletionNamedToolChoice(TypedDict):
    type: Literal["function"]
    function: ChatCompletionNamedToolChoiceFunction


ChatCompletionToolChoiceOption = Union[Literal["none", "auto", "required"], ChatCompletionNamedToolChoice]

__all__ = [
    "ChatCompletionFunction", "ChatCompletionFunctionCallOption", "ChatCompletionFunctionParameters",
    "ChatCompletionFunctions", "ChatCompletionMessageToolCallFunction", "ChatCompletionNamedToolChoice",
    "ChatCompletionNamedToolChoiceFunction", "ChatCompletionRequestAssistantMessage",
    "ChatCompletionRequestAssistantMessageFunctionCall", "ChatCompletionRequestFunctionCall",
    "ChatCompletionRequestFunctionCallOption", "ChatCompletionRequestFunctionMessage", "ChatCompletionRequestMessage",
    "ChatCompletionRequestMessageContentPart", "ChatCompletionRequestMessageContentPartImage",
    "ChatCompletionRequestMessageContentPartImageImageUrl", "ChatCompletionRequestMessageContentPartText",
    "ChatCompletionRequestResponseFormat", "ChatCompletionRequestSystemMessage", "ChatCompletionRequestToolMessage",
    "ChatCompletionRequestUserMessage", "ChatCompletionTool", "ChatCompletionToolChoiceOption",
    "ChatCompletionToolFunction", "JsonType",
]
