"""Model providers: the `ChatModel` protocol and adapters on the official SDKs.

    model = make_chat_model("anthropic/claude-sonnet-4-5")       # ANTHROPIC_API_KEY
    model = make_chat_model("ollama/qwen3:8b")                     # local, no key
    reply = await model.complete(ChatRequest(projection=projection, pending=(new_msg,)))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    # The names `__getattr__` below resolves on use, spelt out for type checkers and IDEs
    # (never run: nothing is imported early). `X as X` marks a re-export (PEP 484), and
    # tests/test_public_api.py holds this block equal to _EXPORTS.
    # isort: off
    from .anthropic_messages import AnthropicModel as AnthropicModel
    from .base import (
        ChatModel as ChatModel, ChatRequest as ChatRequest, ChatResponse as ChatResponse,
        StopReason as StopReason, StreamDone as StreamDone, StreamEvent as StreamEvent,
        TextDelta as TextDelta, ToolSpec as ToolSpec, request_projection as request_projection,
        simple_request as simple_request,
    )
    from .errors import (
        ContextOverflowError as ContextOverflowError,
        MalformedResponseError as MalformedResponseError, ProviderAuthError as ProviderAuthError,
        ProviderConnectionError as ProviderConnectionError, ProviderError as ProviderError,
        ProviderRequestError as ProviderRequestError, ProviderTimeoutError as ProviderTimeoutError,
        ProviderUnavailableError as ProviderUnavailableError, RateLimitError as RateLimitError,
        RetryableError as RetryableError, StreamInterruptedError as StreamInterruptedError,
    )
    from .factory import (
        PROVIDERS as PROVIDERS, MissingExtraError as MissingExtraError,
        UnknownProviderError as UnknownProviderError, make_chat_model as make_chat_model,
        resolve_provider as resolve_provider, sdk_base_url as sdk_base_url,
    )
    from .openai_compat import OpenAICompatModel as OpenAICompatModel
    from .retry import NO_RETRY as NO_RETRY, RetryPolicy as RetryPolicy
    # isort: on

# Adapters import their SDK (`pip install 'contextfold[providers]'`); everything else here is
# light. Names resolve on first use so a base install can import this package.
_EXPORTS: dict[str, str] = {
    "AnthropicModel": ".anthropic_messages",
    "OpenAICompatModel": ".openai_compat",
    **dict.fromkeys(["ChatModel", "ChatRequest", "ChatResponse", "StopReason", "StreamDone",
                     "StreamEvent", "TextDelta", "ToolSpec", "request_projection",
                     "simple_request"], ".base"),
    **dict.fromkeys(["ContextOverflowError", "MalformedResponseError", "ProviderAuthError",
                     "ProviderConnectionError", "ProviderError", "ProviderRequestError",
                     "ProviderTimeoutError", "ProviderUnavailableError", "RateLimitError",
                     "RetryableError", "StreamInterruptedError"], ".errors"),
    **dict.fromkeys(["PROVIDERS", "UnknownProviderError", "MissingExtraError",
                     "make_chat_model", "resolve_provider", "sdk_base_url"], ".factory"),
    **dict.fromkeys(["NO_RETRY", "RetryPolicy"], ".retry"),
}

__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll]
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
