"""Reading nodes: point look-ups and the bounded ancestor walk (one recursive CTE).

The loading rules built on these reads (the O(tail) branch, pages, damage in summarised
history) are in `loading.py`, shared with the command line's `sqlite3` snapshot; the
functions at the end run them on a SQLAlchemy connection.

Every statement here is bounded by one `tree_id` (no query joins two trees, for sharding),
except the two id-only look-ups (`trees_of_node`, `stored_hashes`), which a tenant-scoped
store limits to its tenant's trees.
The walk uses UNION, not UNION ALL, so a parent cycle stored by mistake ends the recursion
instead of looping; `core.values.tree.build_branch` then reports the cycle (SPEC D1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, select, tuple_
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Node
from contextfold.core.values.tree import Branch, DamagedBranch, InvalidRecord, Problem

from . import loading
from .loading import records
from .schema import nodes, sessions

# The columns a branch needs; insert-time bookkeeping columns are read separately.
# `kind` and `role` are checked against the payload (`rows.column_mismatch`).
_NODE_COLUMNS = ("tree_id", "id", "parent_id", "kind", "role", "created_at", "payload",
                 "content_hash", "chain_hash")


async def node_meta(conn: AsyncConnection, tree_id: str, node_id: str) -> RowMapping | None:
    """Bookkeeping columns of one node (no payload)."""
    stmt = select(
        nodes.c.id, nodes.c.parent_id, nodes.c.kind, nodes.c.role, nodes.c.depth,
        nodes.c.latest_checkpoint_id, nodes.c.first_kept_id, nodes.c.content_hash,
        nodes.c.chain_hash,
    ).where(nodes.c.tree_id == tree_id, nodes.c.id == node_id)
    return (await conn.execute(stmt)).mappings().first()


def _tenants_trees(tenant: str) -> Any:
    """The trees `tenant` has sessions on (a tree belongs to the tenant of its sessions)."""
    return select(sessions.c.tree_id).where(sessions.c.tenant_id == tenant)


async def trees_of_node(conn: AsyncConnection, node_id: str, tenant: str | None = None
                        ) -> list[str]:
    """The trees holding a node id (only `tenant`'s, if given: another tenant's node is
    not found, SPEC W1). Ids are unique per tree: the store's own ids (UUIDv7) never repeat,
    but imported ids (Pi's 8 hex characters) may recur in unrelated trees."""
    stmt = select(nodes.c.tree_id).where(nodes.c.id == node_id).order_by(nodes.c.tree_id)
    if tenant is not None:
        stmt = stmt.where(nodes.c.tree_id.in_(_tenants_trees(tenant)))
    return list((await conn.execute(stmt)).scalars())


async def stored_hashes(conn: AsyncConnection, ids: Sequence[str], tenant: str | None = None
                        ) -> set[tuple[str, str]]:
    """(id, content_hash) of every stored node whose id is one of `ids`, in any tree (or in
    `tenant`'s trees only: what another tenant imported is not "already stored" for this
    one, SPEC W1): an import whose nodes match by id *and* content was imported before."""
    found: set[tuple[str, str]] = set()
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        stmt = select(nodes.c.id, nodes.c.content_hash).where(nodes.c.id.in_(chunk))
        if tenant is not None:
            stmt = stmt.where(nodes.c.tree_id.in_(_tenants_trees(tenant)))
        found.update((r[0], r[1]) for r in await conn.execute(stmt))
    return found


async def sessions_holding(conn: AsyncConnection, pairs: Sequence[tuple[str, str]],
                           tenant: str | None = None, limit: int = 5
                           ) -> list[tuple[str, str | None]]:
    """(session id, title) of the sessions, oldest first, whose trees hold a node with one
    of these (id, content hash) pairs (only `tenant`'s): who already holds a re-imported
    history. At most `limit`; the first 500 pairs are asked about (one is enough to tell)."""
    chunk = list(pairs[:500])
    if not chunk:
        return []
    trees = select(nodes.c.tree_id).where(
        tuple_(nodes.c.id, nodes.c.content_hash).in_(chunk))
    stmt = (select(sessions.c.id, sessions.c.title).where(sessions.c.tree_id.in_(trees))
            .order_by(sessions.c.created_at, sessions.c.id).limit(limit))
    if tenant is not None:
        stmt = stmt.where(sessions.c.tenant_id == tenant)
    return [(r[0], r[1]) for r in await conn.execute(stmt)]


async def _walk_rows(
    conn: AsyncConnection, tree_id: str, leaf_id: str, stop_id: str | None = None,
    min_depth: int | None = None,
) -> list[RowMapping]:
    cols = [nodes.c[name] for name in _NODE_COLUMNS]
    chain = select(*cols).where(nodes.c.tree_id == tree_id, nodes.c.id == leaf_id).cte(
        "chain", recursive=True
    )
    parent = nodes.alias("parent")
    step = select(*[parent.c[name] for name in _NODE_COLUMNS]).join(
        chain, and_(parent.c.tree_id == chain.c.tree_id, parent.c.id == chain.c.parent_id)
    )
    if stop_id is not None:
        step = step.where(chain.c.id != stop_id)
    if min_depth is not None:
        step = step.where(parent.c.depth >= min_depth)
    chain = chain.union(step)
    return list((await conn.execute(select(chain))).mappings().all())


async def tree_rows(conn: AsyncConnection, tree_id: str) -> list[RowMapping]:
    """Every node row of one tree, oldest first."""
    cols = [nodes.c[name] for name in _NODE_COLUMNS]
    stmt = (
        select(*cols, nodes.c.depth)
        .where(nodes.c.tree_id == tree_id)
        .order_by(nodes.c.depth, nodes.c.created_at, nodes.c.id)
    )
    return list((await conn.execute(stmt)).mappings().all())


async def children_of(conn: AsyncConnection, tree_id: str, ids: Sequence[str]
                      ) -> list[RowMapping]:
    """The rows whose parent is one of `ids` (the forks starting on a page)."""
    cols = [nodes.c[name] for name in _NODE_COLUMNS]
    out: list[RowMapping] = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        stmt = select(*cols).where(nodes.c.tree_id == tree_id, nodes.c.parent_id.in_(chunk))
        out.extend((await conn.execute(stmt)).mappings().all())
    return out


@dataclass(frozen=True)
class SqlRows:
    """`loading.RowSource` on a SQLAlchemy connection."""

    conn: AsyncConnection

    async def node_meta(self, tree_id: str, node_id: str) -> RowMapping | None:
        return await node_meta(self.conn, tree_id, node_id)

    async def walk_rows(self, tree_id: str, leaf_id: str, stop_id: str | None = None,
                        min_depth: int | None = None) -> list[RowMapping]:
        return await _walk_rows(self.conn, tree_id, leaf_id, stop_id, min_depth)


async def walk_up(
    conn: AsyncConnection, tree_id: str, leaf_id: str, stop_id: str | None = None,
    min_depth: int | None = None,
) -> dict[str, Node | InvalidRecord]:
    """`loading.walk_up` on this connection."""
    return await loading.walk_up(SqlRows(conn), tree_id, leaf_id, stop_id, min_depth)


async def history_problems(conn: AsyncConnection, tree_id: str,
                           branch: Branch) -> tuple[Problem, ...]:
    """`loading.history_problems` on this connection."""
    return await loading.history_problems(SqlRows(conn), tree_id, branch)


async def load_tail(conn: AsyncConnection, tree_id: str, leaf_id: str | None,
                    revision: int) -> Branch | DamagedBranch:
    """`loading.load_tail` on this connection."""
    return await loading.load_tail(SqlRows(conn), tree_id, leaf_id, revision)


async def load_page(conn: AsyncConnection, tree_id: str, leaf_id: str | None, revision: int,
                    limit: int) -> Branch | DamagedBranch:
    """`loading.load_page` on this connection."""
    return await loading.load_page(SqlRows(conn), tree_id, leaf_id, revision, limit)


async def load_full(conn: AsyncConnection, tree_id: str, leaf_id: str | None,
                    revision: int) -> Branch | DamagedBranch:
    """`loading.load_full` on this connection."""
    return await loading.load_full(SqlRows(conn), tree_id, leaf_id, revision)


__all__ = ["SqlRows", "children_of", "history_problems", "load_full", "load_page",
           "load_tail", "node_meta", "records", "sessions_holding", "stored_hashes",
           "tree_rows", "trees_of_node", "walk_up"]
