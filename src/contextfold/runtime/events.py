"""The state a UI shows and the events a UI or a log consumes (SPEC U1-U4).

`ConversationState` is a small value: idle, compacting (since when, why, cancellable) or
failed (why). `Event`s describe what happened: compaction started / finished / no-op /
failed / cancelled / stale, a preflight that blocked a draft, a provider overflow, a model
switch. `EventBus` fans them out to any number of async iterators and callbacks; it never
blocks the conversation (queues are unbounded, callbacks must be quick).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ..core.planning.plan import Trigger
from .compaction import CompactionOutcome

Phase = Literal["idle", "compacting", "failed"]

EventKind = Literal[
    "compaction_started",
    "compaction_finished",
    "compaction_noop",
    "compaction_failed",
    "compaction_cancelled",
    "compaction_stale",
    "summarizer_fallback",
    "preflight_blocked",
    "overflow",
    "model_switched",
    "branch_changed",
]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ConversationState:
    """What a UI shows: idle, compacting (with `started_at`, `trigger`, `cancellable`), or
    failed (with `reason`). A failed state is informational: the next operation clears it."""

    phase: Phase = "idle"
    trigger: Trigger | None = None
    started_at: datetime | None = None
    cancellable: bool = False
    reason: str | None = None

    @property
    def compacting(self) -> bool:
        return self.phase == "compacting"

    @classmethod
    def idle(cls) -> ConversationState:
        return cls()

    @classmethod
    def compacting_now(cls, trigger: Trigger) -> ConversationState:
        return cls(phase="compacting", trigger=trigger, started_at=_now(), cancellable=True)

    @classmethod
    def failed(cls, reason: str, trigger: Trigger | None = None) -> ConversationState:
        return cls(phase="failed", trigger=trigger, reason=reason)


@dataclass(frozen=True)
class Event:
    """One thing that happened in a conversation.

    `outcome` is set for compaction events that produced one; `tokens`/`limit` for
    preflight and overflow events (estimated request size and the safe limit); `reason`
    is a sentence for people; `data` holds anything else worth logging.
    """

    kind: EventKind
    session_id: str
    trigger: Trigger | None = None
    outcome: CompactionOutcome | None = None
    reason: str | None = None
    tokens: int | None = None
    limit: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    at: datetime = field(default_factory=_now)


_CLOSED = object()


class EventBus:
    """Publish events to async iterators (`stream()`) and callbacks (`subscribe()`)."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[Any]] = []
        self._callbacks: list[Callable[[Event], Any]] = []
        self._closed = False

    def publish(self, event: Event) -> None:
        """Deliver `event` to every subscriber. A failing callback never breaks the caller."""
        for queue in list(self._queues):
            queue.put_nowait(event)
        for callback in list(self._callbacks):
            with contextlib.suppress(Exception):
                callback(event)

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call `callback(event)` for every future event; returns an unsubscribe function."""
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return unsubscribe

    def stream(self) -> EventStream:
        """Every event from now on (registered at this call), until the bus is closed."""
        stream = EventStream(self)
        if self._closed:
            stream.queue.put_nowait(_CLOSED)
        else:
            self._queues.append(stream.queue)
        return stream

    def _forget(self, queue: asyncio.Queue[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    def close(self) -> None:
        """End every `stream()`; later events still reach callbacks until unsubscribed."""
        self._closed = True
        for queue in list(self._queues):
            queue.put_nowait(_CLOSED)


class EventStream:
    """An async iterator over a bus's events; `close()` (or `aclose()`) stops it early."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        item = await self.queue.get()
        if item is _CLOSED:
            self._bus._forget(self.queue)
            raise StopAsyncIteration
        return item

    def pending(self) -> list[Event]:
        """Events already delivered and not yet read (without waiting)."""
        out: list[Event] = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is _CLOSED:
                self.queue.put_nowait(_CLOSED)
                break
            out.append(item)
        return out

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        self._bus._forget(self.queue)
        self.queue.put_nowait(_CLOSED)
