"""Retrying a stream safely: only while nothing has been delivered yet.

Once a text delta has reached the caller it cannot be taken back, so a failure after that
point is a `StreamInterruptedError` carrying the partial reply (raised by the adapter), and
is never retried. A failure before the first event is retried like a plain request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from .base import StreamEvent
from .errors import ProviderError
from .retry import RetryPolicy, retry_wait


async def stream_with_retries(
    run: Callable[[], AsyncIterator[StreamEvent]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncIterator[StreamEvent]:
    """Yield the events of `run()`, restarting it on a retryable failure before any event."""
    for number in range(1, policy.max_attempts + 1):
        delivered = False
        try:
            # aclosing: a caller that stops early must close the HTTP stream now, not at GC.
            async with contextlib.aclosing(run()) as events:
                async for event in events:
                    delivered = True
                    yield event
            return
        except ProviderError as exc:
            wait = retry_wait(exc, number, policy, what="stream attempt", final=delivered)
            if wait is None:
                raise
            await sleep(wait)
