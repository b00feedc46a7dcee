"""Bounded retries with exponential backoff for `RetryableError`s.

The SDKs' own retry loops are switched off (`max_retries=0`) and this one is used instead,
for three reasons: the total number of attempts is exactly `max_attempts` (the SDKs would
multiply with any outer loop), a context overflow is never retried, and the count is
observable (`ProviderError.attempts`), so tests can assert on it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import ProviderError, RetryableError

T = TypeVar("T")
log = logging.getLogger("contextfold.providers")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    max_attempts  total tries, the first included (1 = never retry)
    base_delay    wait before the second try; doubles (times `multiplier`) after each one
    max_delay     cap on any single wait, including a server's Retry-After
    jitter        +/- this share of randomness on each wait, so clients do not stampede
    """

    max_attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 20.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(
                f"RetryPolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryPolicy delays must not be negative")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"RetryPolicy.jitter must be within 0..1, got {self.jitter}")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after is not None:
            return min(self.max_delay, retry_after)
        wait = min(self.max_delay, self.base_delay * self.multiplier ** (attempt - 1))
        if self.jitter:
            wait *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, wait)


NO_RETRY = RetryPolicy(max_attempts=1)


def retry_wait(exc: ProviderError, number: int, policy: RetryPolicy, *,
               what: str = "attempt", final: bool = False) -> float | None:
    """Record that attempt `number` failed with `exc`; return how long to wait before the next.

    None means `exc` ends the loop and must be raised: it is not a `RetryableError`, the
    attempts are used up, or the caller says this failure is `final` (a stream that already
    delivered text). Either way `exc.attempts` says how many attempts were made.
    """
    exc.attempts = number
    if final or not isinstance(exc, RetryableError) or number == policy.max_attempts:
        return None
    wait = policy.delay(number, exc.retry_after)
    # Error texts are already redacted (errors.redact), so they are safe to log.
    log.info("%s %d/%d failed (%s); retrying in %.2fs", what, number, policy.max_attempts,
             exc, wait)
    return wait


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Run `attempt` until it succeeds, fails for good, or `policy.max_attempts` is used up.

    Only `RetryableError`s are retried. The error that ends the loop carries how many
    attempts were made.
    """
    for number in range(1, policy.max_attempts + 1):
        try:
            return await attempt()
        except ProviderError as exc:
            wait = retry_wait(exc, number, policy)
            if wait is None:
                raise
            await sleep(wait)
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover
