"""Tamper evidence: chained node digests, per-tree node ids, no REPLACE or TRUNCATE.

* `nodes.chain_hash` = sha256(parent's chain_hash, own content_hash): rewriting one node
  means rewriting the digest of every descendant (git's object model). Existing rows are
  back-filled, parents first.
* Node ids are unique per tree (the primary key `(tree_id, id)`), no longer across the
  database: imported ids such as Pi's 8-hex entry ids may recur in unrelated sessions.
  `ux_nodes_id` (unique) becomes `ix_nodes_id` (plain) for the id-only look-ups.
* SQLite: `INSERT OR REPLACE` deletes the old row without firing a DELETE trigger unless
  recursive triggers are on; a BEFORE INSERT trigger refuses an insert whose key is taken
  (and the engine turns `recursive_triggers` on for every connection, belt and braces).
* PostgreSQL: TRUNCATE fires no row trigger; a statement-level trigger refuses it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from contextfold.store.sql.rows import chain_digest

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

APPEND_ONLY_KEYS = {"nodes": ("tree_id", "id"), "leaf_moves": ("session_id", "revision")}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column("nodes", sa.Column("chain_hash", sa.String(64), nullable=True))
    _backfill_chain(dialect)
    op.drop_index("ux_nodes_id", table_name="nodes")
    op.create_index("ix_nodes_id", "nodes", ["id"])
    if dialect == "sqlite":
        for table, (a, b) in APPEND_ONLY_KEYS.items():
            op.execute(
                f"CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table} "
                f"WHEN EXISTS (SELECT 1 FROM {table} WHERE {a} = NEW.{a} AND {b} = NEW.{b}) "
                f"BEGIN SELECT RAISE(ABORT, 'contextfold: {table} rows are append-only "
                "(REPLACE refused)'); END"
            )
    elif dialect == "postgresql":
        for table in APPEND_ONLY_KEYS:
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION contextfold_append_only()"
            )


def _backfill_chain(dialect: str) -> None:
    """Digest every stored node, parents first (depth order), with the UPDATE guard lifted
    for the length of this migration's transaction."""
    bind = op.get_bind()
    if dialect == "postgresql":
        op.execute("ALTER TABLE nodes DISABLE TRIGGER nodes_append_only")
    else:
        op.execute("DROP TRIGGER nodes_no_update")
    rows = bind.execute(sa.text(
        "SELECT tree_id, id, parent_id, content_hash FROM nodes ORDER BY tree_id, depth"
    )).all()
    chains: dict[tuple[str, str], str] = {}
    update = sa.text("UPDATE nodes SET chain_hash = :c WHERE tree_id = :t AND id = :i")
    for tree_id, node_id, parent_id, digest in rows:
        parent = chains.get((tree_id, parent_id)) if parent_id is not None else None
        chains[(tree_id, node_id)] = chain_digest(parent, digest)
        bind.execute(update, {"c": chains[(tree_id, node_id)], "t": tree_id, "i": node_id})
    if dialect == "postgresql":
        op.execute("ALTER TABLE nodes ENABLE TRIGGER nodes_append_only")
    else:
        op.execute("CREATE TRIGGER nodes_no_update BEFORE UPDATE ON nodes "
                   "BEGIN SELECT RAISE(ABORT, 'contextfold: nodes rows are append-only'); END")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table in APPEND_ONLY_KEYS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_replace")
    elif dialect == "postgresql":
        for table in APPEND_ONLY_KEYS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    op.drop_index("ix_nodes_id", table_name="nodes")
    op.create_index("ux_nodes_id", "nodes", ["id"], unique=True)
    op.execute("ALTER TABLE nodes DROP COLUMN chain_hash")
