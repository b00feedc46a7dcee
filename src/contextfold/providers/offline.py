"""`OfflineModel`: a built-in chat model that needs no network and no key.

It answers every request with a short deterministic reply derived from the last user
message, streamed word by word. The service (`contextfold serve`) uses it by default as
`offline/echo`, so the API and the page work on any machine; tests and benchmarks use it as
a fake model. It never calls tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from contextfold.core.values.messages import text_message

from .base import ChatRequest, ChatResponse, StreamDone, StreamEvent, TextDelta, request_projection

OFFLINE_PREFIX = "offline/"


class OfflineModel:
    """A deterministic local model: "offline/echo" (optionally `delay` s per stream chunk)."""

    def __init__(self, model: str = "offline/echo", *, delay: float = 0.0) -> None:
        self._model = model
        self.delay = delay

    @property
    def model(self) -> str:
        return self._model

    def reply_text(self, request: ChatRequest) -> str:
        """The reply for `request`: it quotes the start of the last user message."""
        messages = [n.message for n in request_projection(request).messages
                    if n.message is not None]
        users = [m for m in messages if m.role == "user"]
        said = " ".join(users[-1].text.split()) if users else ""
        if len(said) > 160:
            said = said[:159] + "…"
        said = said or "(nothing)"
        # One full stop, however the quote ends ("sentences.." read as a typo).
        end = "" if said[-1] in ".!?…" else "."
        count = len(messages)
        return (f"(offline model) You said: {said}{end} "
                f"I see {count} {'message' if count == 1 else 'messages'} in this request.")

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The whole reply at once."""
        text = self.reply_text(request)
        return ChatResponse(message=text_message("assistant", text, model=self._model),
                            stop_reason="end_turn")

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """The reply word by word, then `StreamDone`."""
        response = await self.complete(request)
        words = response.text.split(" ")
        for i, word in enumerate(words):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield TextDelta(word if i == len(words) - 1 else word + " ")
        yield StreamDone(response)
