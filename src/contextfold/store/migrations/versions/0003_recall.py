"""Recall (SPEC L1, L4): the `recall_nodes` placement table and the full-text index, with
every stored node placed and every stored message indexed (backfill).

SQLite: an FTS5 table `recall_fts` (contentless, unicode61 over pre-tokenised text, see
`contextfold.core.recall.recall_text`). PostgreSQL: `recall_nodes.document` is a tsvector
('simple' configuration over the same tokens) with a GIN index.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from contextfold.core.values.tree import InvalidRecord
from contextfold.store.recall.recall_index import Entry, place_new_tree, statements
from contextfold.store.sql.rows import record_from_row
from contextfold.store.sql.schema import nodes, trees

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    document = sa.Text() if dialect == "sqlite" else sa.dialects.postgresql.TSVECTOR()
    op.create_table(
        "recall_nodes",
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("node_id", sa.String, nullable=False),
        sa.Column("line_id", sa.String, nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("turn", sa.Integer, nullable=False),
        sa.Column("document", document, nullable=True),
        sa.PrimaryKeyConstraint("tree_id", "node_id", name="pk_recall_nodes"),
    )
    op.create_index("ux_recall_nodes_line", "recall_nodes", ["tree_id", "line_id", "depth"],
                    unique=True)
    if dialect == "sqlite":
        op.execute("CREATE VIRTUAL TABLE recall_fts USING fts5(document, content='', "
                   "tokenize='unicode61 remove_diacritics 0')")
        for action in ("UPDATE", "DELETE"):
            op.execute(f"CREATE TRIGGER recall_nodes_no_{action.lower()} BEFORE {action} ON "
                       "recall_nodes BEGIN SELECT RAISE(ABORT, "
                       "'contextfold: recall_nodes rows are append-only'); END")
    else:
        op.execute("CREATE INDEX ix_recall_nodes_document ON recall_nodes USING GIN (document)")
        op.execute("CREATE TRIGGER recall_nodes_append_only BEFORE UPDATE OR DELETE ON "
                   "recall_nodes FOR EACH ROW EXECUTE FUNCTION contextfold_append_only()")
    _backfill(op.get_bind())


def _backfill(conn: sa.Connection) -> None:
    """Place and index every node already stored, one tree at a time (parents first)."""
    tree_ids = [r[0] for r in conn.execute(sa.select(trees.c.id).order_by(trees.c.id))]
    cols = [nodes.c[name] for name in ("tree_id", "id", "parent_id", "created_at", "payload",
                                        "content_hash", "depth")]
    for tree_id in tree_ids:
        rows = conn.execute(sa.select(*cols).where(nodes.c.tree_id == tree_id).order_by(
            nodes.c.depth, nodes.c.created_at, nodes.c.id)).mappings().all()
        entries = []
        for row in rows:
            record = record_from_row(row)
            if isinstance(record, InvalidRecord):
                # Damaged rows keep their place (the branch still passes through them) but
                # are not indexed: recall never shows content it cannot trust.
                entries.append(Entry(row["id"], row["parent_id"], row["depth"], False, ""))
            else:
                entries.append(Entry.of(record, row["depth"]))
        for stmt, batch in statements(conn.dialect.name, place_new_tree(tree_id, entries)):
            conn.execute(stmt, batch)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TABLE IF EXISTS recall_fts")
    op.drop_table("recall_nodes")
