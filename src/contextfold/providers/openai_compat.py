"""Chat-completions adapter on the official `openai` SDK.

One adapter covers every OpenAI-compatible server through `base_url`: OpenAI itself, Azure
(v1 endpoint), vLLM, Ollama, llama.cpp server, LM Studio, OpenRouter, DeepSeek, Groq, ...
The request body comes from `core.export.to_openai`, so it is always valid, and usage is
normalised: `prompt_tokens` includes cached tokens, so input = prompt - cached and
cache_read = cached (SPEC E1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from contextfold.core.export import to_openai
from contextfold.core.messages import Message, Part, ReasoningPart, TextPart, ToolCallPart, Usage

from .base import ChatRequest, ChatResponse, StopReason
from .base import request_projection as _projection
from .errors import MalformedResponseError
from .sdk_adapter import ReplyStatus, SdkAdapter

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


def _response(text: str, reasoning: str, calls: list[ToolCallPart], usage: Any, model: str,
              finish: str | None, request_id: str | None, repairs: tuple[str, ...],
              status: ReplyStatus = "complete") -> ChatResponse:
    """A `ChatResponse` from what a whole completion or a folded stream says."""
    parts: list[Part] = []
    if reasoning:
        parts.append(ReasoningPart(text=reasoning))
    if text:
        parts.append(TextPart(text=text))
    parts.extend(calls)
    message = Message(role="assistant", parts=tuple(parts), usage=normalize_usage(usage, model),
                      status=status, model=model)
    return ChatResponse(message=message, stop_reason=stop_reason_of(finish, bool(calls)),
                        raw_stop_reason=finish, request_id=request_id, repairs=repairs)


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

    @property
    def finished(self) -> bool:
        """A finish_reason arrived (the usage-only chunk, if any, comes after it)."""
        return self.finish is not None

    def response(self, fallback_model: str, status: ReplyStatus,
                 repairs: tuple[str, ...] = ()) -> ChatResponse:
        """The reply so far; status "error" marks a partial one."""
        return _response("".join(self.text), "".join(self.reasoning), self.tool_calls(),
                         self.usage, self.model or fallback_model, self.finish,
                         self.request_id, repairs, status)


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

    def _stream_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        body, repairs = super()._stream_body(request)
        if self.stream_usage:
            # Usage only comes in a stream when asked for (in a last, choice-less chunk).
            body["stream_options"] = {"include_usage": True}
        return body, repairs

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self._client.chat.completions.create(**body)

    def _parse(self, reply: Any, requested_model: str, repairs: tuple[str, ...]) -> ChatResponse:
        choices = getattr(reply, "choices", None)
        if not choices:
            raise MalformedResponseError(f"{self.label} returned no choices.",
                                         provider=self.provider)
        choice = choices[0]
        msg = getattr(choice, "message", None)
        if msg is None:
            raise MalformedResponseError(f"{self.label} returned a choice without a message.",
                                         provider=self.provider)
        calls = [
            ToolCallPart(id=c.id or f"call_{i}", name=c.function.name,
                         input=_tool_input(c.function.arguments))
            for i, c in enumerate(msg.tool_calls or [])
            if getattr(c, "function", None) is not None and c.function.name
        ]
        return _response(msg.content or "", _reasoning_of(msg), calls, reply.usage,
                         getattr(reply, "model", None) or requested_model, choice.finish_reason,
                         getattr(reply, "id", None), repairs)

    def _new_stream_state(self) -> _StreamState:
        return _StreamState()
