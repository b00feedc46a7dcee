"""`run_now`: finish a coroutine that never waits, without an event loop.

Some of contextfold's coroutines are `async` only to share one API with code that does wait:
the embedded database's snapshot reads (sqlite3 never waits) and replay over the in-memory
store (`store.memory`) with the offline summariser. Such a coroutine finishes in its first
step, so no event loop (nor, on the read-only commands, the import of asyncio) is needed.
One that waits for anything else raises `WouldWait`, and the caller runs it under asyncio
instead: a bare yield suspends it here, and an asyncio call that needs a running loop (a
timed sleep, `to_thread`, ...) raises RuntimeError in this first step.
"""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")


class WouldWait(RuntimeError):
    """The coroutine waited for something, so it cannot finish without an event loop."""


def run_now(work: Awaitable[T]) -> T:
    """The result of `work`, which must finish without waiting (else `WouldWait`)."""
    step = work.__await__()
    try:
        step.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except RuntimeError as exc:
        if isinstance(exc, WouldWait):
            raise
        raise WouldWait(f"it needs an event loop: {exc}") from None
    with suppress(RuntimeError):  # a coroutine that awaits again while being closed
        step.close()
    raise WouldWait("it awaited something that waits")
