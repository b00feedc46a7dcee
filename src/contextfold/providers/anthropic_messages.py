"""Messages API adapter on the official `anthropic` SDK.

It holds only the SDK calls: the protocol (the body from `core.render.export.to_anthropic`: roles
alternate, the first message is a user message, every tool_use has its tool_result; the reply,
the stream and the usage, which maps one to one, SPEC E1) is
`contextfold.wire.anthropic_messages`, which the proxy and the importers read with too.
"""

from __future__ import annotations

from typing import Any

import anthropic

from contextfold.wire import anthropic_messages
from contextfold.wire.reply import Reply

from .base import ChatRequest
from .base import request_projection as _projection
from .sdk_adapter import SdkAdapter


class AnthropicModel(SdkAdapter):
    """A `ChatModel` for the Anthropic Messages API (or a server that speaks it).

    Keyword options (see `SdkAdapter`): base_url, api_key, provider ("anthropic"), label,
    env_var (ANTHROPIC_API_KEY), key_required, timeout, retry, sleep.
    """

    sdk = anthropic
    client_class = anthropic.AsyncAnthropic
    default_provider = "anthropic"
    default_label = "Anthropic"
    default_env_var = "ANTHROPIC_API_KEY"
    example_model = "claude-sonnet-4-5"
    reply_noun = "message"

    def _default_label(self, provider: str) -> str:
        # Whoever serves it, this adapter speaks the Anthropic API: name that.
        return self.default_label

    def build_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The Messages API body for `request`, and the repairs the export made."""
        return anthropic_messages.request_body(
            _projection(request), request.system, model=request.model or self._model,
            max_tokens=request.max_tokens, tools=request.tools,
            temperature=request.temperature)

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self._client.messages.create(**body)

    def _read_reply(self, reply: Any, fallback_model: str) -> Reply:
        return anthropic_messages.read_reply(reply, fallback_model)

    def _new_stream_state(self) -> anthropic_messages.StreamAssembler:
        return anthropic_messages.StreamAssembler()
