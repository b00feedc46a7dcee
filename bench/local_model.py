"""A deterministic in-process chat model for benchmarks and tests of the public paths.

It stands where a local server would (no network): every reply is the same short text,
with provider usage (`usage=True`: the prompt's characters / 3, standing in for the
provider's tokenizer) or without (`usage=False`: what local servers often send). It counts the
requests it answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from contextfold.core.values.messages import Usage, text_message
from contextfold.providers.base import (
    ChatRequest,
    ChatResponse,
    StreamDone,
    StreamEvent,
    request_projection,
)

from .scale_data import CAPACITY


class LocalModel:
    """`ChatModel` answering every request with `reply` (with or without usage)."""

    def __init__(self, *, usage: bool = True, reply: str = "Done: noted, next step.",
                 name: str = CAPACITY.model) -> None:
        self._name = name
        self.usage = usage
        self.reply = reply
        self.requests = 0

    @property
    def model(self) -> str:
        return self._name

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests += 1
        usage = None
        if self.usage:
            projection = request_projection(request)
            chars = sum(len(n.payload.model_dump_json()) for n in projection.messages)
            if projection.checkpoint is not None:
                chars += len(projection.checkpoint.payload.model_dump_json())
            prompt = (chars + len(request.system or "")) // 3
            usage = Usage(input=prompt, output=20, model=self._name)
        message = text_message("assistant", self.reply, usage=usage, model=self._name)
        return ChatResponse(message=message, stop_reason="end_turn")

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield StreamDone(await self.complete(request))
