"""OpenAI's completion, chat, chunk and embedding shapes as TypedDicts, under the names of
llama-cpp-python's `llama_types` (so code typed against it type-checks here); llamacore.responses
builds them. The request shapes (llamacore.llama_request_types) are re-exported here, as
llama-cpp-python's module holds both."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Optional, Required, TypedDict

from llamacore.llama_request_types import (  # lcp's llama_types holds the request shapes too
    ChatCompletionFunction,
    ChatCompletionFunctionCallOption,
    ChatCompletionFunctionParameters,
    ChatCompletionFunctions,
    ChatCompletionMessageToolCallFunction,
    ChatCompletionNamedToolChoice,
    ChatCompletionNamedToolChoiceFunction,
    ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestAssistantMessageFunctionCall,
    ChatCompletionRequestFunctionCall,
    ChatCompletionRequestFunctionCallOption,
    ChatCompletionRequestFunctionMessage,
    ChatCompletionRequestMessage,
    ChatCompletionRequestMessageContentPart,
    ChatCompletionRequestMessageContentPartImage,
    ChatCompletionRequestMessageContentPartImageImageUrl,
    ChatCompletionRequestMessageContentPartText,
    ChatCompletionRequestResponseFormat,
    ChatCompletionRequestSystemMessage,
    ChatCompletionRequestToolMessage,
    ChatCompletionRequestUserMessage,
    ChatCompletionTool,
    ChatCompletionToolChoiceOption,
    ChatCompletionToolFunction,
    JsonType,
)


class PromptTokensDetails(TypedDict):
    cached_tokens: int


class CompletionUsage(TypedDict, total=False):
    prompt_tokens: Required[int]
    completion_tokens: Required[int]
    total_tokens: Required[int]
    prompt_tokens_details: PromptTokensDetails


class CompletionLogprobs(TypedDict):
    text_offset: list[int]
    token_logprobs: list[Optional[float]]
    tokens: list[str]
    top_logprobs: list[Optional[dict[str, float]]]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[str]


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
    logprob: Optional[float]
    bytes: Optional[list[int]]


class ChatCompletionLogprobToken(ChatCompletionTopLogprobToken):
    top_logprobs: list[ChatCompletionTopLogprobToken]


class ChatCompletionLogprobs(TypedDict):
    content: Optional[list[ChatCompletionLogprobToken]]


class ChatCompletionMessageToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: dict[str, str]


class ChatCompletionMessageToolCallChunk(ChatCompletionMessageToolCall):
    index: int


class ChatCompletionResponseMessage(TypedDict, total=False):
    role: Literal["assistant"]
    content: Optional[str]
    reasoning_content: str          # a thinking model's reasoning (llama-server's and DeepSeek's field)
    tool_calls: list[ChatCompletionMessageToolCall]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[str]


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
    content: Optional[str]
    reasoning_content: str
    tool_calls: list[ChatCompletionMessageToolCallChunk]


class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: ChatCompletionStreamResponseDelta
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[str]


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
    name: Optional[str]
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
