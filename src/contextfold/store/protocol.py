"""`SessionStore`: the interface the runtime, CLI and importers code against.

`SqlSessionStore` is the implementation; the protocol lets tests and embedders supply
another one (e.g. an in-memory fake) without depending on SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from contextfold.core.messages import Checkpoint, Message, Node, PinEvent
from contextfold.core.plan import Plan
from contextfold.core.tree import Branch, DamagedBranch

from .values import CommitResult, RecallHit, SessionInfo


@runtime_checkable
class SessionStore(Protocol):
    async def close(self) -> None: ...

    async def create_session(self, *, from_node_id: str | None = None, title: str | None = None,
                             metadata: Mapping[str, Any] | None = None) -> SessionInfo: ...

    async def get_session(self, session_id: str) -> SessionInfo: ...

    async def list_sessions(self) -> list[SessionInfo]: ...

    async def append(self, session_id: str, message: Message, *,
                     expected_leaf_id: str | None = None, node_id: str | None = None,
                     created_at: datetime | None = None) -> Node: ...

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]: ...

    async def append_pin_event(self, session_id: str, event: PinEvent, *,
                               expected_leaf_id: str | None = None,
                               node_id: str | None = None) -> Node: ...

    async def import_tree(self, nodes_in: Sequence[Node], leaf_id: str, *,
                          title: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> SessionInfo: ...

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch: ...

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch: ...

    async def load_branch_page(self, session_id: str, *, limit: int,
                               before_id: str | None = None) -> Branch | DamagedBranch: ...

    async def load_branch_at(self, session_id: str, node_id: str) -> Branch | DamagedBranch: ...

    async def load_tree_page(self, session_id: str, *, limit: int) -> list[Node]: ...

    async def load_tree(self, session_id: str) -> list[Node]: ...

    async def commit_checkpoint(self, plan: Plan, checkpoint: Checkpoint, *,
                                session_id: str) -> CommitResult: ...

    async def retry(self, session_id: str) -> SessionInfo: ...

    async def edit(self, session_id: str, message: Message) -> Node: ...

    async def pop_message(self, session_id: str) -> Node | None: ...

    async def clear_branch(self, session_id: str) -> SessionInfo: ...

    async def fork(self, session_id: str, node_id: str, *,
                   title: str | None = None) -> SessionInfo: ...

    async def search_history(self, session_id: str, query: str, *, limit: int = 10,
                             any_term: bool = False) -> list[RecallHit]: ...

    async def expand_history(self, session_id: str, node_id: str, *, before: int = 0,
                             after: int = 0, to_node_id: str | None = None,
                             max_nodes: int = 50) -> list[RecallHit]: ...

    def compaction_lease(self, session_id: str,
                         ttl: float = 30) -> AbstractAsyncContextManager[None]: ...
