"""A mirror look-up reads the rows it asks for (issue 26): `mirror_index` is indexed by
`(prefix_hash, tree_id)` instead of `prefix_hash` alone.

The look-up of a resent list asks for a few hashes in one tree (`prefix_hash IN (...) AND
tree_id = ?`). Without table statistics (contextfold never runs ANALYZE) SQLite's planner
preferred the primary key for `tree_id = ?` over the hash index and read every row of the
tree, so each request of a 5,000-message session spent milliseconds there, growing with its
length. With both columns in one index the planner takes it; look-ups by hash alone (a new
client's list, across trees) use it as they used the old one.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_mirror_index_hash_tree", "mirror_index", ["prefix_hash", "tree_id"])
    op.drop_index("ix_mirror_index_hash", table_name="mirror_index")


def downgrade() -> None:
    op.create_index("ix_mirror_index_hash", "mirror_index", ["prefix_hash"])
    op.drop_index("ix_mirror_index_hash_tree", table_name="mirror_index")
