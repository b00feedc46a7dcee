"""Bounded request bodies (SPEC W3, Y8): a size limit enforced while reading, and a depth
limit for JSON.

`BodyLimit` refuses from `Content-Length` before reading, and counts bytes while reading a
body sent without one (chunked), so an oversized body is never held in memory whole. When
the limit is crossed it answers 413 itself, at once: a framework that catches the error
while parsing (FastAPI answers "There was an error parsing the body", 400) cannot turn it
into something else, because whatever the app sends afterwards is dropped.

`loads_bounded` parses JSON no deeper than `MAX_JSON_DEPTH`: a 100,000-deep body raises
`JsonTooDeepError` (a ValueError, answered 400), never a `RecursionError` (500), and what
passes is shallow enough for every later step (copying, hashing, re-encoding).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from ..errors import ContextfoldError
from .asgi import ASGIApp, Message, Receive, Scope, Send, send_json

log = logging.getLogger("contextfold.guard")

MAX_JSON_DEPTH = 128  # agents' tool schemas nest a few tens of levels at most


class BodyTooLarge(Exception):
    """Raised into the app when its body crosses the limit (the 413 is already sent)."""


class JsonTooDeepError(ContextfoldError, ValueError):
    """A JSON body nested deeper than the limit."""

    kind = "bad_input"


class BodyCutShort(Exception):
    """The client closed its connection before its whole body arrived."""


class BodyLimit:
    """Answer 413 to a body over `limit_for(scope)` bytes with `too_large(scope, limit)`
    (at once when its Content-Length says so), and a 400 naming the body to a client that
    closes the connection before its body arrived: an ordinary event, one log line, never
    an error with a traceback."""

    def __init__(self, app: ASGIApp, *, limit_for: Callable[[Scope], int],
                 too_large: Callable[[Scope, int], dict[str, Any]]) -> None:
        self.app = app
        self.limit_for = limit_for
        self.too_large = too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        headers = dict(scope.get("headers") or ())
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await send_json(send, 413, self.too_large(scope, limit))
            return
        seen = 0
        started = refused = complete = False

        async def counted_receive() -> Message:
            nonlocal seen, refused, complete
            message = await receive()
            if message["type"] == "http.disconnect" and not complete and not started:
                raise BodyCutShort  # gone before the whole body came
            if message["type"] == "http.request":
                complete = not message.get("more_body", False)
                seen += len(message.get("body", b""))
                if seen > limit:
                    if not started and not refused:
                        refused = True
                        await send_json(send, 413, self.too_large(scope, limit))
                    raise BodyTooLarge
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out; whatever the app makes of the error is dropped
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not refused and not started:
                await send_json(send, 413, self.too_large(scope, limit))
        except BodyCutShort:
            declared = f" of {int(length)}" if length is not None and length.isdigit() else ""
            log.info("%s %s: the client closed the connection after %d%s bytes of its body",
                     scope.get("method"), scope.get("path"), seen, declared)
            with contextlib.suppress(Exception):  # nobody may be there to read it
                await send_json(send, 400, {"error": {
                    "message": f"request body: cut short ({seen}{declared} bytes arrived)",
                    "type": "invalid_request_error", "param": "body"}})


def loads_bounded(raw: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads(raw)`, refusing a value nested deeper than `max_depth` with
    `JsonTooDeepError` (other bad JSON raises `json.JSONDecodeError`, a ValueError too)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise JsonTooDeepError(f"the JSON body is nested too deeply (more than {max_depth} "
                               "levels)") from None
    depth = (text_depth(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw,
                        stop_after=max_depth)
             if isinstance(raw, bytes | str) else json_depth(value, stop_after=max_depth))
    if depth > max_depth:
        raise JsonTooDeepError(f"the JSON body is nested too deeply (more than {max_depth} "
                               "levels)")
    return value


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")
_MAX_PASS_BYTES = 262_144  # brackets; a request of 5,000 messages has ~30,000


def text_depth(raw: bytes, *, stop_after: int | None = None) -> int:
    """`json_depth` of the value `raw` (valid JSON text) encodes, from the text with C-speed
    passes instead of a walk over every decoded value (the walk took ~30 ms on a 200k-token
    request, issue 26): escapes out, string contents out (what lies between two quotes),
    then only the brackets kept, and the innermost pairs removed one level per pass."""
    outside = raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2]
    brackets = b"".join(outside).translate(None, _NOT_BRACKETS)
    if len(brackets) > _MAX_PASS_BYTES:  # each pass rereads them: past this, walk (linear)
        return json_depth(json.loads(raw), stop_after=stop_after)
    depth = 0
    while brackets:
        brackets, n = _INNERMOST.subn(b"", brackets)
        if n == 0:  # not valid JSON text: the walk decides
            return json_depth(json.loads(raw), stop_after=stop_after)
        depth += 1
        if stop_after is not None and depth > stop_after:
            break
    return depth


def json_depth(value: Any, *, stop_after: int | None = None) -> int:
    """How deeply lists and objects nest in `value` (a scalar: 0), without recursion; stops
    counting once past `stop_after`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if stop_after is not None and deepest > stop_after:
            return deepest
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return deepest
