"""Compaction leases: at most one worker summarises a session at a time (SPEC U4), across
processes and machines.

A lease is a row (session id, holder, expiry) claimed with one conditional upsert: it is
taken only if absent or expired. Expiry uses the *database* clock so workers on machines
with skewed clocks agree. The lease is tied to its holder's liveness: it is short (default
`LEASE_TTL` = 30 s) and renewed by a heartbeat every ttl/3 while the holder runs, so a
crashed worker's lease lapses within one TTL; and a holder on this machine whose process
is gone (`liveness.holder_is_dead`) loses it at once. The conditional commit (SPEC C2)
stays the final safety net: a worker that lost its lease can at worst get a stale result,
never a wrong commit. `Leases` is a part of `contextfold.store.sql_store.SqlSessionStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import ColumnElement, Select, String, bindparam, delete, literal, select, update
from sqlalchemy import func as sqlfunc

from contextfold.ids import new_id

from ..errors import InvalidOperationError, SessionBusyError, SessionNotFoundError
from .access import SqlAccess
from .engine import retry_transient, single_read, write_connection
from .liveness import holder_is_dead, holder_name
from .schema import compaction_leases, sessions


@functools.cache
def db_now(dialect: str) -> ColumnElement[Any]:
    """Seconds since the epoch by the database's clock. One expression per dialect: they
    are immutable, and building one costs more than the read it is in (issue 26)."""
    if dialect == "postgresql":
        return sqlfunc.extract("epoch", sqlfunc.clock_timestamp())
    return (sqlfunc.julianday("now") - 2440587.5) * 86400.0


@functools.cache
def holder_stmt(dialect: str) -> Select[Any]:
    """Who holds an unexpired lease on the session bound as `session_id`: built once per
    dialect (a statement object is immutable, and reusing it spares building it and its
    cache key on every service turn, issue 26)."""
    return select(compaction_leases.c.holder).where(
        compaction_leases.c.session_id == bindparam("session_id", type_=String),
        compaction_leases.c.expires_at > db_now(dialect))


# Short so that a killed worker blocks others briefly; the heartbeat keeps a live one's.
LEASE_TTL = 30.0


class Leases:
    """`compaction_lease(session_id, ttl)` and who holds one, for `SqlSessionStore`."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    @contextlib.asynccontextmanager
    async def compaction_lease(self, session_id: str,
                               ttl: float = LEASE_TTL) -> AsyncIterator[None]:
        """Hold the session's compaction lease for the body, or raise `SessionBusyError`
        (naming the holder and the seconds until its lease lapses).

        Raises `SessionNotFoundError` for an unknown session. The lease is renewed every
        ttl/3 while held and released on exit, including on cancellation.
        """
        if ttl <= 0:
            raise InvalidOperationError(f"lease ttl must be positive seconds, got {ttl!r}")
        holder = holder_name(new_id())
        await retry_transient(lambda: self.claim(session_id, holder, ttl))
        renewer = asyncio.create_task(self._keep_lease(session_id, holder, ttl))
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await renewer
            # Shielded so a cancelled compaction still frees the lease for the next worker.
            await asyncio.shield(self._release_lease(session_id, holder))

    async def lease_holder(self, session_id: str) -> str | None:
        """Who holds an unexpired lease on the session (None if nobody)."""
        async with single_read(self.access.engine) as conn:
            stmt = holder_stmt(self.access.engine.dialect.name)
            return (await conn.execute(stmt, {"session_id": session_id})).scalar_one_or_none()

    async def claim(self, session_id: str, holder: str, ttl: float) -> None:
        """Take the lease for `holder` if nobody holds it (or its holder's process is gone),
        else `SessionBusyError`."""
        dialect = self.access.engine.dialect.name
        now = db_now(dialect)
        async with write_connection(self.access.engine) as conn:
            tree_id = (await conn.execute(self.access.scoped(
                select(sessions.c.tree_id).where(sessions.c.id == session_id))
            )).scalar_one_or_none()
            if tree_id is None:
                raise SessionNotFoundError(session_id, self.access.database)
            # The dialect's upsert; imported here: loading both dialects costs every start.
            if dialect == "postgresql":
                from sqlalchemy.dialects.postgresql import insert as upsert
            else:
                from sqlalchemy.dialects.sqlite import insert as upsert
            ins = upsert(
                compaction_leases
            ).values(session_id=session_id, tree_id=tree_id, holder=holder,
                     expires_at=now + literal(float(ttl)))
            stmt = ins.on_conflict_do_update(
                index_elements=[compaction_leases.c.session_id],
                set_={"holder": ins.excluded.holder, "expires_at": ins.excluded.expires_at},
                where=compaction_leases.c.expires_at <= now,
            )
            await conn.execute(stmt)
            current = (await conn.execute(
                select(compaction_leases.c.holder, compaction_leases.c.expires_at - now)
                .where(compaction_leases.c.session_id == session_id)
            )).first()
            if current is not None and current[0] != holder and holder_is_dead(current[0]):
                # Its process is gone: take the lease over now (conditional on that holder).
                await conn.execute(
                    update(compaction_leases)
                    .where(compaction_leases.c.session_id == session_id,
                           compaction_leases.c.holder == current[0])
                    .values(holder=holder, expires_at=now + literal(float(ttl))))
                current = (holder, ttl)
        if current is None or current[0] != holder:
            other, left = (current[0], float(current[1])) if current else ("?", 0.0)
            raise SessionBusyError(session_id, other, left)

    async def _keep_lease(self, session_id: str, holder: str, ttl: float) -> None:
        """Renew the lease until cancelled; stop quietly if it was lost (it expired and was
        taken): the conditional commit still protects the branch."""
        while True:
            await asyncio.sleep(ttl / 3)
            now = db_now(self.access.engine.dialect.name)
            async with write_connection(self.access.engine) as conn:
                result = await conn.execute(
                    update(compaction_leases)
                    .where(compaction_leases.c.session_id == session_id,
                           compaction_leases.c.holder == holder)
                    .values(expires_at=now + literal(float(ttl)))
                )
            if result.rowcount != 1:
                return

    async def _release_lease(self, session_id: str, holder: str) -> None:
        async with write_connection(self.access.engine) as conn:
            await conn.execute(
                delete(compaction_leases).where(compaction_leases.c.session_id == session_id,
                                                compaction_leases.c.holder == holder)
            )
