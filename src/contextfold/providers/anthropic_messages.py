"""Messages API adapter on the official `anthropic` SDK.

The request body comes from `core.export.to_anthropic` (roles alternate, the first message
is a user message, every tool_use has its tool_result). Usage maps one to one: input_tokens,
output_tokens, cache_read_input_tokens, cache_creation_input_tokens (SPEC E1).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic

from contextfold.core.export import to_anthropic
from contextfold.core.messages import Message, Part, ReasoningPart, TextPart, ToolCallPart, Usage

from .base import ChatRequest, ChatResponse, StopReason, StreamDone, StreamEvent, TextDelta
from .base import request_projection as _projection
from .errors import (
    MalformedResponseError,
    ProviderError,
    StreamInterruptedError,
    chain_for,
    translate_sdk_error,
)
from .keys import resolve_api_key
from .retry import RetryPolicy, call_with_retries
from .streaming import stream_with_retries

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
}


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


def _message(blocks: list[Part], usage: Usage | None, model: str | None,
             status: Literal["complete", "error"] = "complete") -> Message:
    return Message(role="assistant", parts=tuple(blocks), usage=usage, status=status,
                   model=model)


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
    stopped: bool = False
    model: str | None = None
    request_id: str | None = None

    def _usage(self, usage: Any) -> None:
        # message_start carries the prompt side, message_delta the (cumulative) output and,
        # on newer API versions, the prompt side again: keep the latest non-zero value.
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens"):
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
            self.stopped = True
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

    def response(self, fallback_model: str, status: Literal["complete", "error"],
                 repairs: tuple[str, ...] = ()) -> ChatResponse:
        model = self.model or fallback_model
        usage = (Usage(input=self.usage.get("input_tokens", 0),
                       output=self.usage.get("output_tokens", 0),
                       cache_read=self.usage.get("cache_read_input_tokens", 0),
                       cache_write=self.usage.get("cache_creation_input_tokens", 0),
                       model=model)
                 if self.usage else None)
        return ChatResponse(message=_message(self.parts(), usage, model, status),
                            stop_reason=_STOP.get(self.stop or "", "other"),
                            raw_stop_reason=self.stop, request_id=self.request_id,
                            repairs=repairs)


class AnthropicModel:
    """A `ChatModel` for the Anthropic Messages API (or a server that speaks it)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str = "anthropic",
        label: str | None = None,
        env_var: str | None = "ANTHROPIC_API_KEY",
        key_required: bool = True,
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not model or not model.strip():
            raise ValueError("AnthropicModel needs a model name, e.g. 'claude-sonnet-4-5'")
        self._model = model
        self.provider = provider
        self.label = label or "Anthropic"
        self.env_var = env_var
        self.base_url = base_url
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        key = resolve_api_key(api_key, env_var=env_var, provider=provider, label=self.label,
                              required=key_required)
        # Explicit key, no SDK retries: the SDK must not go looking for other credentials,
        # and `retry` alone bounds the attempts (see retry.py).
        self._client = anthropic.AsyncAnthropic(api_key=key, base_url=base_url,
                                                timeout=timeout, max_retries=0)

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return (f"AnthropicModel(model={self._model!r}, provider={self.provider!r}, "
                f"base_url={self.base_url!r})")

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    # ------------------------------------------------------------------ requests

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

    def _error(self, exc: BaseException) -> ProviderError | None:
        return translate_sdk_error(exc, anthropic, provider=self.provider, label=self.label,
                                   env_var=self.env_var, secrets=(self._client.api_key,))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send the request; retry transient failures within `self.retry`."""
        body, repairs = self.build_body(request)

        async def attempt() -> ChatResponse:
            try:
                reply = await self._client.messages.create(**body)
                return self._parse(reply, body["model"], repairs)
            except Exception as exc:
                error = self._error(exc)
                if error is None:
                    raise
                raise error from chain_for(error, exc)

        return await call_with_retries(attempt, self.retry, self._sleep)

    def _parse(self, reply: Any, requested_model: str, repairs: tuple[str, ...]) -> ChatResponse:
        if getattr(reply, "type", "message") != "message" or getattr(reply, "role", None) != (
                "assistant"):
            raise MalformedResponseError(f"{self.label} did not return an assistant message.",
                                         provider=self.provider)
        model = getattr(reply, "model", None) or requested_model
        return ChatResponse(
            message=_message(_parts_of(reply.content), normalize_usage(reply.usage, model),
                             model),
            stop_reason=_STOP.get(reply.stop_reason or "", "other"),
            raw_stop_reason=reply.stop_reason, request_id=getattr(reply, "id", None),
            repairs=repairs)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream the reply: text deltas, then `StreamDone` with the whole message."""
        body, repairs = self.build_body(request)
        body["stream"] = True
        return stream_with_retries(lambda: self._stream_once(body, repairs), self.retry,
                                   self._sleep)

    async def _stream_once(self, body: dict[str, Any],
                           repairs: tuple[str, ...]) -> AsyncIterator[StreamEvent]:
        state = _StreamState()
        delivered = False
        try:
            stream = await self._client.messages.create(**body)
            try:
                async for event in stream:
                    piece = state.add(event)
                    if piece:
                        delivered = True
                        yield TextDelta(piece)
            finally:
                await stream.close()
        except Exception as exc:
            error = self._error(exc)
            if error is None:
                raise
            if delivered:
                raise StreamInterruptedError(
                    f"The stream from {self.label} broke off: {error}", provider=self.provider,
                    partial=state.response(body["model"], "error"), status=error.status,
                ) from exc
            raise error from chain_for(error, exc)
        if not state.stopped:
            raise StreamInterruptedError(
                f"The stream from {self.label} ended before the message was finished.",
                provider=self.provider, partial=state.response(body["model"], "error"))
        yield StreamDone(state.response(body["model"], "complete", repairs))
