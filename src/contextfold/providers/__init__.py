"""Model providers: the `ChatModel` protocol and adapters on the official SDKs.

    model = make_chat_model("anthropic/claude-sonnet-4-5")       # ANTHROPIC_API_KEY
    model = make_chat_model("ollama/qwen3:8b")                     # local, no key
    reply = await model.complete(ChatRequest(projection=projection, pending=(new_msg,)))
"""

from .anthropic_messages import AnthropicModel
from .base import (
    ChatModel,
    ChatRequest,
    ChatResponse,
    StopReason,
    StreamDone,
    StreamEvent,
    TextDelta,
    ToolSpec,
    request_projection,
    simple_request,
)
from .errors import (
    ContextOverflowError,
    MalformedResponseError,
    ProviderAuthError,
    ProviderConnectionError,
    ProviderError,
    ProviderRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    RetryableError,
    StreamInterruptedError,
)
from .factory import PROVIDERS, UnknownProviderError, make_chat_model, resolve_provider
from .openai_compat import OpenAICompatModel
from .retry import NO_RETRY, RetryPolicy

__all__ = [
    "NO_RETRY",
    "PROVIDERS",
    "AnthropicModel",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "ContextOverflowError",
    "MalformedResponseError",
    "OpenAICompatModel",
    "ProviderAuthError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRequestError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitError",
    "RetryPolicy",
    "RetryableError",
    "StopReason",
    "StreamDone",
    "StreamEvent",
    "StreamInterruptedError",
    "TextDelta",
    "ToolSpec",
    "UnknownProviderError",
    "make_chat_model",
    "request_projection",
    "resolve_provider",
    "simple_request",
]
