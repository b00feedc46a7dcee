"""Who is calling (SPEC W1, W2) and whether they may call now (W3).

With `--auth`, the bearer token names the tenant (the store keeps only its SHA-256; the
check, with its limit on bad tokens per client address, is `guard.bearer`, shared with the
proxy); without it every caller is the "default" tenant. The per-tenant rate limit is
applied here too, so every `/v1` route gets both by depending on `tenant`.
"""

from __future__ import annotations

from fastapi import Request

from ..guard.bearer import TokenRefused, bearer_value
from ..guard.rate import RateLimiter
from ..store import DEFAULT_TENANT
from .errors import ApiError


async def tenant(request: Request) -> str:
    """The caller's tenant (401 without a valid token under --auth, 429 after too many bad
    ones from the caller's address; 429 over the tenant's rate)."""
    service = request.app.state.service
    if service.config.auth:
        token = bearer_value(request.headers.get("authorization"))
        try:
            who = await service.bearer.tenant(token, request.client.host if request.client
                                              else None)
        except TokenRefused as exc:
            extra = {"retry_after": float(exc.headers["Retry-After"])} \
                if "Retry-After" in exc.headers else {}
            raise ApiError(exc.status, exc.type, exc.message, headers=exc.headers,
                           **extra) from None
    else:
        who = DEFAULT_TENANT
    limiter: RateLimiter = service.limiter
    wait = limiter.check(who)
    if wait is not None:
        raise ApiError(429, "rate_limited", f"more than {limiter.per_minute} requests a minute; "
                       "slow down", headers={"Retry-After": limiter.retry_after(wait)},
                       retry_after=float(limiter.retry_after(wait)))
    return who
