"""Tenants and their bearer tokens (SPEC W1, W2).

A token is 32 random bytes, shown once when created (`cf_` + URL-safe base64); the database
keeps only its SHA-256 digest, so reading the database does not give access to the service.
Looking a token up hashes it and compares digests by index; a revoked token stays listed
(with `revoked_at`) but no longer authenticates. `Tokens` is a part of
`contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from sqlalchemy import insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import utc_now
from contextfold.ids import new_id

from ..errors import InvalidOperationError, StoreError
from ..values import TokenInfo
from .access import SqlAccess
from .engine import read_connection
from .rows import utc
from .schema import api_tokens, tenants

TOKEN_PREFIX = "cf_"
_TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class TokenNotFoundError(StoreError):
    """No token with that id."""

    kind = "not_found"


def hash_token(token: str) -> str:
    """The SHA-256 hex digest stored for `token`."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_tenant_name(tenant: str) -> str:
    """`tenant` if it is a valid tenant id (letters, digits, '.', '_', '-'; at most 64)."""
    if not isinstance(tenant, str) or not _TENANT_NAME.match(tenant):
        raise InvalidOperationError(
            f"invalid tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit")
    return tenant


class Tokens:
    """Token management for `SqlSessionStore` (the CLI's `contextfold token` and the service)."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def create_token(self, tenant: str, *, label: str | None = None
                           ) -> tuple[TokenInfo, str]:
        """A new token for `tenant` (created if new): its stored info and the token, which
        is returned only here."""
        check_tenant_name(tenant)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = utc_now()
        info = TokenInfo(id=new_id(), tenant_id=tenant, label=label, created_at=now,
                         revoked_at=None)

        async def op(conn: AsyncConnection) -> None:
            known = (await conn.execute(select(tenants.c.id).where(tenants.c.id == tenant))
                     ).first()
            if known is None:
                await conn.execute(insert(tenants).values(id=tenant, created_at=now))
            await conn.execute(insert(api_tokens).values(
                id=info.id, tenant_id=tenant, token_hash=hash_token(token), label=label,
                created_at=now, revoked_at=None))

        await self.access.write(op)
        return info, token

    async def list_tokens(self, tenant: str | None = None) -> list[TokenInfo]:
        """Every token (of `tenant`, if given), oldest first; never the tokens themselves."""
        stmt = select(api_tokens).order_by(api_tokens.c.created_at, api_tokens.c.id)
        if tenant is not None:
            stmt = stmt.where(api_tokens.c.tenant_id == tenant)
        async with read_connection(self.access.engine) as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [_info(r) for r in rows]

    async def revoke_token(self, token_id: str) -> TokenInfo:
        """Revoke a token by id (idempotent); `TokenNotFoundError` if there is none."""

        async def op(conn: AsyncConnection) -> TokenInfo:
            await conn.execute(update(api_tokens).where(
                api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None)
            ).values(revoked_at=utc_now()))
            row = (await conn.execute(select(api_tokens).where(api_tokens.c.id == token_id))
                   ).mappings().first()
            if row is None:
                raise TokenNotFoundError(f"no token with id {token_id!r}")
            return _info(row)

        return await self.access.write(op)

    async def tenant_for_token(self, token: str) -> str | None:
        """The tenant an active `token` belongs to; None for an unknown or revoked one."""
        if not token:
            return None
        stmt = select(api_tokens.c.tenant_id).where(
            api_tokens.c.token_hash == hash_token(token), api_tokens.c.revoked_at.is_(None))
        async with read_connection(self.access.engine) as conn:
            return (await conn.execute(stmt)).scalar_one_or_none()


def _info(row: RowMapping) -> TokenInfo:
    revoked = row["revoked_at"]
    return TokenInfo(id=row["id"], tenant_id=row["tenant_id"], label=row["label"],
                     created_at=utc(row["created_at"]),
                     revoked_at=utc(revoked) if revoked is not None else None)
