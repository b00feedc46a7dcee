"""Retrying a stream safely: only while nothing has been delivered yet.

Once a text delta has reached the caller it cannot be taken back, so a failure after that
point is a `StreamInterruptedError` carrying the partial reply (raised by the adapter), and
is never retried. A failure before the first event is retried like a plain request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from .base import StreamEvent
from .errors import ProviderError, RetryableError
from .retry import RetryPolicy

log = logging.getLogger("contextfold.providers")


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
        except RetryableError as exc:
            exc.attempts = number
            if delivered or number == policy.max_attempts:
                raise
            wait = policy.delay(number, exc.retry_after)
            log.info("stream attempt %d/%d failed (%s); retrying in %.2fs", number,
                     policy.max_attempts, exc, wait)
            await sleep(wait)
        except ProviderError as exc:
            exc.attempts = number
            raise
