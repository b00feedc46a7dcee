"""Tenants (SPEC W1, W2): every session belongs to a tenant; API tokens stored hashed.

`sessions.tenant_id` (existing rows and every session the library or the CLI creates
belong to the tenant "default"); `tenants` names the tenants; `api_tokens` keeps the
SHA-256 digest of each bearer token, never the token.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("tenant_id", sa.String, nullable=False,
                                        server_default="default"))
    op.create_index("ix_sessions_tenant", "sessions", ["tenant_id", "created_at"])
    op.create_table(
        "tenants",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("tenant_id", sa.String, nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("label", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_tokens_tenant", "api_tokens", ["tenant_id"])


def downgrade() -> None:
    op.drop_index("ix_api_tokens_tenant", table_name="api_tokens")
    op.drop_table("api_tokens")
    op.drop_table("tenants")
    op.drop_index("ix_sessions_tenant", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("tenant_id")
