"""Turns over HTTP: send, retry, edit; JSON, or server-sent events when asked.

A turn runs as its own task: a client that disconnects does not cut it (an acknowledged
message is stored and answered whatever the connection does). Errors found before the turn
starts are answered as plain JSON with their status, also to an SSE request.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header
from pydantic import Field

from .errors import ApiError, as_api_error
from .routes import Body, Manager, Tenant
from .sessions import Live, SessionManager
from .sse import KEEPALIVE, sse, sse_response, wants_sse
from .views import turn_json

router = APIRouter(prefix="/v1")
Op = Literal["send", "retry", "edit"]
_FORWARDED = ("state", "compaction_started", "compaction_finished", "compaction_noop",
              "compaction_failed", "compaction_cancelled", "compaction_stale",
              "summarizer_fallback", "preflight_blocked", "overflow")


class Text(Body):
    text: str = Field(..., min_length=1)


Accept = Annotated[str | None, Header()]


@router.post("/sessions/{session_id}/messages")
async def send_message(session_id: str, body: Text, who: Tenant, sessions: Manager,
                       accept: Accept = None) -> Any:
    """Send a user message; the reply as JSON, or streamed (Accept: text/event-stream).
    During a compaction it waits and then goes out (U2); if the compaction is cancelled
    or fails, 409 send_aborted and nothing is sent or saved (U3)."""
    return await _turn(sessions, who, session_id, "send", body.text, accept)


@router.post("/sessions/{session_id}/retry")
async def retry(session_id: str, who: Tenant, sessions: Manager, accept: Accept = None) -> Any:
    """Regenerate the last reply (O1); 409 while compacting (U4)."""
    return await _turn(sessions, who, session_id, "retry", None, accept)


@router.post("/sessions/{session_id}/edit")
async def edit(session_id: str, body: Text, who: Tenant, sessions: Manager,
               accept: Accept = None) -> Any:
    """Replace the last user message and answer it again (O2); 409 while compacting (U4)."""
    return await _turn(sessions, who, session_id, "edit", body.text, accept)


async def _turn(sessions: SessionManager, who: str, session_id: str, op: Op,
                text: str | None, accept: str | None) -> Any:
    limit = sessions.config.max_message_chars
    if text is not None and len(text) > limit:
        raise ApiError(413, "message_too_large",
                       f"the message is longer than {limit} characters", limit_chars=limit)
    live = await sessions.get(who, session_id)
    if live.turns > 0:
        raise ApiError(409, "busy", "another turn of this session is running; wait for its "
                       "reply")
    if op != "send":
        await sessions.ensure_not_compacting(live, op)
    turn_id = uuid.uuid4().hex
    if not wants_sse(accept):
        task = asyncio.create_task(_run(sessions, live, op, text, turn_id))
        return await asyncio.shield(task)
    return sse_response(_stream(sessions, live, op, text, turn_id))


async def _run(sessions: SessionManager, live: Live, op: Op, text: str | None,
               turn_id: str) -> dict[str, Any]:
    conv = live.conv

    def on_text(piece: str) -> None:
        sessions.hub.publish(live.session_id, "delta", {"text": piece, "turn_id": turn_id})

    live.turns += 1
    sessions.publish_state(live)
    try:
        if op == "send":
            assert text is not None
            await sessions.wait_remote_compaction(live, text)
            result = await conv.send(text, on_text=on_text)
        elif op == "retry":
            result = await conv.retry(on_text=on_text)
        else:
            assert text is not None
            result = await conv.edit(text, on_text=on_text)
    finally:
        live.turns -= 1
        sessions.publish_state(live)
        sessions.publish_gauge(live)
    for node in result.nodes:
        role = node.message.role if node.message is not None else None
        sessions.hub.publish(live.session_id, "message", {"node_id": node.id, "role": role})
    return turn_json(result, conv.gauge(), await sessions.session_json(live))


async def _stream(sessions: SessionManager, live: Live, op: Op, text: str | None,
                  turn_id: str) -> AsyncIterator[str]:
    keepalive = sessions.config.keepalive_seconds
    with sessions.hub.subscribe(live.session_id) as sub:
        yield sse("state", await sessions.state(live))
        task = asyncio.create_task(_run(sessions, live, op, text, turn_id))
        # If the client goes away the turn still ends; its error is then only logged here.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        while True:
            getter = asyncio.ensure_future(sub.queue.get())
            done, _ = await asyncio.wait({getter, task}, timeout=keepalive,
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                out = _forward(getter.result(), turn_id)
                if out:
                    yield out
            else:
                getter.cancel()
            if task in done:
                while not sub.queue.empty():  # what the turn published before it ended
                    out = _forward(sub.queue.get_nowait(), turn_id)
                    if out:
                        yield out
                break
            if not done:
                yield KEEPALIVE
        error = task.exception()
        if error is None:
            yield sse("done", task.result())
        else:
            err = as_api_error(error)
            yield sse("error", {**err.body(), "status": err.status})


def _forward(event: Any, turn_id: str) -> str | None:
    if event.name == "delta":
        return sse("delta", {"text": event.data.get("text", "")}) \
            if event.data.get("turn_id") == turn_id else None
    return sse(event.name, event.data) if event.name in _FORWARDED else None
