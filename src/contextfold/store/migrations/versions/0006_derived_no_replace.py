"""Derived tables keep their first row (issue 24 item 12): `mirror_index` and `recall_nodes`
refuse `INSERT OR REPLACE` / `REPLACE` like `nodes` does (migration 0002).

SQLite: without `recursive_triggers` (the default of any connection but contextfold's), a
REPLACE deletes the row it collides with without firing the DELETE trigger, so a
`BEFORE INSERT` trigger refuses an insert whose key is taken: for `recall_nodes` both keys,
the node and its place on a line (`ux_recall_nodes_line`). The first row stays.
PostgreSQL: `INSERT ... ON CONFLICT DO UPDATE` fires the UPDATE trigger already; TRUNCATE
fires no row trigger, so a statement trigger refuses it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# table -> the condition under which a new row would replace a stored one
TAKEN = {
    "mirror_index": "tree_id = NEW.tree_id AND node_id = NEW.node_id",
    "recall_nodes": "tree_id = NEW.tree_id AND (node_id = NEW.node_id OR "
                    "(line_id = NEW.line_id AND depth = NEW.depth))",
}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table, taken in TAKEN.items():
        if dialect == "sqlite":
            op.execute(
                f"CREATE TRIGGER {table}_no_replace BEFORE INSERT ON {table} "
                f"WHEN EXISTS (SELECT 1 FROM {table} WHERE {taken}) "
                f"BEGIN SELECT RAISE(ABORT, 'contextfold: {table} rows are append-only "
                "(REPLACE refused)'); END")
        elif dialect == "postgresql":
            op.execute(f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                       "FOR EACH STATEMENT EXECUTE FUNCTION contextfold_append_only()")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table in TAKEN:
        if dialect == "sqlite":
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_replace")
        elif dialect == "postgresql":
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
