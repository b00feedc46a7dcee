"""Initial schema: trees, append-only nodes, sessions, leaf-move log, compaction leases.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from contextfold.store.sql.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Tables whose rows are never updated or deleted once written (SPEC "durable history").
APPEND_ONLY = ("nodes", "leaf_moves")


def upgrade() -> None:
    op.create_table(
        "trees",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("id", sa.String, nullable=False),
        sa.Column("parent_id", sa.String, nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("latest_checkpoint_id", sa.String, nullable=True),
        sa.Column("first_kept_id", sa.String, nullable=True),
        sa.Column("session_id", sa.String, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("tree_id", "id", name="pk_nodes"),
    )
    op.create_index("ux_nodes_id", "nodes", ["id"], unique=True)
    op.create_table(
        "sessions",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("leaf_id", sa.String, nullable=True),
        sa.Column("branch_revision", sa.Integer, nullable=False),
        sa.Column("read_only", sa.Boolean, nullable=False),
        sa.Column("title", sa.Text, nullable=True),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_sessions_tree_id", "sessions", ["tree_id"])
    op.create_table(
        "leaf_moves",
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("from_leaf_id", sa.String, nullable=True),
        sa.Column("to_leaf_id", sa.String, nullable=True),
        sa.Column("node_id", sa.String, nullable=True),
        sa.Column("planned_leaf_id", sa.String, nullable=True),
        sa.Column("planned_revision", sa.Integer, nullable=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "revision", name="pk_leaf_moves"),
    )
    op.create_table(
        "compaction_leases",
        sa.Column("session_id", sa.String, primary_key=True),
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("holder", sa.String, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    _create_append_only_triggers()


def _create_append_only_triggers() -> None:
    """Make the database itself refuse UPDATE and DELETE on durable rows."""
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION contextfold_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'contextfold: % rows are append-only (% refused)', "
            "TG_TABLE_NAME, TG_OP; END $$"
        )
        for table in APPEND_ONLY:
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION contextfold_append_only()"
            )
    elif dialect == "sqlite":
        for table in APPEND_ONLY:
            for action in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'contextfold: {table} rows are append-only'); END"
                )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table in ("compaction_leases", "leaf_moves", "sessions", "nodes", "trees"):
        op.drop_table(table)
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS contextfold_append_only()")
