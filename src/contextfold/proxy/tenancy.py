"""The proxy's tenant (SPEC W1 under `contextfold proxy --auth`): the tenant of the request's
token, for the duration of that request and of everything it starts.

The token check (`guards.ProxyAuth`) sets `CURRENT_TENANT`; `TenantRouted` is the store the
proxy's mirror works on: each call goes to `store.for_tenant(tenant)` when a tenant is set,
so the sessions a client's conversations create belong to its tenant and another tenant's
sessions are never continued (the chain scope names the tenant too, `identity.py`). A
context variable rather than an argument because the mirror (runtime) is shared by every
request, and asyncio copies the context into the tasks a request starts (the reply's
recording, the background auto compaction), so they act for the same tenant.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.protocol import SessionStore

CURRENT_TENANT: ContextVar[str | None] = ContextVar("contextfold_proxy_tenant", default=None)


def current_tenant() -> str | None:
    """The tenant of the request being served (None: no `--auth`)."""
    return CURRENT_TENANT.get()


class TenantRouted:
    """`store` as seen by the current request's tenant (unscoped when there is none)."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._scoped: dict[str, Any] = {}

    def _target(self) -> Any:
        tenant = CURRENT_TENANT.get()
        if tenant is None:
            return self._store
        scoped = self._scoped.get(tenant)
        if scoped is None:
            scoped = self._scoped[tenant] = self._store.for_tenant(tenant)
        return scoped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)
