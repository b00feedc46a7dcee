"""Turns over HTTP: send, retry, edit; JSON, or server-sent events when asked.

A turn runs as its own task: a client that disconnects does not cut it (an acknowledged
message is stored and answered whatever the connection does). Errors found before the turn
starts are answered as plain JSON with their status, also to an SSE request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header
from pydantic import Field

from ..runtime import SendResult
from ..runtime.turns import OnText
from ..store import DuplicateNodeError, StaleBranchError
from .deps import Body, Manager, Tenant
from .errors import ApiError, as_api_error
from .idempotency import (
    HEADER,
    StoredTurn,
    message_node_id,
    stored_anywhere,
    stored_in_tail,
)
from .live import Live
from .sessions import SessionManager
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
IdempotencyKey = Annotated[str | None, Header(
    alias=HEADER, description="One key per message (e.g. a UUID): sending again with the "
    "same key never stores the message twice (docs/service.md, Idempotent sends)")]


@router.post("/sessions/{session_id}/messages")
async def send_message(session_id: str, body: Text, who: Tenant, sessions: Manager,
                       accept: Accept = None, idempotency_key: IdempotencyKey = None) -> Any:
    """Send a user message; the reply as JSON, or streamed (Accept: text/event-stream).
    During a compaction it waits and then goes out (U2); if the compaction is cancelled
    or fails, 409 send_aborted and nothing is sent or saved (U3). With an
    `Idempotency-Key`, a repeated send answers the stored turn instead of storing twice."""
    return await _turn(sessions, who, session_id, "send", body.text, accept, idempotency_key)


@router.post("/sessions/{session_id}/retry")
async def retry(session_id: str, who: Tenant, sessions: Manager, accept: Accept = None) -> Any:
    """Regenerate the last reply (O1); 409 while compacting (U4)."""
    return await _turn(sessions, who, session_id, "retry", None, accept)


@router.post("/sessions/{session_id}/edit")
async def edit(session_id: str, body: Text, who: Tenant, sessions: Manager,
               accept: Accept = None) -> Any:
    """Replace the last user message and answer it again (O2); 409 while compacting (U4)."""
    return await _turn(sessions, who, session_id, "edit", body.text, accept)


@dataclasses.dataclass(frozen=True)
class _Job:
    """One turn to run: the operation, its text, and the key of an idempotent send."""

    op: Op
    text: str | None
    key: str | None = None
    node_id: str | None = None  # the user message's id, derived from the key
    turn_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)


async def _turn(sessions: SessionManager, who: str, session_id: str, op: Op,
                text: str | None, accept: str | None, key: str | None = None) -> Any:
    limit = sessions.config.max_message_chars
    if text is not None and len(text) > limit:
        raise ApiError(413, "message_too_large",
                       f"the message is longer than {limit} characters", limit_chars=limit)
    live = await sessions.get(who, session_id)
    session_id = live.session_id  # the key names a node of the whole id, whatever was given
    node_id = message_node_id(session_id, key) if key is not None else None
    if live.turns > 0:
        if node_id is not None and node_id in live.keyed:
            raise ApiError(409, "in_progress", f"a send with this {HEADER} is still running; "
                           "its reply comes shortly: send again to get it",
                           headers={"Retry-After": "1"})
        raise ApiError(409, "busy", "another turn of this session is running; wait for its "
                       "reply")
    if op != "send":
        await sessions.ensure_not_compacting(live, op)
    sessions.ensure_servable(live)  # a model this server cannot serve: 409, nothing stored
    job = _Job(op, text, key, node_id)
    if not wants_sse(accept):
        task = asyncio.create_task(_run(sessions, live, job))
        return await asyncio.shield(task)
    return sse_response(_stream(sessions, live, job))


async def _run(sessions: SessionManager, live: Live, job: _Job) -> dict[str, Any]:
    conv = live.conv

    def on_text(piece: str) -> None:
        sessions.hub.publish(live.session_id, "delta", {"text": piece, "turn_id": job.turn_id})

    live.turns += 1
    if job.node_id is not None:
        live.keyed.add(job.node_id)
    sessions.publish_state(live)
    replayed = False
    try:
        if job.op == "send" and job.node_id is not None:
            result, replayed = await _keyed_send(sessions, live, job, on_text)
        elif job.op == "send":
            assert job.text is not None
            await sessions.wait_remote_compaction(live, job.text)
            result = await conv.send(job.text, on_text=on_text)
        elif job.op == "retry":
            result = await conv.retry(on_text=on_text)
        else:
            assert job.text is not None
            result = await conv.edit(job.text, on_text=on_text)
    finally:
        live.turns -= 1
        live.keyed.discard(job.node_id)
        sessions.resize(live)  # its branch grew: its size in the worker's cache
        sessions.publish_state(live)
        sessions.publish_gauge(live)
    if not replayed:
        for node in result.nodes:
            role = node.message.role if node.message is not None else None
            sessions.hub.publish(live.session_id, "message", {"node_id": node.id, "role": role})
    return turn_json(result, conv.gauge(), await sessions.session_json(live), replayed=replayed)


async def _keyed_send(sessions: SessionManager, live: Live, job: _Job,
                      on_text: OnText) -> tuple[SendResult, bool]:
    """A send with an Idempotency-Key: (the turn, whether it is the stored one replayed).

    The user message is stored under the key's node id, so the store writes it at most
    once whatever races; what is already stored decides the rest (docs/service.md).
    """
    conv, text, key, node_id = live.conv, job.text, job.key, job.node_id
    assert text is not None and key is not None and node_id is not None
    try:
        turn = stored_in_tail(conv, node_id, text, key)
        if turn is None:
            await sessions.wait_remote_compaction(live, text)
            return await conv.send(text, on_text=on_text, node_id=node_id), False
    except (DuplicateNodeError, StaleBranchError):
        # Another attempt with this key wrote first (on another worker, or its answer was
        # lost): read what is stored now and go on from there.
        await conv.reload()
        turn = await stored_anywhere(conv, node_id, text, key)
        if turn is None:
            raise
    return await _finish(sessions, live, turn, job, on_text)


async def _finish(sessions: SessionManager, live: Live, turn: StoredTurn, job: _Job,
                  on_text: OnText) -> tuple[SendResult, bool]:
    """The stored turn of a repeated send: replayed if answered, else answered now."""
    conv = live.conv
    if turn.reply is not None:
        return turn.result(), True
    if turn.nodes[-1].id != conv.branch.leaf_id:  # type: ignore[union-attr]
        raise ApiError(409, "idempotency_key_replaced",
                       f"the message sent with this {HEADER} was stored but never answered, "
                       "and the session has moved on; send it again with a new key")
    assert job.text is not None
    await sessions.wait_remote_compaction(live, job.text)
    try:
        result = await conv.continue_turn(on_text=on_text)
    except StaleBranchError:
        # A live first attempt (another worker) stored its reply first: answer that one.
        await conv.reload()
        again = stored_in_tail(conv, turn.nodes[0].id, job.text, job.key or "")
        if again is None or again.reply is None:
            raise
        return again.result(), True
    return dataclasses.replace(result, nodes=turn.messages + result.nodes), False


async def _stream(sessions: SessionManager, live: Live, job: _Job) -> AsyncIterator[str]:
    keepalive = sessions.config.keepalive_seconds
    turn_id = job.turn_id
    with sessions.hub.subscribe(live.session_id) as sub:
        yield sse("state", await sessions.state(live))
        task = asyncio.create_task(_run(sessions, live, job))
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
