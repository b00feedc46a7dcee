"""`SessionStore`: every call the runtime, the faces and the integrations make on a store.

`SqlSessionStore` is the implementation; code that uses a store is typed with this protocol,
so a reader (or a type checker) can follow every call into it, and an embedder or a test may
supply another store (e.g. one in memory) without depending on SQL. `SessionReader` is the
read-only part, which the command line's `sqlite3` snapshot (`snapshot.py`) also implements.

The values handed back are plain dataclasses (`values.py`); the errors those of `errors.py`
(each with a kind of `contextfold.errors`). A test holds `SqlSessionStore` and the snapshot
to these signatures, and every method here to a caller outside the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from contextfold.core.planning.plan import Plan
from contextfold.core.values.messages import Checkpoint, Message, Node, PinEvent
from contextfold.core.values.tree import Branch, DamagedBranch

from .values import CommitResult, MirrorHit, MirrorWrite, RecallHit, SessionInfo, TokenInfo

if TYPE_CHECKING:
    from contextfold.core.recall.recall_text import SearchQuery


@runtime_checkable
class BranchReader(Protocol):
    """One session and the part of its branch the model needs."""

    async def get_session(self, session_id: str) -> SessionInfo:
        """One session; `read_only` is True when its stored history is damaged (SPEC D2)."""

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch:
        """What the model needs, read in O(tail): from the latest checkpoint's boundary."""


@runtime_checkable
class SessionReader(BranchReader, Protocol):
    """Reading sessions and their branches: what `sessions`, `show` and `project` need."""

    async def list_sessions(self) -> list[SessionInfo]:
        """Every session (of this store's tenant), oldest first."""

    async def sessions_newest(self, *, limit: int,
                              before: tuple[datetime, str] | None = None) -> list[SessionInfo]:
        """At most `limit` sessions, newest first by creation (ties by id), those created
        before `before` (the previous page's last `(created_at, id)`); damage not checked."""

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch:
        """The whole branch from its root to the leaf."""

    async def load_branch_page(self, session_id: str, *, limit: int) -> Branch | DamagedBranch:
        """The branch's last `limit` nodes."""

    async def load_tree_page(self, session_id: str, *, limit: int) -> list[Node]:
        """The branch's last `limit` nodes and the first node of each fork off them."""

    async def load_tree(self, session_id: str) -> list[Node]:
        """Every readable node of the session's tree, parents before children."""

    async def find_sessions(self, prefix: str, *, limit: int) -> list[SessionInfo]:
        """Sessions (of this store's tenant) whose id starts with `prefix`, by id, at most
        `limit`; damage is not checked. What `refs.resolve_session_id` reads."""

    async def latest_session(self) -> SessionInfo | None:
        """The session (of this store's tenant) active last: the latest leaf move."""

    async def find_nodes(self, session_id: str, prefix: str, *, limit: int) -> list[str]:
        """Ids of the nodes of the session's tree that start with `prefix`, sorted, at most
        `limit`. What `refs.resolve_node_id` reads."""


@runtime_checkable
class CompactionStore(BranchReader, Protocol):
    """What the one compaction path (`runtime.compaction`: plan, summarise, conditional
    commit) needs: `SqlSessionStore`, and `MemoryStore`, which replay runs it over."""

    def compaction_lease(self, session_id: str,
                         ttl: float = 30.0) -> AbstractAsyncContextManager[None]:
        """Hold the session's compaction lease for a block, or raise `SessionBusyError`
        (SPEC U4 across processes)."""

    async def commit_checkpoint(self, plan: Plan, checkpoint: Checkpoint, *,
                                session_id: str) -> CommitResult:
        """The conditional commit (SPEC C1-C3): only if the branch is what the plan saw."""


@runtime_checkable
class SessionStore(SessionReader, CompactionStore, Protocol):
    """The whole store: sessions, history, compaction, recall, mirroring and tenancy."""

    async def close(self) -> None:
        """Release the store's connections."""

    def for_tenant(self, tenant: str) -> Self:
        """This store limited to one tenant's sessions (SPEC W1)."""

    # ------------------------------------------------------------------ sessions

    async def create_session(self, *, from_node_id: str | None = None, title: str | None = None,
                             metadata: Mapping[str, Any] | None = None) -> SessionInfo:
        """A new session: empty, or with leaf `from_node_id` (sharing its ancestors)."""

    async def update_session_metadata(self, session_id: str,
                                      updates: Mapping[str, Any]) -> SessionInfo:
        """Merge `updates` into the session's metadata (not history: no revision bump)."""

    async def list_sessions(self, *, check_damage: bool = True) -> list[SessionInfo]:
        """Every session, oldest first; `check_damage=False` skips reading each tail."""

    async def sessions_newest(self, *, limit: int, before: tuple[datetime, str] | None = None,
                              check_damage: bool = False) -> list[SessionInfo]:
        """A page of sessions, newest first by creation: at most `limit`, those created
        before `before` (the previous page's last `(created_at, id)`); `check_damage` reads
        each one's tail (SPEC D2), as `list_sessions` does."""

    # ------------------------------------------------------------------ reading

    async def load_branch_page(self, session_id: str, *, limit: int,
                               before_id: str | None = None) -> Branch | DamagedBranch:
        """The branch's last `limit` nodes, or the `limit` nodes before `before_id`."""

    async def load_branch_at(self, session_id: str, node_id: str) -> Branch | DamagedBranch:
        """What the model would need if `node_id` were the leaf, read in O(tail)."""

    # ------------------------------------------------------------------ writing (SPEC C6)

    async def append(self, session_id: str, message: Message, *,
                     expected_leaf_id: str | None = None, node_id: str | None = None,
                     created_at: datetime | None = None) -> Node:
        """Append one message at the leaf (never a checkpoint); conditional on
        `expected_leaf_id`, idempotent on a caller-chosen `node_id`."""

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]:
        """Append several messages as one chain (one leaf move)."""

    async def append_pin_event(self, session_id: str, event: PinEvent, *,
                               expected_leaf_id: str | None = None,
                               node_id: str | None = None) -> Node:
        """Append a pin or unpin event at the leaf (SPEC N2)."""

    async def import_tree(self, nodes_in: Sequence[Node], leaf_id: str, *,
                          title: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> SessionInfo:
        """Store a whole pre-built tree as a new tree and session, all or nothing."""

    # ------------------------------------------------------------------ branching (SPEC O)

    async def retry(self, session_id: str) -> SessionInfo:
        """SPEC O1: move the leaf to the parent of the last real assistant message."""

    async def edit(self, session_id: str, message: Message) -> Node:
        """SPEC O2: the message becomes a sibling of the last user message and the leaf."""

    async def pop_message(self, session_id: str) -> Node | None:
        """Move the leaf to the parent of the last message, whatever its role (None: none)."""

    async def clear_branch(self, session_id: str) -> SessionInfo:
        """Start over with an empty branch (leaf None); the old nodes stay in the tree."""

    async def fork(self, session_id: str, node_id: str, *,
                   title: str | None = None) -> SessionInfo:
        """SPEC O3: a new session on the same tree whose leaf is `node_id`."""

    # ------------------------------------------------------------------ recall (SPEC L)

    async def search_history(self, session_id: str, query: str | SearchQuery, *,
                             limit: int = 10, any_term: bool = False) -> list[RecallHit]:
        """Full-text search over the session's own branch, best first."""

    async def search_history_each(self, session_id: str,
                                  queries: Sequence[str | SearchQuery], *, limit: int = 10,
                                  any_term: bool = False) -> list[list[RecallHit]]:
        """`search_history` of each query, over one read of the session and its branch."""

    async def expand_history(self, session_id: str, node_id: str, *, before: int = 0,
                             after: int = 0, to_node_id: str | None = None,
                             max_nodes: int = 50) -> list[RecallHit]:
        """The original messages around `node_id` (or up to `to_node_id`) on the branch."""

    # ------------------------------------------------------------------ compaction lease (U4)

    async def lease_holder(self, session_id: str) -> str | None:
        """Who holds an unexpired compaction lease on the session (None: nobody)."""

    async def session_and_lease(self, session_id: str) -> tuple[SessionInfo, str | None]:
        """`get_session` and `lease_holder` read together, in one snapshot."""

    # ------------------------------------------------------------------ mirror (SPEC Y1)

    async def mirror_lookup(self, hashes: Sequence[str], *,
                            tree_id: str | None = None) -> dict[str, MirrorHit]:
        """The stored hits among content-chain `hashes`, deepest per hash."""

    async def mirror_session_of_tree(self, tree_id: str) -> str | None:
        """The oldest session of a tree (the one a mirror created with it)."""

    async def mirror_node_hash(self, session_id: str, node_id: str) -> str | None:
        """The chain hash a mirror stored `node_id` under (None: not a mirrored node)."""

    async def mirror_index_node(self, session_id: str, prefix_hash: str, node_id: str,
                                message_id: str) -> None:
        """Index a node written outside `mirror_extend` (a checkpoint after `message_id`)."""

    async def record_response(self, session_id: str, owner: str, response_id: str,
                              node_id: str) -> None:
        """Keep a Responses API response id answered for `owner` with its reply node."""

    async def find_response(self, owner: str, response_id: str) -> tuple[str, str] | None:
        """(session id, reply node id) of a response id kept for `owner` (SPEC Y12)."""

    async def mirror_extend(self, session_id: str, hashes: Sequence[str],
                            messages: Sequence[Message], *, hold_last: bool = False,
                            known: Sequence[str] = (),
                            new_ids: Mapping[str, str] | None = None) -> MirrorWrite:
        """Make the session's branch hold `messages`, writing only what is not stored
        (`new_ids`: the node id to give the message of a hash, if it is written)."""

    # ------------------------------------------------------------------ tenancy (SPEC W)

    async def create_token(self, tenant: str, *,
                           label: str | None = None) -> tuple[TokenInfo, str]:
        """A new bearer token for `tenant`: its stored info, and the token (shown once)."""

    async def list_tokens(self, tenant: str | None = None) -> list[TokenInfo]:
        """Every token (of `tenant`, if given), never the tokens themselves."""

    async def revoke_token(self, token_id: str) -> TokenInfo:
        """Revoke a token by id (idempotent); `TokenNotFoundError` if there is none."""

    async def tenant_for_token(self, token: str) -> str | None:
        """The tenant an active token belongs to; None for an unknown or revoked one."""


__all__ = ["BranchReader", "CompactionStore", "SessionReader", "SessionStore"]
