"""Content mirror (SPEC Y1): `mirror_index` maps a content-hash chain to the node holding it,
so a stateless client that resends its whole history continues the branch it already has.

Append-only like `nodes` (triggers refuse UPDATE and DELETE). Nothing to backfill: only
conversations mirrored from now on are indexed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mirror_index",
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("node_id", sa.String, nullable=False),
        sa.Column("prefix_hash", sa.String(64), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("message_id", sa.String, nullable=False),
        sa.PrimaryKeyConstraint("tree_id", "node_id", name="pk_mirror_index"),
    )
    op.create_index("ix_mirror_index_hash", "mirror_index", ["prefix_hash"])
    if op.get_bind().dialect.name == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(f"CREATE TRIGGER mirror_index_no_{action.lower()} BEFORE {action} ON "
                       "mirror_index BEGIN SELECT RAISE(ABORT, "
                       "'contextfold: mirror_index rows are append-only'); END")
    else:
        op.execute("CREATE TRIGGER mirror_index_append_only BEFORE UPDATE OR DELETE ON "
                   "mirror_index FOR EACH ROW EXECUTE FUNCTION contextfold_append_only()")


def downgrade() -> None:
    op.drop_table("mirror_index")
