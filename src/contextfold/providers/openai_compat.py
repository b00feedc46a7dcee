"""Chat-completions adapter on the official `openai` SDK.

One adapter covers every OpenAI-compatible server through `base_url`: OpenAI itself, Azure
(v1 endpoint), vLLM, Ollama, llama.cpp server, LM Studio, OpenRouter, DeepSeek, Groq, ...
It holds only the SDK calls: the protocol (the body from `core.render.export.to_openai`, so it is
always valid; the reply, the stream and the usage, with cached tokens split out of
`prompt_tokens`, SPEC E1) is `contextfold.wire.openai_chat`, which the proxy and the
importer read with too.
"""

from __future__ import annotations

from typing import Any, Literal

import openai

from contextfold.wire import openai_chat
from contextfold.wire.reply import Reply

from .base import ChatRequest
from .base import request_projection as _projection
from .sdk_adapter import SdkAdapter

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]


class OpenAICompatModel(SdkAdapter):
    """A `ChatModel` for any chat-completions endpoint."""

    sdk = openai
    client_class = openai.AsyncOpenAI
    default_provider = "openai"
    default_label = "OpenAI"
    default_env_var = "OPENAI_API_KEY"
    example_model = "gpt-4o"

    def __init__(self, model: str, *, max_tokens_field: MaxTokensField | None = None,
                 stream_usage: bool = True, **options: Any) -> None:
        """`options` are `SdkAdapter`'s: base_url, api_key, provider ("openai"), label,
        env_var (OPENAI_API_KEY), key_required, timeout, retry, sleep.

        `max_tokens_field` is the body field for the output limit (OpenAI itself wants
        max_completion_tokens, most other servers max_tokens); `stream_usage` asks a stream
        for a final usage chunk.
        """
        super().__init__(model, **options)
        self.max_tokens_field: MaxTokensField = max_tokens_field or (
            "max_completion_tokens" if self.provider == "openai" else "max_tokens")
        self.stream_usage = stream_usage

    def build_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The chat-completions body for `request`, and the repairs the export made."""
        return openai_chat.request_body(
            _projection(request), request.system, model=request.model or self._model,
            max_tokens=request.max_tokens, max_tokens_field=self.max_tokens_field,
            tools=request.tools, temperature=request.temperature)

    def _stream_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        body, repairs = super()._stream_body(request)
        if self.stream_usage:
            # Usage only comes in a stream when asked for (in a last, choice-less chunk).
            body["stream_options"] = {"include_usage": True}
        return body, repairs

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self._client.chat.completions.create(**body)

    def _read_reply(self, reply: Any, fallback_model: str) -> Reply:
        return openai_chat.read_reply(reply, fallback_model)

    def _new_stream_state(self) -> openai_chat.StreamAssembler:
        return openai_chat.StreamAssembler()
