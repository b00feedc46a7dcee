"""Result values the store hands back: session metadata, the outcome of a commit, recall hits,
mirror look-ups and writes, tokens. Plain dataclasses, so a `SessionStore` of another kind
(`protocol.py`) returns the same values without SQL."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from contextfold.core.values.messages import Node

# SPEC W1: the tenant of every session the library and the CLI create (and of sessions
# stored before tenants existed); the service without --auth acts as this tenant.
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class SessionInfo:
    """One session: a leaf in a tree plus the revision counter of SPEC C1."""

    id: str
    tree_id: str
    leaf_id: str | None
    branch_revision: int
    read_only: bool
    title: str | None
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)
    tenant_id: str = DEFAULT_TENANT
    # The session's last leaf move (append, commit, retry, ...): its last activity. Metadata
    # writes (a rename, an archive) do not move it. None where a store does not keep it.
    updated_at: datetime | None = None


@dataclass(frozen=True)
class CommitResult:
    """Outcome of `commit_checkpoint` (SPEC C2-C3): committed, or stale with the reason."""

    status: Literal["committed", "stale"]
    checkpoint: Node | None
    reason: str | None
    session: SessionInfo

    @property
    def committed(self) -> bool:
        return self.status == "committed"


@dataclass(frozen=True)
class RecallHit:
    """A message found by recall (SPEC L2) on a session's branch.

    position  its index on the branch (0 = the first node from the root)
    turn      the number of user messages on the branch up to and including it
    snippet   a bounded excerpt around the match ("" for an expanded message)
    """

    node: Node
    position: int
    turn: int
    snippet: str = ""
    score: float = 0.0


@dataclass(frozen=True)
class MirrorHit:
    """The deepest node stored under one prefix hash (a checkpoint after the message wins)."""

    prefix_hash: str
    tree_id: str
    node_id: str
    depth: int
    message_id: str  # the message node the chain ends at (node_id itself, or the
    # message a checkpoint follows)


@dataclass(frozen=True)
class MirrorWrite:
    """What `mirror_extend` did: the nodes it wrote, where the leaf is, and how it moved."""

    nodes: tuple[Node, ...]
    node_ids: tuple[str, ...]  # the message node of each hash given
    leaf_id: str | None
    moved: str | None  # None (leaf unchanged), "append", "branch" or "switch"
    from_leaf: str | None = None  # the leaf before this call
    held: bool = False  # `hold_last`: the last message is new and was not written


@dataclass(frozen=True)
class TokenInfo:
    """A stored token, without the token itself (only its digest is stored)."""

    id: str
    tenant_id: str
    label: str | None
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None
