"""ASGI types and the one way a guard answers by itself (a JSON error, then close)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# (scope, status, machine type, sentence) -> the face's JSON error body
ErrorBody = Callable[[Scope, int, str, str], dict[str, Any]]


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header `name` (lower-case bytes), decoded as Latin-1."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def send_json(send: Send, status: int, body: dict[str, Any],
                    headers: dict[str, str] | None = None) -> None:
    """Answer `body` as JSON with `status`, and ask the client to close the connection (a
    refused request may still be sending a body nobody will read)."""
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"),
           (b"content-length", str(len(data)).encode()), (b"connection", b"close")]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
