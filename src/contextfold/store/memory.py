"""`MemoryStore`: linear sessions held in memory, for the one compaction path to run over.

Replay (`contextfold replay`, `POST /v1/replay`, the benchmarks) feeds a recorded session into
contextfold's own engine: the same sizing driver (`runtime.fitting`) and the same compaction
path (`runtime.compaction.compact_session`: plan → summarise → conditional commit) that
`Conversation` and the mirror run over the SQL store. This store gives that path what it
reads and writes, without a database: sessions whose branch only grows at its leaf (no
retry, edit or fork), nodes that never change, and a conditional commit that re-checks the
leaf and revision the plan was made for (SPEC C2-C3). Loads are O(tail) like the SQL store's:
from the latest checkpoint's first kept node (SPEC T2). Recall (SPEC L1, L2) has the SQL
store's contract too: `search_history` over an index brought up to date at each search
(`memory_search`), `expand_history` by branch position; so automatic recall (L5) runs in
replay as it does in the product.

Nothing is persisted: `close()` forgets everything. The methods are coroutines only to speak
the store protocol; none of them ever waits.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..core.planning.plan import Plan
from ..core.values.messages import Checkpoint, Message, Node, utc_now
from ..core.values.tree import Branch, check_stability
from ..ids import new_id
from .errors import (
    InvalidOperationError,
    NodeNotFoundError,
    SessionNotFoundError,
    StaleBranchError,
)
from .inputs import as_message, checked_title
from .recall.memory_search import MemoryIndex
from .recall.recall_args import check_expand, expand_range, search_query
from .values import CommitResult, RecallHit, SessionInfo

if TYPE_CHECKING:
    from ..core.recall.recall_text import SearchQuery


@dataclass
class _Session:
    info: SessionInfo
    chain: list[Node] = field(default_factory=list)
    # Index in `chain` where the part the model needs begins (SPEC T2): the latest
    # checkpoint's first kept node, or the checkpoint itself when it kept nothing raw.
    load_from: int = 0
    positions: dict[str, int] = field(default_factory=dict)
    index: MemoryIndex = field(default_factory=MemoryIndex)


class MemoryStore:
    """Linear sessions in memory (see the module docstring)."""

    database = ":memory:"

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}

    # ------------------------------------------------------------------ sessions

    async def create_session(self, *, title: str | None = None,
                             metadata: Mapping[str, Any] | None = None) -> SessionInfo:
        """A new, empty session."""
        info = SessionInfo(id=new_id(), tree_id=new_id(), leaf_id=None, branch_revision=0,
                           read_only=False, title=checked_title(title), created_at=utc_now(),
                           metadata=dict(metadata or {}))
        self._sessions[info.id] = _Session(info)
        return info

    async def import_tree(self, nodes_in: Sequence[Node], leaf_id: str, *,
                          title: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> SessionInfo:
        """A session holding the chain `nodes_in` (oldest first, each the parent of the
        next), ending at `leaf_id`; checkpoints among them are kept as recorded."""
        info = await self.create_session(title=title, metadata=metadata)
        session = self._sessions[info.id]
        parent: str | None = None
        for node in nodes_in:
            if node.parent_id != parent:
                raise InvalidOperationError(
                    f"a memory store holds linear sessions: node {node.id!r} does not follow "
                    f"{parent!r}")
            self._push(session, node)
            parent = node.id
        if parent != leaf_id:
            raise InvalidOperationError(f"the chain ends at {parent!r}, not at {leaf_id!r}")
        return session.info

    async def get_session(self, session_id: str) -> SessionInfo:
        return self._session(session_id).info

    async def update_session_metadata(self, session_id: str,
                                      updates: Mapping[str, Any]) -> SessionInfo:
        """Merge `updates` into the session's metadata (top-level keys replace), as the
        SQL store does: not history, no revision bump."""
        session = self._session(session_id)
        session.info = replace(session.info, metadata={**session.info.metadata, **updates})
        return session.info

    async def list_sessions(self) -> list[SessionInfo]:
        return [s.info for s in self._sessions.values()]

    async def sessions_newest(self, *, limit: int, before: tuple[datetime, str] | None = None,
                              check_damage: bool = False) -> list[SessionInfo]:
        """As the SQL store's: newest first by (created_at, id), those before `before`
        (nothing here is ever damaged: `check_damage` changes nothing)."""
        infos = sorted((s.info for s in self._sessions.values()),
                       key=lambda i: (i.created_at, i.id), reverse=True)
        if before is not None:
            infos = [i for i in infos if (i.created_at, i.id) < before]
        return infos[:limit]

    async def close(self) -> None:
        self._sessions.clear()

    # ------------------------------------------------------------------ writing

    async def append(self, session_id: str, message: Message, *,
                     expected_leaf_id: str | None = None, node_id: str | None = None,
                     created_at: datetime | None = None) -> Node:
        """Append one message at the leaf (the ordinary path: never a checkpoint, C6)."""
        session = self._session(session_id)
        msg = as_message(message)
        leaf = session.info.leaf_id
        if expected_leaf_id is not None and expected_leaf_id != leaf:
            raise StaleBranchError(session_id, expected_leaf_id, leaf)
        node = Node(id=node_id or new_id(), parent_id=leaf, created_at=created_at or utc_now(),
                    payload=msg)
        self._push(session, node)
        return node

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]:
        return [await self.append(session_id, m) for m in messages]

    async def commit_checkpoint(self, plan: Plan, checkpoint: Checkpoint, *,
                                session_id: str) -> CommitResult:
        """Append `checkpoint` at the leaf iff the branch is still the one `plan` was made
        for (SPEC C2): same leaf and revision, a settled tool workflow, the boundary on it."""
        session = self._session(session_id)
        if checkpoint.first_kept_id != plan.first_kept_id:
            raise InvalidOperationError(
                f"checkpoint keeps raw history from {checkpoint.first_kept_id!r} but the plan's "
                f"boundary is {plan.first_kept_id!r}; build the checkpoint from the plan")
        info = session.info
        reason = None
        if (info.leaf_id, info.branch_revision) != (plan.session_leaf_id, plan.branch_revision):
            reason = (f"the branch moved: leaf {info.leaf_id!r} revision {info.branch_revision}, "
                      f"the plan saw {plan.session_leaf_id!r} revision {plan.branch_revision}")
        elif plan.first_kept_id is not None and plan.first_kept_id not in session.positions:
            reason = f"the boundary {plan.first_kept_id!r} is not on the branch"
        elif not check_stability(self._branch(session, session.load_from)).stable:
            reason = "the tool workflow at the leaf is not settled"
        if reason is not None:
            return CommitResult("stale", None, reason, info)
        node = Node(id=new_id(), parent_id=info.leaf_id, created_at=utc_now(),
                    payload=checkpoint)
        self._push(session, node)
        return CommitResult("committed", node, None, session.info)

    @contextlib.asynccontextmanager
    async def compaction_lease(self, session_id: str, ttl: float = 30) -> AsyncIterator[None]:
        """One process, one writer per session: nothing to lease (the session must exist)."""
        del ttl
        self._session(session_id)
        yield

    # ------------------------------------------------------------------ reading

    async def load_branch(self, session_id: str) -> Branch:
        """The part of the branch the model needs: O(tail) (SPEC T2)."""
        session = self._session(session_id)
        return self._branch(session, session.load_from)

    async def load_full_branch(self, session_id: str) -> Branch:
        """The whole branch from its root."""
        return self._branch(self._session(session_id), 0)

    # ------------------------------------------------------------------ recall (SPEC L)

    async def search_history(self, session_id: str, query: str | SearchQuery, *,
                             limit: int = 10, any_term: bool = False) -> list[RecallHit]:
        """Full-text search over the session's branch (SPEC L1, L4), best first: the SQL
        store's contract (every term, or any with `any_term`; identifiers verbatim; CJK;
        `word*` a prefix), over the index kept as nodes are pushed (`memory_search`)."""
        parsed = search_query(query, limit)
        return self._session(session_id).index.search(parsed, limit, any_term=any_term)

    async def search_history_each(self, session_id: str,
                                  queries: Sequence[str | SearchQuery], *, limit: int = 10,
                                  any_term: bool = False) -> list[list[RecallHit]]:
        """`search_history` of each query (the SQL store's one-read form)."""
        return [await self.search_history(session_id, q, limit=limit, any_term=any_term)
                for q in queries]

    async def expand_history(self, session_id: str, node_id: str, *, before: int = 0,
                             after: int = 0, to_node_id: str | None = None,
                             max_nodes: int = 50) -> list[RecallHit]:
        """The original messages around `node_id` (or from it to `to_node_id`) on the
        session's branch, in order, at most `max_nodes` of them (SPEC L2, L4)."""
        check_expand(before, after, max_nodes)
        session = self._session(session_id)
        at = self._place(session, node_id, session_id)
        other = None if to_node_id is None else self._place(session, to_node_id, session_id)
        first, last = expand_range(at, before, after, other, max_nodes)
        return [RecallHit(node=node, position=i, turn=session.index.turns[i])
                for i, node in enumerate(session.chain[first:last + 1], first)
                if node.message is not None]

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _place(session: _Session, node_id: str, session_id: str) -> int:
        at = session.positions.get(node_id)
        if at is None:
            # The SQL store's words for "no such node" and "another branch's node" (L4).
            raise NodeNotFoundError(f"node {node_id!r} is not on the branch of session "
                                    f"{session_id!r}")
        return at

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFoundError(session_id, self.database)
        return session

    @staticmethod
    def _branch(session: _Session, start: int) -> Branch:
        # Built by appending at the leaf only: valid by construction, no re-walk needed.
        return Branch(nodes=tuple(session.chain[start:]), complete=start == 0,
                      revision=session.info.branch_revision)

    @staticmethod
    def _push(session: _Session, node: Node) -> None:
        session.positions[node.id] = len(session.chain)
        session.chain.append(node)
        session.index.push(node)
        cp = node.checkpoint
        if cp is not None:
            session.load_from = (session.positions[cp.first_kept_id] if cp.first_kept_id
                                 else len(session.chain) - 1)
        session.info = replace(session.info, leaf_id=node.id,
                               branch_revision=session.info.branch_revision + 1)
