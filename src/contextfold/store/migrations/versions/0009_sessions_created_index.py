"""Sessions newest first without reading them all (issue 38: one database, for months):
`sessions` is indexed by `(created_at, id)`, and a tenant's by `(tenant_id, created_at, id)`.

`contextfold mcp` finds the conversation a client means (a proxied session's label, the
working directory its agent stated, the client's name: `mcp/which.py`) among the newest
sessions. It read every session of the store on each tool call (3-6 s with 20,000 sessions
on SQLite); it now reads them a page at a time, newest first, and stops at the first that
matches. A page is a keyset range on one of these indexes (`SqlSessionStore.sessions_newest`),
read in order: `ix_sessions_tenant` gains `id` so that a tenant's page needs no sort either
(without it, PostgreSQL sorted every older session of the tenant to find the page's ties).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sessions_created", "sessions", ["created_at", "id"])
    op.drop_index("ix_sessions_tenant", table_name="sessions")
    op.create_index("ix_sessions_tenant", "sessions", ["tenant_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_tenant", table_name="sessions")
    op.create_index("ix_sessions_tenant", "sessions", ["tenant_id", "created_at"])
    op.drop_index("ix_sessions_created", table_name="sessions")
