"""Session events and cancel requests, fanned out to every worker (docs/service.md).

`Hub` delivers in memory (one process: SQLite, or tests). `PgHub` also sends each event
through PostgreSQL `NOTIFY` on one channel and `LISTEN`s to it, so an events stream on any
worker sees what every worker does, and a cancel reaches the worker running the compaction.
A notification carries its origin first, so a worker drops its own without parsing it (it
never delivers its own event twice); the deltas of one turn queued together go out as one
notification (their texts joined, in order): a reply streamed in 18 pieces was 18
notifications sent and 18 read back, a fifth of a service turn's CPU (issue 26).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("contextfold.server")

CHANNEL = "contextfold_events"
_MAX_PAYLOAD = 7900  # PostgreSQL refuses NOTIFY payloads of 8000 bytes or more
# Joined deltas stop at this many characters: it fits even if each one escapes to 6 bytes.
_JOIN_CHARS = _MAX_PAYLOAD // 8


@dataclass(frozen=True)
class HubEvent:
    """One server-sent event of a session: its SSE name and JSON data."""

    session_id: str
    name: str
    data: dict[str, Any]


class Subscription:
    """Events of one session from the moment of subscribing; iterate or `get()`."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[HubEvent] = asyncio.Queue()

    async def get(self, timeout: float | None = None) -> HubEvent | None:
        """The next event; None after `timeout` seconds without one."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None


class Hub:
    """In-process fan-out of session events and cancel requests."""

    def __init__(self) -> None:
        self.origin = uuid.uuid4().hex
        self._subs: dict[str, set[Subscription]] = {}
        self.on_cancel: Callable[[str], bool] | None = None

    async def start(self) -> None:
        """Begin receiving from other workers (nothing to do in memory)."""

    async def stop(self) -> None:
        """Stop receiving; subscriptions simply see no more events."""

    def publish(self, session_id: str, name: str, data: dict[str, Any]) -> None:
        """Deliver an event to this process's subscribers of `session_id` (and others')."""
        self._deliver(HubEvent(session_id, name, data))
        self._send_remote({"s": session_id, "e": name, "d": data})

    def request_cancel(self, session_id: str) -> bool:
        """Ask whichever worker runs `session_id`'s compaction to cancel it; True if this
        process had one (a remote one is asked through the channel)."""
        local = bool(self.on_cancel and self.on_cancel(session_id))
        if not local:
            self._send_remote({"s": session_id, "cancel": True})
        return local

    @contextlib.contextmanager
    def subscribe(self, session_id: str) -> Iterator[Subscription]:
        """`with hub.subscribe(sid) as sub:` events of `sid` until the block ends."""
        sub = Subscription()
        self._subs.setdefault(session_id, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._subs.get(session_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[session_id]

    def _deliver(self, event: HubEvent) -> None:
        for sub in list(self._subs.get(event.session_id, ())):
            sub.queue.put_nowait(event)

    def _send_remote(self, message: dict[str, Any]) -> None:
        """Other workers: none in memory."""

    def _received(self, raw: str) -> None:
        """A notification from the channel (any worker, this one included)."""
        try:
            message = json.loads(raw)
        except ValueError:
            return
        if message.get("o") == self.origin:
            return
        session_id = message.get("s")
        if not isinstance(session_id, str):
            return
        if message.get("cancel"):
            if self.on_cancel is not None:
                self.on_cancel(session_id)
            return
        self._deliver(HubEvent(session_id, str(message.get("e")), message.get("d") or {}))


class PgHub(Hub):
    """`Hub` across workers through PostgreSQL LISTEN/NOTIFY (`conninfo`: a libpq URL)."""

    def __init__(self, conninfo: str) -> None:
        super().__init__()
        self._conninfo = conninfo
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._own = f'{{"o":"{self.origin}"'  # how this worker's notifications begin
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = asyncio.Event()

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._listen(), name="hub-listen"),
                       asyncio.create_task(self._send_loop(), name="hub-notify")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), 10)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # Never hang a shutdown on a connection the database does not answer.
            await asyncio.wait(self._tasks, timeout=5)

    def _send_remote(self, message: dict[str, Any]) -> None:
        self._outbox.put_nowait({"o": self.origin, **message})  # encoded when sent

    def _received(self, raw: str) -> None:
        if raw.startswith(self._own):
            return  # this worker's own, delivered already
        super()._received(raw)

    async def _listen(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._conninfo, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    while True:
                        # Bounded waits: a generator parked in the driver is not always
                        # cancellable at once, and stop() must not hang on it.
                        async for note in conn.notifies(timeout=1.0):
                            self._received(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: reconnect, never crash
                log.warning("event channel lost (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(1.0)

    async def _send_loop(self) -> None:
        import psycopg

        while True:
            batch = [await self._outbox.get()]
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._conninfo, autocommit=True) as conn:
                    while True:
                        while not self._outbox.empty() and len(batch) < 200:
                            batch.append(self._outbox.get_nowait())
                        # One round trip for everything queued (a streamed reply's deltas),
                        # in their order, as NOTIFY delivers them. One JSON array, not a
                        # text[]: the driver escapes an array's every quote with a regex.
                        payloads = json.dumps([encode(m) for m in joined_deltas(batch)],
                                              ensure_ascii=False)
                        await conn.execute(
                            "SELECT pg_notify(%s, payload) FROM json_array_elements_text(%s::json) "
                            "WITH ORDINALITY AS t(payload, n) ORDER BY n", (CHANNEL, payloads))
                        try:  # keep the connection while events keep coming
                            batch = [await asyncio.wait_for(self._outbox.get(), 5.0)]
                        except TimeoutError:
                            break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("could not publish %d event(s) (%s)", len(batch),
                            type(exc).__name__)
                await asyncio.sleep(0.5)


def joined_deltas(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with each run of consecutive deltas of one turn made one delta (their
    texts joined in order, while the joined text fits a notification); everything else as
    it was, in the same order."""
    out: list[dict[str, Any]] = []
    for message in messages:
        last = out[-1] if out else None
        data = message.get("d")
        if last is not None and message.get("e") == "delta" and last.get("e") == "delta" \
                and last["s"] == message.get("s") and isinstance(data, dict) \
                and set(data) == {"text", "turn_id"} and set(last["d"]) == set(data) \
                and last["d"]["turn_id"] == data["turn_id"] \
                and len(last["d"]["text"]) + len(data["text"]) <= _JOIN_CHARS:
            out[-1] = {**last, "d": {**data, "text": last["d"]["text"] + data["text"]}}
        else:
            out.append(message)
    return out


def encode(message: dict[str, Any]) -> str:
    """One notification's payload: the message as JSON, origin first; a message too big for
    a notification keeps only its kind and reason (marked `truncated`)."""
    raw = json.dumps(message, separators=(",", ":"), ensure_ascii=False, default=str)
    if len(raw.encode()) > _MAX_PAYLOAD and "d" in message:
        data = message["d"]
        message = {**message,
                   "d": {k: data[k] for k in ("trigger", "reason", "phase") if k in data}}
        message["d"]["truncated"] = True
        raw = json.dumps(message, separators=(",", ":"), ensure_ascii=False, default=str)
    return raw
