"""OpenAI's request shapes (messages, content parts, tools) and its completion, chat, chunk and
embedding shapes as TypedDicts, under the names of llama-cpp-python's `llama_types` (so code typed
against it type-checks here); llamacore.chat.openai builds the responses."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

# -- requests: messages, content parts, tools, functions --------------------------------------

JsonType = None | int | str | bool | list[Any] | dict[str, Any]


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


ChatCompletionRequestMessageContentPart = (ChatCompletionRequestMessageContentPartText
                                           | ChatCompletionRequestMessageContentPartImage)


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


ChatCompletionRequestMessage = (ChatCompletionRequestSystemMessage | ChatCompletionRequestUserMessage
                                | ChatCompletionRequestAssistantMessage | ChatCompletionRequestToolMessage
                                | ChatCompletionRequestFunctionMessage)


class ChatCompletionRequestFunctionCallOption(TypedDict):
    name: str


ChatCompletionRequestFunctionCall = Literal["none", "auto"] | ChatCompletionRequestFunctionCallOption
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


ChatCompletionToolChoiceOption = Literal["none", "auto", "required"] | ChatCompletionNamedToolChoice


# -- responses -------------------------------------------------------------------------------


class PromptTokensDetails(TypedDict):
    cached_tokens: int


class CompletionUsage(TypedDict, total=False):
    prompt_tokens: Required[int]
    completion_tokens: Required[int]
    total_tokens: Required[int]
    prompt_tokens_details: PromptTokensDetails


class CompletionLogprobs(TypedDict):
    text_offset: list[int]
    token_logprobs: list[float | None]
    tokens: list[str]
    top_logprobs: list[dict[str, float] | None]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: str | None


class _CompletionBase(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    system_fingerprint: NotRequired[str]


class CreateCompletionResponse(_CompletionBase, total=False):
    usage: CompletionUsage


CreateCompletionStreamResponse = CreateCompletionResponse


class ChatCompletionTopLogprobToken(TypedDict):
    token: str
    logprob: float | None
    bytes: list[int] | None


class ChatCompletionLogprobToken(ChatCompletionTopLogprobToken):
    top_logprobs: list[ChatCompletionTopLogprobToken]


class ChatCompletionLogprobs(TypedDict):
    content: list[ChatCompletionLogprobToken] | None


class ChatCompletionMessageToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: dict[str, str]


class ChatCompletionMessageToolCallChunk(ChatCompletionMessageToolCall):
    index: int


class ChatCompletionResponseMessage(TypedDict, total=False):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str          # a thinking model's reasoning (llama-server's and DeepSeek's field)
    tool_calls: list[ChatCompletionMessageToolCall]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: ChatCompletionLogprobs | None
    finish_reason: str | None


class CreateChatCompletionResponse(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: CompletionUsage
    system_fingerprint: NotRequired[str]
    timings: NotRequired[dict[str, float]]     # llama-server's extension: llama.cpp timings


class ChatCompletionStreamResponseDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str
    tool_calls: list[ChatCompletionMessageToolCallChunk]


class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: ChatCompletionStreamResponseDelta
    logprobs: ChatCompletionLogprobs | None
    finish_reason: str | None


class _ChatChunkBase(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatCompletionStreamResponseChoice]
    system_fingerprint: NotRequired[str]
    timings: NotRequired[dict[str, float]]     # llama-server's extension: llama.cpp timings


class CreateChatCompletionStreamResponse(_ChatChunkBase, total=False):
    usage: CompletionUsage


class Embedding(TypedDict):
    index: int
    object: Literal["embedding"]
    embedding: Any            # list[float], or a base64 string when the server is asked for one


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: list[Embedding]
    usage: EmbeddingUsage


class ChatCompletionResponseFunctionCall(TypedDict):
    name: str
    arguments: str


class ChatCompletionMessageToolCallChunkFunction(TypedDict):
    name: str | None
    arguments: str


class ChatCompletionStreamResponseDeltaEmpty(TypedDict):
    pass


class ChatCompletionStreamResponseDeltaFunctionCall(TypedDict):
    name: str
    arguments: str


ChatCompletionMessageToolCalls = list[ChatCompletionMessageToolCall]

# llama-cpp-python's other names for the same shapes
EmbeddingData = Embedding
CompletionChunk = CreateCompletionResponse
Completion = CreateCompletionResponse
ChatCompletionMessage = ChatCompletionResponseMessage
ChatCompletionChoice = ChatCompletionResponseChoice
ChatCompletion = CreateChatCompletionResponse
ChatCompletionChunkDeltaEmpty = ChatCompletionStreamResponseDeltaEmpty
ChatCompletionChunkChoice = ChatCompletionStreamResponseChoice
ChatCompletionChunkDelta = ChatCompletionStreamResponseDelta
ChatCompletionChunk = CreateChatCompletionStreamResponse
ChatCompletionStreamResponse = CreateChatCompletionStreamResponse
ChatCompletionResponseFunction = ChatCompletionFunction
ChatCompletionFunctionCall = ChatCompletionResponseFunctionCall


__all__ = [
        "ChatCompletionFunction", "ChatCompletionFunctionCallOption", "ChatCompletionFunctionParameters",
    "ChatCompletionFunctions", "ChatCompletionMessageToolCallFunction", "ChatCompletionNamedToolChoice",
    "ChatCompletionNamedToolChoiceFunction", "ChatCompletionRequestAssistantMessage",
    "ChatCompletionRequestAssistantMessageFunctionCall", "ChatCompletionRequestFunctionCall",
    "ChatCompletionRequestFunctionCallOption", "ChatCompletionRequestFunctionMessage",
    "ChatCompletionRequestMessage", "ChatCompletionRequestMessageContentPart",
    "ChatCompletionRequestMessageContentPartImage",
    "ChatCompletionRequestMessageContentPartImageImageUrl", "ChatCompletionRequestMessageContentPartText",
    "ChatCompletionRequestResponseFormat", "ChatCompletionRequestSystemMessage",
    "ChatCompletionRequestToolMessage", "ChatCompletionRequestUserMessage", "ChatCompletionTool",
    "ChatCompletionToolChoiceOption", "ChatCompletionToolFunction", "JsonType",
    "ChatCompletionResponseFunctionCall", "ChatCompletionMessageToolCallChunkFunction",
    "ChatCompletionStreamResponseDeltaEmpty", "ChatCompletionStreamResponseDeltaFunctionCall",
    "ChatCompletionMessageToolCalls", "EmbeddingData", "CompletionChunk", "Completion", "ChatCompletionMessage",
    "ChatCompletionChoice", "ChatCompletion", "ChatCompletionChunkDeltaEmpty", "ChatCompletionChunkChoice",
    "ChatCompletionChunkDelta", "ChatCompletionChunk", "ChatCompletionStreamResponse",
    "ChatCompletionResponseFunction", "ChatCompletionFunctionCall",
    "ChatCompletionLogprobToken",
    "ChatCompletionLogprobs",
    "ChatCompletionMessageToolCall",
    "ChatCompletionMessageToolCallChunk",
    "ChatCompletionResponseChoice",
    "ChatCompletionResponseMessage",
    "ChatCompletionStreamResponseChoice",
    "ChatCompletionStreamResponseDelta",
    "ChatCompletionTopLogprobToken",
    "CompletionChoice",
    "CompletionLogprobs",
    "CompletionUsage",
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "CreateCompletionStreamResponse",
    "CreateEmbeddingResponse",
    "Embedding",
    "EmbeddingUsage",
    "PromptTokensDetails",
]
