"""Retry, edit and fork (SPEC O1-O3): they move a leaf or add a session, nothing else.

No existing node is modified or copied; checkpoints after the retried or edited point simply
leave the branch (they stay in the tree). `Branching` is a part of
`contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Message, Node, utc_now
from contextfold.core.values.tree import DamagedBranch, check_stability
from contextfold.ids import new_id

from ..errors import InvalidOperationError, NodeNotFoundError, ReadOnlySessionError
from ..inputs import as_message
from ..values import SessionInfo
from . import queries
from .access import SqlAccess


class Branching:
    """Retry, pop, clear, edit and fork: moving a leaf or adding a session."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def retry(self, session_id: str) -> SessionInfo:
        """SPEC O1: move the leaf to the parent of the last real assistant message.

        Checkpoints after that point leave the branch with the old reply. Nothing is
        deleted; the old reply stays in the tree.
        """
        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await self.access.lock_session(conn, session_id)
            target = await self._last_message(conn, row, "assistant")
            if target is None:
                raise InvalidOperationError(
                    f"nothing to retry in session {session_id!r}: no assistant reply on its branch")
            return await self.access.move_leaf(conn, row, target.parent_id, op="retry")

        return await self.access.write(op)

    async def pop_message(self, session_id: str) -> Node | None:
        """Move the leaf to the parent of the last message on the branch, whatever its role
        (the "pop the last item" of a framework's session); None if there is none.

        Like retry (O1), checkpoints after the popped message leave the branch with it;
        nothing is deleted, the popped node stays in the tree."""
        async def op(conn: AsyncConnection) -> Node | None:
            row = await self.access.lock_session(conn, session_id)
            target = await self._last_message(conn, row, None)
            if target is None:
                return None
            await self.access.move_leaf(conn, row, target.parent_id, op="pop")
            return target

        return await self.access.write(op)

    async def clear_branch(self, session_id: str) -> SessionInfo:
        """Start the session over with an empty branch (leaf None); the old nodes stay in the
        tree (durable history is never deleted)."""
        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await self.access.lock_session(conn, session_id)
            await self.access.check_writable(conn, row)
            if row["leaf_id"] is None:
                return self.access.info(row, read_only=False)
            return await self.access.move_leaf(conn, row, None, op="clear")

        return await self.access.write(op)

    async def edit(self, session_id: str, message: Message | Mapping[str, Any]) -> Node:
        """SPEC O2: the new user message becomes a sibling of the last real user message
        (same parent) and the new leaf; the old reply and later checkpoints leave the branch."""
        msg = as_message(message)
        if msg.role != "user":
            raise InvalidOperationError(
                "edit replaces the last user message, so it takes a user message "
                f"(got {msg.role!r})")

        async def op(conn: AsyncConnection) -> Node:
            row = await self.access.lock_session(conn, session_id)
            target = await self._last_message(conn, row, "user")
            if target is None:
                raise InvalidOperationError(
                    f"nothing to edit in session {session_id!r}: no user message on its branch")
            node = Node(id=new_id(), parent_id=target.parent_id, created_at=utc_now(), payload=msg)
            await self.access.insert_chain(conn, row, [node])
            await self.access.move_leaf(conn, row, node.id, op="edit", node_id=node.id)
            return node

        return await self.access.write(op)

    async def fork(self, session_id: str, node_id: str, *, title: str | None = None) -> SessionInfo:
        """SPEC O3: a new session on the same tree whose leaf is `node_id`.

        Only from a stable, real assistant message of this session's tree; never from a
        checkpoint. No node is copied or modified (SPEC T5).
        """
        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await self.access.session_row(conn, session_id)
            await self.access.check_writable(conn, row)
            tree_id = row["tree_id"]
            branch = await queries.load_tail(conn, tree_id, node_id, 0)
            if isinstance(branch, DamagedBranch):
                if await queries.node_meta(conn, tree_id, node_id) is None:
                    # W1: another tenant's node is "not stored", exactly like an unknown id.
                    raise _foreign_node(node_id, session_id, await queries.trees_of_node(
                        conn, node_id, self.access.tenant))
                raise ReadOnlySessionError(session_id, branch.problems)
            node = branch.nodes[-1]
            if node.checkpoint is not None:
                raise InvalidOperationError(
                    f"cannot fork from checkpoint {node_id!r}: fork from a real assistant "
                    "message")
            if node.message is None or node.message.role != "assistant":
                role = node.message.role if node.message else "?"
                raise InvalidOperationError(
                    f"cannot fork from {node_id!r}: it is a {role} message; fork from an "
                    "assistant message")
            stability = check_stability(branch)
            if not stability.stable:
                raise InvalidOperationError(
                    f"cannot fork from {node_id!r}: the tool workflow there is not finished ("
                    + "; ".join(stability.reasons) + ")")
            # A fork belongs to the tenant of the session it forks (SPEC W1).
            return await self.access.insert_session(conn, tree_id, node_id, title, "{}", op="fork",
                                              tenant=row["tenant_id"])

        return await self.access.write(op)

    async def _last_message(self, conn: AsyncConnection, row: RowMapping,
                            role: str | None) -> Node | None:
        """The last message of `role` (None: any) on the branch: the tail first, then, only if it is
        not there, the O(tail) segment before it, and so on (never the whole history)."""
        loaded = await self.access.writable_branch(conn, row)
        while True:
            for node in reversed(loaded.nodes):
                msg = node.message
                if msg is not None and role in (None, msg.role):
                    return node
            parent = loaded.nodes[0].parent_id if loaded.nodes else None
            if loaded.complete or parent is None:
                return None
            older = await queries.load_tail(conn, row["tree_id"], parent,
                                            row["branch_revision"])
            if isinstance(older, DamagedBranch):
                raise ReadOnlySessionError(row["id"], older.problems)
            loaded = older


def _foreign_node(node_id: str, session_id: str, other_trees: list[str]) -> Exception:
    if not other_trees:
        return NodeNotFoundError(f"node {node_id!r} is not stored")
    return InvalidOperationError(
        f"node {node_id!r} belongs to another session tree, not to session {session_id!r}")
