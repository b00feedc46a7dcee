"""Who is calling (SPEC W1, W2) and whether they may call now (W3).

With `--auth`, the bearer token names the tenant (the store keeps only its SHA-256); without
it every caller is the "default" tenant. The per-tenant rate limit is applied here too, so
every `/v1` route gets both by depending on `tenant`.
"""

from __future__ import annotations

from fastapi import Request

from ..store import DEFAULT_TENANT
from .errors import ApiError
from .limits import RateLimiter


async def tenant(request: Request) -> str:
    """The caller's tenant (401 without a valid token under --auth; 429 over the rate)."""
    service = request.app.state.service
    if service.config.auth:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        found = None
        if scheme.lower() == "bearer" and token.strip():
            found = await service.store.tenant_for_token(token.strip())
        if found is None:
            raise ApiError(401, "unauthorized", "a valid bearer token is required "
                           "(Authorization: Bearer <token>; see `contextfold token create`)",
                           headers={"WWW-Authenticate": "Bearer"})
        who = found
    else:
        who = DEFAULT_TENANT
    limiter: RateLimiter = service.limiter
    wait = limiter.check(who)
    if wait is not None:
        raise ApiError(429, "rate_limited", f"more than {limiter.per_minute} requests a minute; "
                       "slow down", headers={"Retry-After": limiter.retry_after(wait)},
                       retry_after=float(limiter.retry_after(wait)))
    return who
