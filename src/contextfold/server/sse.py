"""Server-sent events: the wire format and the streaming response."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

KEEPALIVE = ": keep-alive\n\n"


def sse(event: str, data: Any) -> str:
    """One event: `event: NAME` and its JSON data on one line."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def wants_sse(accept: str | None) -> bool:
    return bool(accept) and "text/event-stream" in accept.lower()


def sse_response(body: AsyncIterator[str]) -> StreamingResponse:
    # No buffering by proxies; the stream is the response.
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
