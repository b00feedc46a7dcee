"""SPEC W3: request body limits (413) and a per-tenant request rate limit (429).

The body limit is a pure ASGI middleware: it refuses from `Content-Length` before reading,
and counts bytes while reading a body sent without one (chunked), so an oversized upload is
never held in memory whole. Imports and replays get their own, larger limit.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UPLOAD_PATHS = ("/v1/import", "/v1/replay")


class BodyTooLarge(Exception):
    pass


def _too_large_body(limit: int) -> bytes:
    return json.dumps({"error": f"the request body is larger than {limit} bytes",
                       "type": "payload_too_large", "limit_bytes": limit}).encode()


class BodyLimitMiddleware:
    """Answer 413 `payload_too_large` to a body over the limit for its path."""

    def __init__(self, app: ASGIApp, *, max_body: int, max_upload: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_upload = max_upload

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_upload if scope["path"] in UPLOAD_PATHS else self.max_body
        headers = dict(scope.get("headers") or ())
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await _reject(send, limit)
            return
        seen = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _reject(send, limit)


async def _reject(send: Send, limit: int) -> None:
    body = _too_large_body(limit)
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """A token bucket per tenant: `per_minute` requests a minute, bursts up to that many.

    Per process: with N workers a tenant may get up to N times the rate (docs/service.md).
    """

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)

    def check(self, tenant: str) -> float | None:
        """Take one request from `tenant`'s bucket; None if allowed, else seconds to wait."""
        if self.per_minute <= 0:
            return None
        rate = self.per_minute / 60.0
        now = self._clock()
        tokens, at = self._buckets.get(tenant, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - at) * rate)
        if tokens >= 1.0:
            self._buckets[tenant] = (tokens - 1.0, now)
            return None
        self._buckets[tenant] = (tokens, now)
        return (1.0 - tokens) / rate

    @staticmethod
    def retry_after(wait: float) -> str:
        return str(max(1, math.ceil(wait)))
