"""Token buckets (SPEC W3): a request rate per tenant, and bad tokens per client address."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable


class RateLimiter:
    """A token bucket per key: `per_minute` requests a minute, bursts up to that many.

    Per process: with N workers a key may get up to N times the rate (docs/service.md).
    At most `max_keys` buckets are kept (the least recently used go first, as if full
    again), so keys chosen by clients (their addresses) cannot grow it without bound.
    """

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic, *,
                 max_keys: int = 100_000) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # (tokens, at)

    def _tokens(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.per_minute), now))
        return min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)

    def _store(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)

    def check(self, key: str) -> float | None:
        """Take one request from `key`'s bucket; None if allowed, else seconds to wait."""
        if self.per_minute <= 0:
            return None
        now = self._clock()
        tokens = self._tokens(key, now)
        if tokens >= 1.0:
            self._store(key, tokens - 1.0, now)
            return None
        self._store(key, tokens, now)
        return (1.0 - tokens) * 60.0 / self.per_minute

    def waiting(self, key: str) -> float | None:
        """Seconds until `key` may make a request again (None: it may now); takes nothing."""
        if self.per_minute <= 0 or key not in self._buckets:
            return None
        tokens = self._tokens(key, self._clock())
        return None if tokens >= 1.0 else (1.0 - tokens) * 60.0 / self.per_minute

    @staticmethod
    def retry_after(wait: float) -> str:
        """The `Retry-After` value for a wait: whole seconds, at least 1."""
        return str(max(1, math.ceil(wait)))
