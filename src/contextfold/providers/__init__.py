"""Model providers: the `ChatModel` protocol and adapters on the official SDKs.

    model = make_chat_model("anthropic/claude-sonnet-4-5")       # ANTHROPIC_API_KEY
    model = make_chat_model("ollama/qwen3:8b")                     # local, no key
    reply = await model.complete(ChatRequest(projection=projection, pending=(new_msg,)))
"""

from __future__ import annotations

from .._lazy import lazy_exports

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

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
