"""Runs one compaction at a time as a cancellable task, keeping the UI state and events true.

Both automatic compactions (in the background, between turns: SPEC A1, A4) and foreground
ones (manual, preflight) go through `CompactionRunner.start`, so there is one place that
says "compacting since ...", honours a cancel (C4: the store rolls the commit back), syncs
the in-memory branch afterwards (C3 stale or C5 committed) and reports what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from ..core.planning.plan import Trigger
from .compaction import CompactionOutcome
from .events import ConversationState, Event, EventBus, EventKind

Work = Callable[[], Awaitable[CompactionOutcome]]
Sync = Callable[[], Awaitable[None]]

_KIND_OF: dict[str, EventKind] = {
    "compacted": "compaction_finished",
    "noop": "compaction_noop",
    "stale": "compaction_stale",
}


@dataclass(frozen=True)
class Finished:
    """How a compaction ended: its outcome, or that it was cancelled or failed (`error`)."""

    status: Literal["compacted", "noop", "stale", "cancelled", "failed"]
    outcome: CompactionOutcome | None = None
    error: BaseException | None = None
    trigger: Trigger | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("compacted", "noop", "stale")


class CompactionRunner:
    """At most one compaction task per conversation, with its state and events."""

    def __init__(self, session_id: str, bus: EventBus, sync: Sync) -> None:
        self.session_id = session_id
        self._bus = bus
        self._sync = sync
        self._task: asyncio.Task[CompactionOutcome] | None = None
        self._trigger: Trigger | None = None
        self.state = ConversationState.idle()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, trigger: Trigger, work: Work) -> None:
        """Start `work` as the running compaction (the caller checked nothing runs)."""
        if self.running:  # pragma: no cover - callers check first; a bug if reached
            raise RuntimeError("a compaction is already running")
        self._trigger = trigger
        self.state = ConversationState.compacting_now(trigger)
        self._publish("compaction_started", trigger)
        task = asyncio.create_task(self._body(trigger, work), name=f"compaction:{trigger}")
        task.add_done_callback(self._on_done)
        self._task = task

    async def wait(self) -> Finished | None:
        """Wait for the current (or just finished) compaction; None if there was none.

        Never raises for the compaction's own failure or cancellation: the result says so.
        The finished task is forgotten, so each result is handed out once.
        """
        task = self._task
        if task is None:
            return None
        await asyncio.wait({task})
        self._task = None
        trigger = self._trigger
        if task.cancelled():
            return Finished("cancelled", trigger=trigger)
        error = task.exception()
        if error is not None:
            return Finished("failed", error=error, trigger=trigger)
        outcome = task.result()
        return Finished(outcome.status, outcome, trigger=trigger)

    def take_finished(self) -> Finished | None:
        """Forget a compaction that already ended (without waiting); None if none/running."""
        if self._task is None or not self._task.done():
            return None
        task, self._task = self._task, None
        if task.cancelled():
            return Finished("cancelled", trigger=self._trigger)
        error = task.exception()
        if error is not None:
            return Finished("failed", error=error, trigger=self._trigger)
        return Finished(task.result().status, task.result(), trigger=self._trigger)

    def cancel(self) -> bool:
        """Cancel the running compaction (SPEC C4, U1); False if nothing was running."""
        if not self.running:
            return False
        assert self._task is not None
        self._task.cancel()
        return True

    def clear_failure(self) -> None:
        if self.state.phase == "failed":
            self.state = ConversationState.idle()

    async def _body(self, trigger: Trigger, work: Work) -> CompactionOutcome:
        try:
            outcome = await work()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self._sync()
            reason = f"{type(exc).__name__}: {exc}"
            self.state = ConversationState.failed(reason, trigger)
            self._publish("compaction_failed", trigger, reason=reason)
            raise
        await self._sync()  # C3 (stale: the real branch) and C5 (committed: the new leaf)
        self.state = ConversationState.idle()
        self._publish(_KIND_OF[outcome.status], trigger, outcome=outcome, reason=outcome.reason)
        return outcome

    def _on_done(self, task: asyncio.Task[CompactionOutcome]) -> None:
        if not task.cancelled():
            task.exception()  # a background failure nobody awaits must not be logged as lost
            return
        # Cancelled (possibly before its first step). The store rolled the commit back (C4)
        # and the in-memory branch is only replaced after a commit, so nothing to re-sync.
        if self.state.compacting:
            self.state = ConversationState.idle()
        self._publish("compaction_cancelled", self._trigger, reason="cancelled by the user")

    def _publish(self, kind: EventKind, trigger: Trigger | None, *,
                 outcome: CompactionOutcome | None = None, reason: str | None = None) -> None:
        self._bus.publish(Event(kind=kind, session_id=self.session_id, trigger=trigger,
                                outcome=outcome, reason=reason))


