"""Damage a database by hand, the way it happens in real life: rows written by something
other than the store (a bad import script, a partial restore, a manual fix), inserted
straight into the tables (SPEC D1). Shared by the store's and the service's damage tests."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert, select, update

from contextfold.store.sql.engine import write_connection
from contextfold.store.sql.rows import chain_digest, content_hash, payload_json
from contextfold.store.sql.schema import nodes, sessions

NOW = datetime(2025, 1, 1, tzinfo=UTC)


async def raw_node(store, tree_id, node_id, parent_id, payload, *, kind="message",
                   first_kept_id=None, good_hash=True):
    """Insert a node row directly, bypassing every check of the store."""
    body = payload if isinstance(payload, str) else payload_json(payload)
    # The role column as the store writes it (a wrong one is damage of its own).
    role = getattr(payload, "role", None) if kind == "message" else None
    digest = content_hash(node_id, parent_id, NOW, body) if good_hash else "0" * 64
    async with write_connection(store.engine) as conn:
        # A well-formed row links into the tamper-evidence chain like the store's own rows.
        parent_chain = (await conn.execute(select(nodes.c.chain_hash).where(
            nodes.c.tree_id == tree_id, nodes.c.id == parent_id))).scalar_one_or_none()
        await conn.execute(insert(nodes).values(chain_hash=chain_digest(parent_chain, digest),
            tree_id=tree_id, id=node_id, parent_id=parent_id, kind=kind, role=role, depth=99,
            latest_checkpoint_id=node_id if kind == "checkpoint" else None,
            first_kept_id=first_kept_id, session_id=None, created_at=NOW, payload=body,
            content_hash=digest))


async def set_leaf(store, session_id, leaf_id):
    async with write_connection(store.engine) as conn:
        await conn.execute(update(sessions).where(sessions.c.id == session_id)
                           .values(leaf_id=leaf_id))
