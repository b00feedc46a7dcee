"""The provider-neutral chat interface: requests, responses, stream events, `ChatModel`.

A `ChatRequest` carries the model projection (latest checkpoint + raw tail) and the
messages that follow it (e.g. the new user message); `request_projection` joins them, so the
adapters export one projection with `core.render.export` and never build message lists by hand.
A `ChatResponse` holds the reply as a core `Message` with usage normalised to `core.Usage`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from contextfold.core.values.messages import Message, Node
from contextfold.core.view.projection import Projection
from contextfold.wire.reply import StopReason  # the protocols' common words, read in wire/

# Ids of pending messages only need to be unique inside one request: they never reach the
# store, which assigns real ids when (and if) the runtime persists the message.
_PENDING_ID = "pending-{}"


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: name, description and a JSON schema of its input."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("ToolSpec.name must not be empty")
        if not isinstance(self.input_schema, dict):
            raise ValueError(f"ToolSpec {self.name!r}: input_schema must be a JSON-schema dict")


@dataclass(frozen=True)
class ChatRequest:
    """One request to a chat model.

    `projection` is what the session already holds (SPEC T3); `pending` are messages that
    follow it in this request but are not (yet) durable, e.g. the user's new message or a
    summarisation instruction.
    """

    model: str | None = None  # None: the adapter's own model
    projection: Projection = field(default_factory=lambda: Projection(None, ()))
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    pending: tuple[Message, ...] = ()
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.model is not None and not self.model.strip():
            raise ValueError("ChatRequest.model must name a model (or be None for the default)")
        if self.max_tokens < 1:
            raise ValueError(f"ChatRequest.max_tokens must be at least 1, got {self.max_tokens}")
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.pending, tuple):
            object.__setattr__(self, "pending", tuple(self.pending))


def request_projection(request: ChatRequest) -> Projection:
    """The request's projection with its pending messages appended (the one place they join)."""
    if not request.pending:
        return request.projection
    extra = tuple(
        Node(id=_PENDING_ID.format(i), payload=message)
        for i, message in enumerate(request.pending)
    )
    return replace(request.projection, messages=request.projection.messages + extra)


def simple_request(messages: Sequence[Message], **kwargs: Any) -> ChatRequest:
    """A request holding just these messages (no stored projection): scripts, tests, tools."""
    return ChatRequest(pending=tuple(messages), **kwargs)


@dataclass(frozen=True)
class ChatResponse:
    """A complete reply. `message.usage` is normalised; `stop_reason` is provider-neutral."""

    message: Message
    stop_reason: StopReason
    raw_stop_reason: str | None = None
    request_id: str | None = None
    repairs: tuple[str, ...] = ()  # what the export changed to make the request valid

    @property
    def text(self) -> str:
        return self.message.text


@dataclass(frozen=True)
class TextDelta:
    """A piece of reply text, as it streams in."""

    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True)
class StreamDone:
    """The last event of a stream: the whole reply."""

    response: ChatResponse
    type: Literal["done"] = "done"


StreamEvent = TextDelta | StreamDone


@runtime_checkable
class ChatModel(Protocol):
    """What contextfold needs from a model provider."""

    @property
    def model(self) -> str: ...

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send the request and return the whole reply."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Send the request; yield text deltas, then one `StreamDone` with the reply."""
        ...
