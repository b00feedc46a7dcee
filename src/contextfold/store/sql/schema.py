"""Table definitions (SQLAlchemy Core). The Alembic migrations create exactly these tables.

Built to shard: every row carries `tree_id`, the key of the session tree it belongs to, and
every query of a node is bounded by it; ids come from the application (UUIDv7), never from
a database sequence. See docs/store.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every backend.

    PostgreSQL keeps the zone; SQLite stores text without one, so values are normalised to
    UTC on the way in and marked UTC on the way out. A naive input is taken as UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData()

trees = Table(
    "trees",
    metadata,
    Column("id", String, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
)

# Append-only (enforced by triggers created in the migration). `depth` and
# `latest_checkpoint_id` are computed from the parent row at insert time, so loading what
# the model needs can stop at the latest checkpoint's boundary without reading history.
nodes = Table(
    "nodes",
    metadata,
    Column("tree_id", String, nullable=False),
    Column("id", String, nullable=False),
    Column("parent_id", String, nullable=True),
    Column("kind", String(16), nullable=False),
    Column("role", String(16), nullable=True),
    Column("depth", Integer, nullable=False),
    Column("latest_checkpoint_id", String, nullable=True),
    Column("first_kept_id", String, nullable=True),
    Column("session_id", String, nullable=True),  # the session whose write inserted it
    Column("created_at", UTCDateTime, nullable=False),
    Column("payload", Text, nullable=False),  # canonical JSON of the payload
    Column("content_hash", String(64), nullable=False),  # sha256 over id, parent, time, payload
    # sha256 over the parent's chain_hash and this content_hash (migration 0002): rewriting
    # one node means rewriting every descendant's digest too (tamper evidence, docs/store.md).
    Column("chain_hash", String(64), nullable=True),
    PrimaryKeyConstraint("tree_id", "id", name="pk_nodes"),
    # Ids are unique per tree only (imported ids, e.g. Pi's 8-hex ones, may repeat across
    # unrelated trees); this index serves the id-only look-ups.
    Index("ix_nodes_id", "id"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", String, primary_key=True),
    Column("tree_id", String, nullable=False, index=True),
    Column("leaf_id", String, nullable=True),
    Column("branch_revision", Integer, nullable=False),
    Column("read_only", Boolean, nullable=False),
    Column("title", Text, nullable=True),
    Column("metadata", Text, nullable=False),  # JSON object
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # Migration 0005 (SPEC W1): the tenant that owns the session; the library's are "default".
    Column("tenant_id", String, nullable=False, server_default="default"),
    # Migration 0009 (issue 38): sessions newest first, a page at a time, read in index order
    # (`sessions_newest`): a tenant's, and every tenant's.
    Index("ix_sessions_tenant", "tenant_id", "created_at", "id"),
    Index("ix_sessions_created", "created_at", "id"),
)

# Append-only audit log of every leaf move (also enforced by triggers). It is what lets the
# invariant checker prove that revisions only grow and that no commit was stale.
leaf_moves = Table(
    "leaf_moves",
    metadata,
    Column("tree_id", String, nullable=False),
    Column("session_id", String, nullable=False),
    Column("revision", Integer, nullable=False),
    # create|append|commit|retry|edit|import|fork; a mirror's branch|switch (SPEC Y1)
    Column("op", String(16), nullable=False),
    Column("from_leaf_id", String, nullable=True),
    Column("to_leaf_id", String, nullable=True),
    Column("node_id", String, nullable=True),  # last node inserted by this move, if any
    Column("planned_leaf_id", String, nullable=True),  # commit: the plan's leaf (SPEC C1)
    Column("planned_revision", Integer, nullable=True),  # commit: the plan's revision
    Column("at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("session_id", "revision", name="pk_leaf_moves"),
)

compaction_leases = Table(
    "compaction_leases",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("tree_id", String, nullable=False),
    Column("holder", String, nullable=False),
    Column("expires_at", Float, nullable=False),  # database clock, seconds since the epoch
)

# Recall (SPEC L1, L4): one row per node, written in the same transaction as the node.
# `line_id` + `depth` place the node on the tree so the nodes of one branch are selected
# by a few range conditions, without walking the branch (see store/recall/recall.py): a node
# continues its parent's line unless the parent already has a child on it, then it starts
# its own line (named by its id). `turn` counts the user messages on the branch up to it.
# `document` is the PostgreSQL tsvector of the message; SQLite keeps it in the FTS5 table
# `recall_fts` (rowid = this table's rowid) and leaves the column empty.
recall_nodes = Table(
    "recall_nodes",
    metadata,
    Column("tree_id", String, nullable=False),
    Column("node_id", String, nullable=False),
    Column("line_id", String, nullable=False),
    Column("depth", Integer, nullable=False),
    Column("turn", Integer, nullable=False),
    Column("document", Text, nullable=True),
    PrimaryKeyConstraint("tree_id", "node_id", name="pk_recall_nodes"),
    Index("ux_recall_nodes_line", "tree_id", "line_id", "depth", unique=True),
)

# Content mirror (SPEC Y1, migration 0004): which node holds the message whose content-hash
# chain is `prefix_hash` (sha256 over a scope and the normalised messages up to it, see
# runtime/mirror.py). A checkpoint added right after that message is indexed under the same
# hash one level deeper, so a client that resends the same prefix continues after it.
mirror_index = Table(
    "mirror_index",
    metadata,
    Column("tree_id", String, nullable=False),
    Column("node_id", String, nullable=False),
    Column("prefix_hash", String(64), nullable=False),
    Column("depth", Integer, nullable=False),
    Column("message_id", String, nullable=False),  # the message the chain ends at
    PrimaryKeyConstraint("tree_id", "node_id", name="pk_mirror_index"),
    # Both columns (migration 0007): a look-up asks for a few hashes of one tree.
    Index("ix_mirror_index_hash_tree", "prefix_hash", "tree_id"),
)

# Migration 0008 (SPEC Y6, Y12): a Responses API response id the proxy answered, under the
# owner it answered it for (tenant and client key fingerprint, never the key), and the stored
# reply node a `previous_response_id` continues from: one primary-key look-up, scoped.
# Append-only (triggers).
response_ids = Table(
    "response_ids",
    metadata,
    Column("owner", String, nullable=False),
    Column("response_id", String, nullable=False),
    Column("tree_id", String, nullable=False),
    Column("session_id", String, nullable=False),
    Column("node_id", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("owner", "response_id", name="pk_response_ids"),
)

# Migration 0005 (SPEC W1, W2): tenants and their bearer tokens. Only the SHA-256 digest of a
# token is stored: a copy of the database does not let anyone call the service.
tenants = Table(
    "tenants",
    metadata,
    Column("id", String, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String, primary_key=True),
    Column("tenant_id", String, nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("label", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    Index("ix_api_tokens_tenant", "tenant_id"),
)
