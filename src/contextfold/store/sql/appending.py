"""`Appending`: messages added at a session's leaf (SPEC C6: never a checkpoint) — one, with
an optional condition on the leaf and an idempotent caller-chosen id; several as one chain;
and a whole pre-built tree imported as a new session (all-or-nothing).

A part of `contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Message, Node, utc_now
from contextfold.ids import new_id

from ..errors import DuplicateNodeError, StaleBranchError
from ..inputs import as_message
from ..values import SessionInfo
from . import queries
from .access import SqlAccess, metadata_json
from .rows import node_row, utc
from .schema import nodes, trees


class Appending:
    """Appending messages and importing trees."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def append(
        self,
        session_id: str,
        message: Message | Mapping[str, Any],
        *,
        expected_leaf_id: str | None = None,
        node_id: str | None = None,
        created_at: datetime | None = None,
    ) -> Node:
        """Append one message at the leaf and move the leaf to it.

        Never writes a checkpoint (SPEC C6). `expected_leaf_id` makes the append conditional
        (`StaleBranchError` if the leaf moved). A caller-chosen `node_id` makes the append
        idempotent: repeating it returns the stored node instead of writing twice.
        """
        db = self.access
        msg = as_message(message)
        nid = node_id or new_id()
        stamp = utc(created_at) if created_at is not None else utc_now()

        async def op(conn: AsyncConnection) -> Node:
            # A caller-chosen id reads first whether it is stored (exactly once), so only
            # an append with a new id starts from the remembered row (issue 26).
            row = await db.lock_session(conn, session_id, known=node_id is None,
                                        expect_leaf=expected_leaf_id)
            if node_id is not None:
                again = await self._already_appended(conn, row, nid, msg, stamp)
                if again is not None:
                    return again
            if expected_leaf_id is not None and row["leaf_id"] != expected_leaf_id:
                raise StaleBranchError(session_id, expected_leaf_id, row["leaf_id"])
            await db.check_writable(conn, row)
            node = Node(id=nid, parent_id=row["leaf_id"], created_at=stamp, payload=msg)
            await db.insert_chain(conn, row, [node], move_op="append")  # one statement
            return node

        # A steady append (everything remembered) is that one statement and nothing else.
        return await db.write(op, one_statement=node_id is None and
                              db.append_reads_nothing(session_id, expected_leaf_id))

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]:
        """Append several messages as one chain in one transaction (one leaf move)."""
        db = self.access
        msgs = [as_message(m) for m in messages]
        if not msgs:
            return []

        async def op(conn: AsyncConnection) -> list[Node]:
            row = await db.lock_session(conn, session_id, known=True)
            await db.check_writable(conn, row)
            stamp = utc_now()
            parent, chain = row["leaf_id"], []
            for msg in msgs:
                chain.append(Node(id=new_id(), parent_id=parent, created_at=stamp, payload=msg))
                parent = chain[-1].id
            await db.insert_chain(conn, row, chain)
            await db.move_leaf(conn, row, chain[-1].id, op="append", node_id=chain[-1].id)
            return chain

        return await db.write(op)

    async def import_tree(
        self,
        nodes_in: Sequence[Node],
        leaf_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Store a whole pre-built tree (checkpoints allowed) as a new tree and session.

        Validated in memory first; all-or-nothing. Node ids are kept (unique per tree: an
        unrelated tree may hold the same id); a node already stored with the same id and
        content raises `DuplicateNodeError` (a re-import).
        """
        from .importing import already_imported, prepare_import  # writers only

        db = self.access
        prepared = prepare_import(nodes_in, leaf_id)
        meta_json = metadata_json(metadata)

        async def op(conn: AsyncConnection) -> SessionInfo:
            tree_id = new_id()
            rows, chains = [], {}
            for p in prepared:  # parents first, so every parent's chain digest is known
                rows.append(node_row(p.node, tree_id=tree_id, depth=p.depth,
                                     latest_checkpoint_id=p.latest_checkpoint_id,
                                     session_id=None, parent_chain=chains.get(p.node.parent_id)))
                chains[p.node.id] = rows[-1]["chain_hash"]
            # Ids are unique per tree, so an unrelated session that happens to share an id
            # imports fine; the same node (same id and content hash) means a re-import, of
            # this tenant's (W1: another tenant's imports are not an oracle, nor a block).
            stored = await queries.stored_hashes(conn, [p.node.id for p in prepared],
                                                 db.tenant)
            same = sorted((r["id"], r["content_hash"]) for r in rows
                          if (r["id"], r["content_hash"]) in stored)
            if same:
                holders = await queries.sessions_holding(conn, same, db.tenant)
                raise already_imported([nid for nid, _ in same], holders)
            await conn.execute(insert(trees).values(id=tree_id, created_at=utc_now()))
            for start in range(0, len(rows), 1000):
                await conn.execute(insert(nodes), rows[start : start + 1000])
            await db.index.index_tree(conn, tree_id, [(p.node, p.depth) for p in prepared])
            return await db.insert_session(conn, tree_id, leaf_id, title, meta_json,
                                           op="import")

        return await db.write(op)

    async def _already_appended(
        self, conn: AsyncConnection, row: RowMapping, node_id: str, msg: Message,
        stamp: datetime,
    ) -> Node | None:
        """A repeated append with the same caller id returns the stored node (exactly once)."""
        found = await queries.trees_of_node(conn, node_id, self.access.tenant)  # W1: ours only
        if not found:
            return None
        if row["tree_id"] in found:
            tree_id = row["tree_id"]
            found = await queries.walk_up(conn, tree_id, node_id, node_id)
            node = found.get(node_id)
            if isinstance(node, Node) and node.payload == msg and node.created_at == stamp:
                return node
        raise DuplicateNodeError(f"node id {node_id!r} is already stored with other content; "
                                 "choose a new id")
