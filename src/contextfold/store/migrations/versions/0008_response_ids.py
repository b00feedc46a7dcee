"""Responses API continuation handles (SPEC Y6, Y12): `response_ids` maps a response id a
proxy answered, under the owner it answered it for (the tenant and the client key's
fingerprint, never the key), to the stored reply node a `previous_response_id` continues
from. A continuation is then one primary-key look-up, scoped by its owner, instead of a scan
of every session's metadata (issue 38); another owner's id is simply not there.

Append-only like `mirror_index`. Backfilled from the ids the proxy kept in each session's
metadata (`proxy_responses`) before this revision; an entry without its owner (written
before SPEC Y12) proves no scope and is not carried over, as it was not honoured.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "response_ids",
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("response_id", sa.String, nullable=False),
        sa.Column("tree_id", sa.String, nullable=False),
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("node_id", sa.String, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "response_id", name="pk_response_ids"),
    )
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for action in ("UPDATE", "DELETE"):
            op.execute(f"CREATE TRIGGER response_ids_no_{action.lower()} BEFORE {action} ON "
                       "response_ids BEGIN SELECT RAISE(ABORT, "
                       "'contextfold: response_ids rows are append-only'); END")
        op.execute("CREATE TRIGGER response_ids_no_replace BEFORE INSERT ON response_ids "
                   "WHEN EXISTS (SELECT 1 FROM response_ids WHERE owner = NEW.owner AND "
                   "response_id = NEW.response_id) BEGIN SELECT RAISE(ABORT, "
                   "'contextfold: response_ids rows are append-only'); END")
    else:
        op.execute("CREATE TRIGGER response_ids_append_only BEFORE UPDATE OR DELETE ON "
                   "response_ids FOR EACH ROW EXECUTE FUNCTION contextfold_append_only()")
        op.execute("CREATE TRIGGER response_ids_no_truncate BEFORE TRUNCATE ON response_ids "
                   "FOR EACH STATEMENT EXECUTE FUNCTION contextfold_append_only()")
    rows, seen = [], set()
    now = datetime.now(UTC)
    for sid, tree_id, meta in bind.execute(sa.text(
            "SELECT id, tree_id, metadata FROM sessions ORDER BY created_at, id")):
        try:
            ids = (json.loads(meta) or {}).get("proxy_responses")
        except (ValueError, AttributeError):
            continue
        if not isinstance(ids, dict):
            continue
        for rid, entry in ids.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("owner"), str) or \
                    not isinstance(entry.get("node"), str) or (entry["owner"], rid) in seen:
                continue
            seen.add((entry["owner"], rid))
            rows.append({"owner": entry["owner"], "response_id": rid, "tree_id": tree_id,
                         "session_id": sid, "node_id": entry["node"],
                         "created_at": now if bind.dialect.name != "sqlite"
                         else now.replace(tzinfo=None)})
    if rows:
        op.bulk_insert(table, rows)


def downgrade() -> None:
    op.drop_table("response_ids")
