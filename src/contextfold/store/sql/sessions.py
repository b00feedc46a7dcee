"""`Sessions`: a store's sessions as rows — create one, merge its metadata, get, list and find
them (SPEC W1: only the tenant's), and a session with its lease holder in one read.

A part of `contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Select, String, bindparam, func, insert, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import utc_now
from contextfold.core.values.tree import DamagedBranch
from contextfold.ids import new_id

from ..errors import InvalidOperationError, NodeNotFoundError, SessionNotFoundError
from ..values import SessionInfo
from . import queries
from .access import SqlAccess, metadata_json
from .engine import read_connection, single_read
from .lease import db_now
from .schema import compaction_leases, nodes, sessions, trees


@functools.cache
def _session_and_lease_stmt(dialect: str, scoped: bool) -> Select[Any]:
    """The session row (bound `session_id`, and `tenant_id` when `scoped`, SPEC W1) with
    its unexpired lease holder: built once per dialect and scope, not on every turn."""
    holder = select(compaction_leases.c.holder).where(
        compaction_leases.c.session_id == sessions.c.id,
        compaction_leases.c.expires_at > db_now(dialect),
    ).scalar_subquery().label("lease_holder")
    stmt = select(sessions, holder).where(sessions.c.id == bindparam("session_id", type_=String))
    if scoped:
        stmt = stmt.where(sessions.c.tenant_id == bindparam("tenant_id", type_=String))
    return stmt


class Sessions:
    """Creating, reading, listing and finding sessions."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def create_session(
        self,
        *,
        from_node_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """A new session: empty on a new tree, or with leaf `from_node_id` (shared ancestors)."""
        db = self.access
        meta_json = metadata_json(metadata)

        async def op(conn: AsyncConnection) -> SessionInfo:
            if from_node_id is None:
                tree_id = new_id()
                await conn.execute(insert(trees).values(id=tree_id, created_at=utc_now()))
            else:
                # W1: only trees this tenant has sessions on
                found = await queries.trees_of_node(conn, from_node_id, db.tenant)
                if not found:
                    raise NodeNotFoundError(f"cannot start a session from node {from_node_id!r}:"
                                            " no such node is stored")
                if len(found) > 1:
                    raise InvalidOperationError(
                        f"node id {from_node_id!r} is stored in {len(found)} session trees "
                        "(imported ids are unique per tree only); fork it from its session "
                        "instead")
                tree_id = found[0]
                branch = await queries.load_tail(conn, tree_id, from_node_id, 0)
                if isinstance(branch, DamagedBranch):
                    raise InvalidOperationError(
                        f"cannot start a session from node {from_node_id!r}: its history is "
                        "damaged (" + "; ".join(str(p) for p in branch.problems) + ")")
            return await db.insert_session(conn, tree_id, from_node_id, title, meta_json,
                                           op="create")

        return await db.write(op)

    async def update_session_metadata(self, session_id: str,
                                      updates: Mapping[str, Any]) -> SessionInfo:
        """Merge `updates` into the session's metadata (top-level keys replace). Metadata is
        not history: no node, leaf or revision changes."""
        db = self.access

        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await db.session_row(conn, session_id)
            merged = {**json.loads(row["metadata"] or "{}"), **updates}
            await conn.execute(update(sessions).where(sessions.c.id == session_id)
                               .values(metadata=metadata_json(merged)))
            return db.info(await db.session_row(conn, session_id), read_only=False)

        return await db.write(op)

    async def get_session(self, session_id: str) -> SessionInfo:
        """One session; `read_only` is True when its stored history is damaged (SPEC D2)."""
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            return db.info(row, read_only=await db.is_damaged(conn, row))

    async def session_and_lease(self, session_id: str) -> tuple[SessionInfo, str | None]:
        """`get_session` and `lease_holder` in one read (one snapshot, one statement): what
        the service checks before every turn (issue 26)."""
        db = self.access
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFoundError(session_id, db.database)
        params = {"session_id": session_id, "tenant_id": db.tenant}
        async with single_read(db.engine) as conn:  # the damage check reads only nodes
            stmt = _session_and_lease_stmt(db.engine.dialect.name, db.tenant is not None)
            row = (await conn.execute(stmt, params)).mappings().first()
            if row is None:
                raise SessionNotFoundError(session_id, db.database)
            info = db.info(row, read_only=await db.is_damaged(conn, row))
            return info, row["lease_holder"]

    async def list_sessions(self, *, check_damage: bool = True) -> list[SessionInfo]:
        """Every session, oldest first. `check_damage=False` skips the per-session tail read
        (then `read_only` reflects only the stored flag)."""
        db = self.access
        async with read_connection(db.engine) as conn:
            rows = (await conn.execute(
                db.scoped(select(sessions)).order_by(sessions.c.created_at, sessions.c.id)
            )).mappings().all()
            out = []
            for row in rows:
                damaged = check_damage and await db.is_damaged(conn, row)
                out.append(db.info(row, read_only=bool(damaged)))
            return out

    async def sessions_newest(self, *, limit: int, before: tuple[datetime, str] | None = None,
                              check_damage: bool = False) -> list[SessionInfo]:
        """A page of this tenant's sessions, newest first by creation (ties by id): at most
        `limit`, those created before `before` (the `(created_at, id)` of the previous
        page's last). One keyset range on an index (migration 0009, or the tenant's
        `ix_sessions_tenant`), so a caller that stops at the first match never reads the
        whole table. `check_damage`: each one's tail read too (SPEC D2), as `list_sessions`
        does; otherwise `read_only` is the stored flag."""
        db = self.access
        stmt = db.scoped(select(sessions))
        if before is not None:
            stmt = stmt.where(tuple_(sessions.c.created_at, sessions.c.id) <
                              tuple_(bindparam("at", before[0], type_=sessions.c.created_at.type),
                                     before[1]))
        async with read_connection(db.engine) as conn:
            rows = (await conn.execute(
                stmt.order_by(sessions.c.created_at.desc(), sessions.c.id.desc()).limit(limit)
            )).mappings().all()
            return [db.info(row, read_only=check_damage and await db.is_damaged(conn, row))
                    for row in rows]

    async def find_sessions(self, prefix: str, *, limit: int) -> list[SessionInfo]:
        """Sessions of this tenant whose id starts with `prefix` (compared as text, not as a
        LIKE pattern: an id may hold `_` or `%`), by id; damage is not checked."""
        if not prefix:
            return []
        db = self.access
        async with read_connection(db.engine) as conn:
            rows = (await conn.execute(
                db.scoped(select(sessions))
                .where(func.substr(sessions.c.id, 1, len(prefix)) == prefix)
                .order_by(sessions.c.id).limit(limit))).mappings().all()
        return [db.info(row, read_only=False) for row in rows]

    async def latest_session(self) -> SessionInfo | None:
        """This tenant's session with the latest leaf move (its last activity)."""
        db = self.access
        async with read_connection(db.engine) as conn:
            row = (await conn.execute(
                db.scoped(select(sessions))
                .order_by(sessions.c.updated_at.desc(), sessions.c.id.desc()).limit(1)
            )).mappings().first()
        return None if row is None else db.info(row, read_only=False)

    async def find_nodes(self, session_id: str, prefix: str, *, limit: int) -> list[str]:
        """Ids of the session tree's nodes starting with `prefix` (W1: the session is this
        tenant's, or `SessionNotFoundError`)."""
        db = self.access
        async with read_connection(db.engine) as conn:
            tree_id = (await db.session_row(conn, session_id))["tree_id"]
            if not prefix:
                return []
            found = await conn.execute(
                select(nodes.c.id).where(nodes.c.tree_id == tree_id,
                                         func.substr(nodes.c.id, 1, len(prefix)) == prefix)
                .order_by(nodes.c.id).limit(limit))
            return [r[0] for r in found]
