"""Chat-completions adapter on the official `openai` SDK.

One adapter covers every OpenAI-compatible server through `base_url`: OpenAI itself, Azure
(v1 endpoint), vLLM, Ollama, llama.cpp server, LM Studio, OpenRouter, DeepSeek, Groq, ...
The request body comes from `core.export.to_openai`, so it is always valid, and usage is
normalised: `prompt_tokens` includes cached tokens, so input = prompt - cached and
cache_read = cached (SPEC E1).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from contextfold.core.export import to_openai
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

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]

_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def normalize_usage(usage: Any, model: str | None) -> Usage | None:
    """`core.Usage` from a chat-completions usage object (None when none was reported)."""
    if usage is None:
        return None
    prompt = getattr(usage, "prompt_tokens", None) or 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    cached = min(cached, prompt)
    return Usage(
        input=prompt - cached,
        output=getattr(usage, "completion_tokens", None) or 0,
        cache_read=cached,
        cache_write=0,
        model=model,
    )


def stop_reason_of(finish: str | None, has_calls: bool) -> StopReason:
    # Several local servers (Ollama among them) say "stop" even when they called tools.
    if has_calls:
        return "tool_use"
    return _FINISH.get(finish or "", "other")


def _tool_input(arguments: str | None) -> Any:
    """Parsed tool arguments; a model's invalid JSON is kept verbatim rather than lost."""
    if not arguments:
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _reasoning_of(obj: Any) -> str:
    """Reasoning text that vLLM, DeepSeek and OpenRouter return beside the content."""
    extra = getattr(obj, "model_extra", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = getattr(obj, name, None) or extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _message(text: str, reasoning: str, calls: list[ToolCallPart], usage: Usage | None,
             model: str | None, status: Literal["complete", "error"] = "complete") -> Message:
    parts: list[Part] = []
    if reasoning:
        parts.append(ReasoningPart(text=reasoning))
    if text:
        parts.append(TextPart(text=text))
    parts.extend(calls)
    return Message(role="assistant", parts=tuple(parts), usage=usage, status=status, model=model)


@dataclass
class _StreamState:
    """What has arrived of a streamed reply so far."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish: str | None = None
    usage: Any = None
    model: str | None = None
    request_id: str | None = None

    def add(self, chunk: Any) -> str:
        """Fold one chunk in; return its text delta (may be empty)."""
        self.model = getattr(chunk, "model", None) or self.model
        self.request_id = getattr(chunk, "id", None) or self.request_id
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        delta_text = ""
        for choice in getattr(chunk, "choices", None) or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    delta_text += delta.content
                reasoning = _reasoning_of(delta)
                if reasoning:
                    self.reasoning.append(reasoning)
                for call in delta.tool_calls or []:
                    slot = self.calls.setdefault(call.index, {"id": None, "name": "", "args": ""})
                    slot["id"] = call.id or slot["id"]
                    if call.function is not None:
                        slot["name"] += call.function.name or ""
                        slot["args"] += call.function.arguments or ""
            if choice.finish_reason:
                self.finish = choice.finish_reason
        if delta_text:
            self.text.append(delta_text)
        return delta_text

    def tool_calls(self) -> list[ToolCallPart]:
        return [
            ToolCallPart(id=slot["id"] or f"call_{i}", name=slot["name"],
                         input=_tool_input(slot["args"]))
            for i, slot in sorted(self.calls.items())
            if slot["name"]
        ]

    def response(self, fallback_model: str, status: Literal["complete", "error"]) -> ChatResponse:
        model = self.model or fallback_model
        calls = self.tool_calls()
        return ChatResponse(
            message=_message("".join(self.text), "".join(self.reasoning), calls,
                             normalize_usage(self.usage, model), model, status),
            stop_reason=stop_reason_of(self.finish, bool(calls)),
            raw_stop_reason=self.finish,
            request_id=self.request_id,
        )


class OpenAICompatModel:
    """A `ChatModel` for any chat-completions endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str = "openai",
        label: str | None = None,
        env_var: str | None = "OPENAI_API_KEY",
        key_required: bool = True,
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
        max_tokens_field: MaxTokensField | None = None,
        stream_usage: bool = True,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not model or not model.strip():
            raise ValueError("OpenAICompatModel needs a model name, e.g. 'gpt-4o'")
        self._model = model
        self.provider = provider
        self.label = label or ("OpenAI" if provider == "openai" else provider)
        self.env_var = env_var
        self.base_url = base_url
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.max_tokens_field: MaxTokensField = max_tokens_field or (
            "max_completion_tokens" if provider == "openai" else "max_tokens")
        self.stream_usage = stream_usage
        self._sleep = sleep
        key = resolve_api_key(api_key, env_var=env_var, provider=provider, label=self.label,
                              required=key_required)
        # The SDK's own retries are off: `retry` bounds the total attempts (see retry.py).
        self._client = openai.AsyncOpenAI(api_key=key, base_url=base_url, timeout=timeout,
                                          max_retries=0)

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return (f"OpenAICompatModel(model={self._model!r}, provider={self.provider!r}, "
                f"base_url={self.base_url!r})")

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    # ------------------------------------------------------------------ requests

    def build_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The chat-completions body for `request`, and the repairs the export made."""
        export = to_openai(_projection(request), request.system)
        if not any(m["role"] != "system" for m in export.messages):
            raise ValueError("ChatRequest has no messages to send: add a pending message")
        body: dict[str, Any] = {
            "model": request.model or self._model,
            "messages": export.messages,
            self.max_tokens_field: request.max_tokens,
        }
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.input_schema}}
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body, export.repairs

    def _error(self, exc: BaseException) -> ProviderError | None:
        return translate_sdk_error(exc, openai, provider=self.provider, label=self.label,
                                   env_var=self.env_var, secrets=(self._client.api_key,))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send the request; retry transient failures within `self.retry`."""
        body, repairs = self.build_body(request)

        async def attempt() -> ChatResponse:
            try:
                completion = await self._client.chat.completions.create(**body)
                return self._parse(completion, body["model"], repairs)
            except Exception as exc:
                error = self._error(exc)
                if error is None:
                    raise
                raise error from chain_for(error, exc)

        return await call_with_retries(attempt, self.retry, self._sleep)

    def _parse(self, completion: Any, requested_model: str,
               repairs: tuple[str, ...]) -> ChatResponse:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise MalformedResponseError(f"{self.label} returned no choices.",
                                         provider=self.provider)
        choice = choices[0]
        msg = getattr(choice, "message", None)
        if msg is None:
            raise MalformedResponseError(f"{self.label} returned a choice without a message.",
                                         provider=self.provider)
        model = getattr(completion, "model", None) or requested_model
        calls = [
            ToolCallPart(id=c.id or f"call_{i}", name=c.function.name,
                         input=_tool_input(c.function.arguments))
            for i, c in enumerate(msg.tool_calls or [])
            if getattr(c, "function", None) is not None and c.function.name
        ]
        message = _message(msg.content or "", _reasoning_of(msg), calls,
                           normalize_usage(completion.usage, model), model)
        return ChatResponse(message=message,
                            stop_reason=stop_reason_of(choice.finish_reason, bool(calls)),
                            raw_stop_reason=choice.finish_reason,
                            request_id=getattr(completion, "id", None), repairs=repairs)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream the reply: text deltas, then `StreamDone` (usage from the last chunk)."""
        body, repairs = self.build_body(request)
        body["stream"] = True
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        return stream_with_retries(lambda: self._stream_once(body, repairs), self.retry,
                                   self._sleep)

    async def _stream_once(self, body: dict[str, Any],
                           repairs: tuple[str, ...]) -> AsyncIterator[StreamEvent]:
        state = _StreamState()
        delivered = False
        try:
            stream = await self._client.chat.completions.create(**body)
            try:
                async for chunk in stream:
                    piece = state.add(chunk)
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
        if state.finish is None:
            partial = state.response(body["model"], "error")
            raise StreamInterruptedError(
                f"The stream from {self.label} ended before the reply was finished.",
                provider=self.provider, partial=partial)
        response = state.response(body["model"], "complete")
        yield StreamDone(ChatResponse(
            message=response.message, stop_reason=response.stop_reason,
            raw_stop_reason=response.raw_stop_reason, request_id=response.request_id,
            repairs=repairs))
