"""Retrying a stream safely: only while nothing has been delivered yet.

Once a text delta has reached the caller it cannot be taken back, so a failure after that
point is a `StreamInterruptedError` carrying the partial reply (raised by the adapter), and
is never retried. A failure before the first event is retried like a plain request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from .base import StreamEvent
from .errors import ProviderError, RetryableError
from .retry import RetryPolicy


async def stream_with_retries(
    run: Callable[[], AsyncIterator[StreamEvent]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncIterator[StreamEvent]:
    """Yield the events of `run()`, restarting it on a retryable failure before any event."""
    for number in range(1, policy.max_attempts + 1):
        delivered = False
        try:
            async for event in run():
                delivered = True
                yield event
            return
        except RetryableError as exc:
            exc.attempts = number
            if delivered or number == policy.max_attempts:
                raise
            await sleep(policy.delay(number, exc.retry_after))
        except ProviderError as exc:
            exc.attempts = number
            raise
