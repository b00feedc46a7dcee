"""The one bearer-token check of the service and the proxy (SPEC W2, Y8).

A token names a tenant (`contextfold token create TENANT`; the store keeps only its SHA-256
digest, `store/sql/tenancy.py`). Guessing is rate-limited per client address: after
`failures_per_minute` bad tokens from one address, every token check from it answers 429
until the bucket refills, a right token included, so a guesser cannot tell a hit from a miss
while it is limited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rate import RateLimiter

FAILURES_PER_MINUTE = 20

if TYPE_CHECKING:
    from ..store.protocol import SessionStore


class TokenRefused(Exception):
    """No tenant for this request: 401 (no or a bad token) or 429 (too many bad tokens)."""

    def __init__(self, status: int, type_: str, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers


def bearer_value(value: str | None, *, scheme_required: bool = True) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (`scheme_required=False`: the
    bare token is accepted too, as in the proxy's own header)."""
    if not value:
        return None
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() == "bearer" and rest.strip():
        return rest.strip()
    if not scheme_required and not rest:
        return scheme
    return None


class BearerAuth:
    """Tokens of `store` (its `tenant_for_token`), with bad attempts limited per address."""

    def __init__(self, store: SessionStore, *, failures_per_minute: int = FAILURES_PER_MINUTE,
                 hint: str = "Authorization: Bearer <token>") -> None:
        self.store = store
        self.failures = RateLimiter(failures_per_minute, max_keys=10_000)
        self.hint = hint

    async def tenant(self, token: str | None, client: str | None) -> str:
        """The tenant `token` belongs to; `TokenRefused` otherwise."""
        address = client or "unknown"
        wait = self.failures.waiting(address)
        if wait is not None:
            raise self._limited(wait)
        found = await self.store.tenant_for_token(token) if token else None
        if found is not None:
            return found
        wait = self.failures.check(address)
        if wait is not None:
            raise self._limited(wait)
        raise TokenRefused(401, "unauthorized", f"a valid bearer token is required ({self.hint};"
                           " see `contextfold token create`)", {"WWW-Authenticate": "Bearer"})

    def _limited(self, wait: float) -> TokenRefused:
        after = RateLimiter.retry_after(wait)
        return TokenRefused(429, "rate_limited", "too many requests with a wrong token from "
                            f"this address; retry in {after} s", {"Retry-After": after})
