"""Result values the store hands back: session metadata and the outcome of a commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from contextfold.core.messages import Node

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
