"""`Reading`: a session's history as the model, a page or the tree needs it — O(tail) from
the latest checkpoint, the whole branch, a page, the branch as if a node were the leaf, and
the tree (SPEC T1-T6; damage is reported, never hidden: D1, D2).

A part of `contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

from contextfold.core.values.messages import Node
from contextfold.core.values.tree import Branch, DamagedBranch

from ..errors import InvalidOperationError, NodeNotFoundError
from . import queries
from .access import SqlAccess
from .engine import read_connection
from .loading import readable_nodes, with_forks


class Reading:
    """Loading branches, pages and trees of a session."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch:
        """What the model needs, read in O(tail): from the latest checkpoint's boundary to the
        leaf. `Branch.complete` is False when older history was not read."""
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            branch = await queries.load_tail(conn, row["tree_id"], row["leaf_id"],
                                             row["branch_revision"])
            if isinstance(branch, Branch) and row["leaf_id"] is not None and \
                    (row["tree_id"], row["leaf_id"]) not in db.memo.sound and \
                    not await queries.history_problems(conn, row["tree_id"], branch):
                # A write needn't re-read. Sound means the whole branch, summarised history
                # included (hash-only walk, once per leaf and store instance), so that every
                # write agrees with `get_session(...).read_only` (SPEC D2).
                db.remember_sound(row["tree_id"], row["leaf_id"])
            elif isinstance(branch, DamagedBranch) and row["leaf_id"] is not None:
                # A row changed since this instance found the branch sound (edited in place
                # by hand): forget that, so its writes and `get_session(...).read_only` see
                # the damage as a fresh process does (SPEC D2).
                db.memo.sound.pop((row["tree_id"], row["leaf_id"]))
                db.memo.rows.pop(session_id)
            return branch

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch:
        """The whole branch from its root to the leaf (for a UI or an audit)."""
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            return await queries.load_full(conn, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])

    async def load_branch_page(self, session_id: str, *, limit: int,
                               before_id: str | None = None) -> Branch | DamagedBranch:
        """A page of the branch for a UI: its last `limit` nodes, or the `limit` nodes
        before `before_id` (a node of the branch: page back from a page's first node).
        Reads `limit` rows however long the history; `complete` is False when older
        nodes exist."""
        if limit < 1:
            raise InvalidOperationError(f"limit must be at least 1, got {limit}")
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            end = row["leaf_id"]
            if before_id is not None:
                meta = await queries.node_meta(conn, row["tree_id"], before_id)
                if meta is None:
                    raise NodeNotFoundError(f"node {before_id!r} is not in this session's tree")
                end = meta["parent_id"]
            return await queries.load_page(conn, row["tree_id"], end, row["branch_revision"],
                                           limit)

    async def load_branch_at(self, session_id: str, node_id: str) -> Branch | DamagedBranch:
        """What the model would need if `node_id` (of this session's tree) were the leaf:
        read in O(tail) like `load_branch`."""
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            if await queries.node_meta(conn, row["tree_id"], node_id) is None:
                raise NodeNotFoundError(f"node {node_id!r} is not in this session's tree")
            return await queries.load_tail(conn, row["tree_id"], node_id,
                                           row["branch_revision"])

    async def load_tree_page(self, session_id: str, *, limit: int) -> list[Node]:
        """The tree around the branch's last `limit` nodes: those nodes and every child
        of them (the first node of each fork off the page), parents before children."""
        page = await self.load_branch_page(session_id, limit=limit)
        shown = page.nodes if isinstance(page, Branch) else page.readable
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            kids = await queries.children_of(conn, row["tree_id"], [n.id for n in shown])
        return with_forks(shown, kids)

    async def load_tree(self, session_id: str) -> list[Node]:
        """Every readable node of the session's tree, all branches, parents before children.
        Rows that fail validation are left out (`load_full_branch` reports them)."""
        db = self.access
        async with read_connection(db.engine) as conn:
            row = await db.session_row(conn, session_id)
            return readable_nodes(await queries.tree_rows(conn, row["tree_id"]))
