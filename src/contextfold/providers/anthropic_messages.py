"""Messages API adapter on the official `anthropic` SDK.

The request body comes from `core.export.to_anthropic` (roles alternate, the first message
is a user message, every tool_use has its tool_result). Usage maps one to one: input_tokens,
output_tokens, cache_read_input_tokens, cache_creation_input_tokens (SPEC E1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import anthropic

from contextfold.core.export import to_anthropic
from contextfold.core.messages import Message, Part, ReasoningPart, TextPart, ToolCallPart, Usage

from .base import ChatRequest, ChatResponse, StopReason
from .base import request_projection as _projection
from .errors import MalformedResponseError
from .sdk_adapter import ReplyStatus, SdkAdapter

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
}
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                 "cache_creation_input_tokens")


def _count(usage: Any, name: str) -> int:
    value = getattr(usage, name, None)
    return value if isinstance(value, int) and value > 0 else 0


def normalize_usage(usage: Any, model: str | None) -> Usage | None:
    """`core.Usage` from a Messages API usage object (None when none was reported)."""
    if usage is None:
        return None
    return Usage(
        input=_count(usage, "input_tokens"),
        output=_count(usage, "output_tokens"),
        cache_read=_count(usage, "cache_read_input_tokens"),
        cache_write=_count(usage, "cache_creation_input_tokens"),
        model=model,
    )


def _response(parts: list[Part], usage: Any, model: str, stop: str | None,
              request_id: str | None, repairs: tuple[str, ...],
              status: ReplyStatus = "complete") -> ChatResponse:
    """A `ChatResponse` from what a whole reply or a folded stream says."""
    message = Message(role="assistant", parts=tuple(parts), usage=normalize_usage(usage, model),
                      status=status, model=model)
    return ChatResponse(message=message, stop_reason=_STOP.get(stop or "", "other"),
                        raw_stop_reason=stop, request_id=request_id, repairs=repairs)


def _parts_of(content: Any) -> list[Part]:
    parts: list[Part] = []
    for block in content or []:
        kind = getattr(block, "type", None)
        if kind == "text" and block.text:
            parts.append(TextPart(text=block.text))
        elif kind == "tool_use":
            parts.append(ToolCallPart(id=block.id, name=block.name, input=block.input))
        elif kind == "thinking" and getattr(block, "thinking", ""):
            parts.append(ReasoningPart(text=block.thinking,
                                       signature=getattr(block, "signature", None)))
    return parts


@dataclass
class _Block:
    kind: str
    text: str = ""
    json: str = ""
    id: str = ""
    name: str = ""
    signature: str | None = None


@dataclass
class _StreamState:
    """What has arrived of a streamed message so far."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    stop: str | None = None
    finished: bool = False  # message_stop arrived
    model: str | None = None
    request_id: str | None = None

    def _usage(self, usage: Any) -> None:
        # message_start carries the prompt side, message_delta the (cumulative) output and,
        # on newer API versions, the prompt side again: keep the latest non-zero value.
        for name in _USAGE_FIELDS:
            value = _count(usage, name)
            if value:
                self.usage[name] = value

    def add(self, event: Any) -> str:
        """Fold one event in; return its text delta (may be empty)."""
        kind = getattr(event, "type", None)
        if kind == "message_start":
            self.model = event.message.model
            self.request_id = event.message.id
            self._usage(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = _Block(
                kind=block.type, text=getattr(block, "text", "") or "",
                id=getattr(block, "id", "") or "", name=getattr(block, "name", "") or "")
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(event.index, _Block(kind="text"))
            delta = event.delta
            if delta.type == "text_delta":
                block.text += delta.text
                return str(delta.text)
            if delta.type == "input_json_delta":
                block.json += delta.partial_json
            elif delta.type == "thinking_delta":
                block.text += delta.thinking
            elif delta.type == "signature_delta":
                block.signature = delta.signature
        elif kind == "message_delta":
            self.stop = event.delta.stop_reason or self.stop
            self._usage(event.usage)
        elif kind == "message_stop":
            self.finished = True
        return ""

    def parts(self) -> list[Part]:
        parts: list[Part] = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "text" and block.text:
                parts.append(TextPart(text=block.text))
            elif block.kind == "thinking" and block.text:
                parts.append(ReasoningPart(text=block.text, signature=block.signature))
            elif block.kind == "tool_use" and block.name:
                try:
                    tool_input: Any = json.loads(block.json) if block.json else {}
                except ValueError:
                    tool_input = block.json  # incomplete JSON of a broken stream: keep it
                parts.append(ToolCallPart(id=block.id or "toolu_unknown", name=block.name,
                                          input=tool_input))
        return parts

    def response(self, fallback_model: str, status: ReplyStatus,
                 repairs: tuple[str, ...] = ()) -> ChatResponse:
        """The message so far; status "error" marks a partial one."""
        # Only non-zero counts are kept, so "no usage seen" stays None rather than zeros.
        usage = SimpleNamespace(**self.usage) if self.usage else None
        return _response(self.parts(), usage, self.model or fallback_model, self.stop,
                         self.request_id, repairs, status)


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
        export = to_anthropic(_projection(request), request.system)
        if not export.messages:
            raise ValueError("ChatRequest has no messages to send: add a pending message")
        body: dict[str, Any] = {
            "model": request.model or self._model,
            "max_tokens": request.max_tokens,
            "messages": export.messages,
        }
        if export.system:
            body["system"] = export.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body, export.repairs

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self._client.messages.create(**body)

    def _parse(self, reply: Any, requested_model: str, repairs: tuple[str, ...]) -> ChatResponse:
        if getattr(reply, "type", "message") != "message" or getattr(reply, "role", None) != (
                "assistant"):
            raise MalformedResponseError(f"{self.label} did not return an assistant message.",
                                         provider=self.provider)
        model = getattr(reply, "model", None) or requested_model
        return _response(_parts_of(reply.content), reply.usage, model, reply.stop_reason,
                         getattr(reply, "id", None), repairs)

    def _new_stream_state(self) -> _StreamState:
        return _StreamState()
