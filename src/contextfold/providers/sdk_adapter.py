"""What every adapter on an official SDK does the same way, whatever the wire protocol.

`SdkAdapter` owns the parts that must not differ between providers: the client (the key
passed explicitly, the SDK's own retries off), error translation with key hygiene, the
retrying `complete`, and the streaming loop (text deltas, a break-off that carries the
partial reply, the final `StreamDone`). A subclass supplies only its defaults and the SDK
call (`_create`); the protocol itself is its module in `contextfold.wire`: building a body
(`build_body`), reading a whole reply (`_read_reply`) and folding stream events
(`_new_stream_state`, that module's `StreamAssembler`).
"""

from __future__ import annotations

import asyncio
import enum
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any, ClassVar, Literal, Protocol

from contextfold.wire.reply import MalformedReply, Reply, ReplyStatus

from .base import ChatRequest, ChatResponse, StreamDone, StreamEvent, TextDelta
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


class _ClassDefault(enum.Enum):
    """Sentinel for "the adapter's own default", where None is a meaningful value."""

    ENV_VAR = "the provider's environment variable"


# env_var=None means "read no variable" (a bare base_url must never get an OpenAI key), so
# the per-class default needs a marker of its own.
PROVIDER_ENV_VAR = _ClassDefault.ENV_VAR


class StreamState(Protocol):
    """What has arrived of one streamed reply, folded in event by event (a wire module's
    `StreamAssembler`)."""

    @property
    def finished(self) -> bool:
        """Has the protocol's end-of-reply marker arrived?"""
        ...

    def add(self, event: Any) -> str:
        """Fold one event in; return its text delta (may be empty)."""
        ...

    def reply(self, fallback_model: str, status: ReplyStatus = "complete") -> Reply:
        """The reply so far; status "error" marks a partial one."""
        ...


def chat_response(reply: Reply, repairs: tuple[str, ...] = ()) -> ChatResponse:
    """The `ChatResponse` of a reply read from the wire."""
    return ChatResponse(message=reply.message, stop_reason=reply.stop_reason,
                        raw_stop_reason=reply.raw_stop_reason, request_id=reply.request_id,
                        repairs=repairs)


class SdkAdapter(ABC):
    """A `ChatModel` on an official SDK; subclasses fill in the wire protocol."""

    sdk: ClassVar[ModuleType]  # `openai` or `anthropic`: its error classes are mapped to ours
    client_class: ClassVar[type[Any]]  # the SDK's async client
    default_provider: ClassVar[str]
    default_label: ClassVar[str]
    default_env_var: ClassVar[str]
    example_model: ClassVar[str]  # named in the error for a missing model
    reply_noun: ClassVar[str] = "reply"  # what a cut-off stream failed to finish

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str | None = None,
        label: str | None = None,
        env_var: str | Literal[_ClassDefault.ENV_VAR] | None = PROVIDER_ENV_VAR,
        key_required: bool = True,
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        """Connect to `base_url` (the SDK's default when None) with the resolved key.

        `provider` and `env_var` default to the class's own (e.g. "anthropic" and
        ANTHROPIC_API_KEY); `env_var=None` reads no variable. `label` names the provider in
        error messages. `retry` bounds all attempts; `sleep` is the wait between them.
        """
        if not model or not model.strip():
            raise ValueError(
                f"{type(self).__name__} needs a model name, e.g. {self.example_model!r}")
        self._model = model
        self.provider = provider or self.default_provider
        self.label = label or self._default_label(self.provider)
        self.env_var = self.default_env_var if env_var is PROVIDER_ENV_VAR else env_var
        self.base_url = base_url
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        key = resolve_api_key(api_key, env_var=self.env_var, provider=self.provider,
                              label=self.label, required=key_required)
        # The key goes straight to the client and is kept nowhere else (keys.py). Explicit
        # key, no SDK retries: the SDK must not go looking for other credentials, and
        # `retry` alone bounds the attempts (see retry.py).
        self._client = self.client_class(api_key=key, base_url=base_url, timeout=timeout,
                                         max_retries=0)

    def _default_label(self, provider: str) -> str:
        """The name for error messages when none is given: the provider's own name."""
        return self.default_label if provider == self.default_provider else provider

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self._model!r}, provider={self.provider!r}, "
                f"base_url={self.base_url!r})")

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    # ------------------------------------------------------------------ the protocol

    @abstractmethod
    def build_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The request body for `request`, and the repairs the export made."""

    @abstractmethod
    async def _create(self, body: dict[str, Any]) -> Any:
        """Send `body` through the SDK: the reply, or with `stream` set an event stream."""

    @abstractmethod
    def _read_reply(self, reply: Any, fallback_model: str) -> Reply:
        """A whole (non-streamed) reply read by the protocol; `MalformedReply` if it is none."""

    @abstractmethod
    def _new_stream_state(self) -> StreamState:
        """An empty state to fold one stream's events into."""

    def _parse(self, reply: Any, requested_model: str,
               repairs: tuple[str, ...]) -> ChatResponse:
        """A whole reply as a `ChatResponse`; a malformed one is a `MalformedResponseError`."""
        try:
            return chat_response(self._read_reply(reply, requested_model), repairs)
        except MalformedReply as exc:
            raise MalformedResponseError(f"{self.label} {exc}.",
                                         provider=self.provider) from None

    def _stream_body(self, request: ChatRequest) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`build_body`, asking for a stream; a protocol may add its own stream options."""
        body, repairs = self.build_body(request)
        body["stream"] = True
        return body, repairs

    # ------------------------------------------------------------------ requests

    def _error(self, exc: BaseException) -> ProviderError | None:
        return translate_sdk_error(exc, self.sdk, provider=self.provider, label=self.label,
                                   env_var=self.env_var, secrets=(self._client.api_key,))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send the request; retry transient failures within `self.retry`."""
        body, repairs = self.build_body(request)

        async def attempt() -> ChatResponse:
            try:
                return self._parse(await self._create(body), body["model"], repairs)
            except Exception as exc:
                error = self._error(exc)
                if error is None:
                    raise
                raise error from chain_for(error, exc)

        return await call_with_retries(attempt, self.retry, self._sleep)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream the reply: text deltas, then `StreamDone` with the whole reply."""
        # The body is built now, so a request that cannot be sent fails at the call.
        body, repairs = self._stream_body(request)
        return stream_with_retries(lambda: self._stream_once(body, repairs), self.retry,
                                   self._sleep)

    async def _stream_once(self, body: dict[str, Any],
                           repairs: tuple[str, ...]) -> AsyncIterator[StreamEvent]:
        """One streamed attempt; after the first delta a failure is an interruption."""
        state = self._new_stream_state()
        delivered = False
        try:
            stream = await self._create(body)
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
                # Text already reached the caller: not retryable, and what came is kept.
                raise StreamInterruptedError(
                    f"The stream from {self.label} broke off: {error}", provider=self.provider,
                    partial=chat_response(state.reply(body["model"], "error")),
                    status=error.status,
                ) from exc
            raise error from chain_for(error, exc)
        if not state.finished:
            raise StreamInterruptedError(
                f"The stream from {self.label} ended before the {self.reply_noun} was "
                f"finished.", provider=self.provider,
                partial=chat_response(state.reply(body["model"], "error")))
        yield StreamDone(chat_response(state.reply(body["model"], "complete"), repairs))
