"""`SqlSessionStore`: the durable session store on SQLite or PostgreSQL (SQLAlchemy Core).

Every write is one short transaction that first locks the session row (PostgreSQL
`FOR UPDATE`; SQLite `BEGIN IMMEDIATE`), so writers of one session are serialised and a
conditional commit (SPEC C2) cannot interleave with an append. Nodes are only ever
inserted; a session's leaf moves and its `branch_revision` grows by one with every move,
and each move is logged in `leaf_moves`.

The store is composed, not inherited: one `SqlAccess` (engine, tenant, write memos, the
transactions and row helpers every part shares, `sql/access.py`) handed to each part, one
class per module — `Sessions`, `Reading`, `Appending`, `Committing`, `Branching`, `Pins`,
`Mirroring`, `Leases`, `Tokens` (in `sql/`) and `Recall` (in `recall/`). This class makes
them and spells out the whole `SessionStore` protocol (`protocol.py`) as short delegating
methods, so every method of the store is readable in this one file. It lives above both
folders because it joins them: `recall/` reads `sql/`'s tables, `sql/` never imports
`recall/` (its writes keep the recall index through `keeping.RecallIndex`, handed over here).

Each delegating method has the signature the protocol checks (tests/store/test_store_protocol.py).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

from sqlalchemy.ext.asyncio import AsyncEngine

from contextfold.core.values.held import Held
from contextfold.core.values.messages import Checkpoint, Message, Node, PinEvent
from contextfold.core.values.tree import Branch, DamagedBranch

from .recall.keeping import RecallIndex
from .recall.recall import Recall
from .sql.access import SqlAccess
from .sql.appending import Appending
from .sql.branching import Branching
from .sql.committing import Committing
from .sql.lease import LEASE_TTL, Leases
from .sql.memo import WriteMemo
from .sql.mirroring import Mirroring
from .sql.pinning import Pins
from .sql.reading import Reading
from .sql.sessions import Sessions
from .sql.tenancy import Tokens
from .values import CommitResult, MirrorHit, MirrorWrite, RecallHit, SessionInfo, TokenInfo

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from contextfold.core.planning.plan import Plan
    from contextfold.core.recall.recall_text import SearchQuery


class SqlSessionStore:
    """Session trees in one SQL database. Create it with `open_store(url)`."""

    # Test hook: the invariant checker must catch a store that commits stale plans. A test
    # subclass sets this False to skip the leaf/revision re-check (never do it elsewhere).
    _guard_commit: bool = True

    def __init__(self, engine: AsyncEngine) -> None:
        self._compose(SqlAccess(engine, RecallIndex(), guard_commit=self._guard_commit))

    def _compose(self, access: SqlAccess) -> None:
        """Make the parts over `access` (a new store, or one tenant's view of it)."""
        self._access = access
        # What this store already read or wrote (shared by its tenant views).
        self._memo: WriteMemo = access.memo
        self._sessions = Sessions(access)
        self._reading = Reading(access)
        self._appending = Appending(access)
        self._committing = Committing(access)
        self._branching = Branching(access)
        self._pins = Pins(access)
        self._recall = Recall(access)
        self._leases = Leases(access)
        self._mirroring = Mirroring(access)
        self._tokens = Tokens(access)

    # ------------------------------------------------------------------ the store itself

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (its pool is this store's)."""
        return self._access.engine

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self._access.engine.dialect.name

    @property
    def database(self) -> str:
        """Where this store is, for messages: the SQLite file, or the URL without password."""
        return self._access.database

    @property
    def tenant(self) -> str | None:
        """The tenant this store is limited to (SPEC W1); None: every tenant."""
        return self._access.tenant

    @property
    def _step_hook(self) -> Callable[[str], Awaitable[None]] | None:
        """Test hook: awaited at named points of a commit (cancellation and crash tests)."""
        return self._access.step_hook

    @_step_hook.setter
    def _step_hook(self, hook: Callable[[str], Awaitable[None]] | None) -> None:
        self._access.step_hook = hook

    async def close(self) -> None:
        """Release every pooled connection."""
        await self._access.engine.dispose()

    async def __aenter__(self) -> Self:
        """`async with await open_store(url) as store:` closes the store on the way out."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def hold_memos_in(self, held: Held) -> None:
        """Keep this store's write memos in `held`, the process's one cache of what it holds
        per conversation (SPEC Y14; the service's), instead of a cache of their own. The
        tenant-scoped copies follow; what was remembered is forgotten (memos only)."""
        self._access.memo.use(held)

    def for_tenant(self, tenant: str) -> Self:
        """This store seen by one tenant (SPEC W1): the same engine and caches, but every
        session read, write, list and lease is limited to `tenant`'s sessions, and new
        sessions (create, fork, import) belong to it. Another tenant's session id raises
        `SessionNotFoundError`, exactly like a missing one."""
        scoped = copy.copy(self)
        scoped._compose(self._access.for_tenant(tenant))
        return scoped

    # ------------------------------------------------------------------ sessions

    async def create_session(self, *, from_node_id: str | None = None,
                             title: str | None = None,
                             metadata: Mapping[str, Any] | None = None) -> SessionInfo:
        """A new session: empty on a new tree, or with leaf `from_node_id` (shared ancestors)."""
        return await self._sessions.create_session(from_node_id=from_node_id, title=title,
                                                   metadata=metadata)

    async def update_session_metadata(self, session_id: str,
                                      updates: Mapping[str, Any]) -> SessionInfo:
        """Merge `updates` into the session's metadata (top-level keys replace)."""
        return await self._sessions.update_session_metadata(session_id, updates)

    async def get_session(self, session_id: str) -> SessionInfo:
        """One session; `read_only` is True when its stored history is damaged (SPEC D2)."""
        return await self._sessions.get_session(session_id)

    async def session_and_lease(self, session_id: str) -> tuple[SessionInfo, str | None]:
        """`get_session` and `lease_holder` in one read (issue 26)."""
        return await self._sessions.session_and_lease(session_id)

    async def list_sessions(self, *, check_damage: bool = True) -> list[SessionInfo]:
        """Every session, oldest first (`check_damage=False`: the stored flag only)."""
        return await self._sessions.list_sessions(check_damage=check_damage)

    async def sessions_newest(self, *, limit: int, before: tuple[datetime, str] | None = None,
                              check_damage: bool = False) -> list[SessionInfo]:
        """A page of this tenant's sessions, newest first by creation."""
        return await self._sessions.sessions_newest(limit=limit, before=before,
                                                    check_damage=check_damage)

    async def find_sessions(self, prefix: str, *, limit: int) -> list[SessionInfo]:
        """Sessions of this tenant whose id starts with `prefix`, by id."""
        return await self._sessions.find_sessions(prefix, limit=limit)

    async def latest_session(self) -> SessionInfo | None:
        """This tenant's session with the latest leaf move (its last activity)."""
        return await self._sessions.latest_session()

    async def find_nodes(self, session_id: str, prefix: str, *, limit: int) -> list[str]:
        """Ids of the session tree's nodes starting with `prefix`."""
        return await self._sessions.find_nodes(session_id, prefix, limit=limit)

    # ------------------------------------------------------------------ reading

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch:
        """What the model needs, read in O(tail) from the latest checkpoint's boundary."""
        return await self._reading.load_branch(session_id)

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch:
        """The whole branch from its root to the leaf (for a UI or an audit)."""
        return await self._reading.load_full_branch(session_id)

    async def load_branch_page(self, session_id: str, *, limit: int,
                               before_id: str | None = None) -> Branch | DamagedBranch:
        """The branch's last `limit` nodes, or the `limit` nodes before `before_id`."""
        return await self._reading.load_branch_page(session_id, limit=limit,
                                                    before_id=before_id)

    async def load_branch_at(self, session_id: str, node_id: str) -> Branch | DamagedBranch:
        """What the model would need if `node_id` were the leaf, in O(tail)."""
        return await self._reading.load_branch_at(session_id, node_id)

    async def load_tree_page(self, session_id: str, *, limit: int) -> list[Node]:
        """The branch's last `limit` nodes and the first node of each fork off them."""
        return await self._reading.load_tree_page(session_id, limit=limit)

    async def load_tree(self, session_id: str) -> list[Node]:
        """Every readable node of the session's tree, parents before children."""
        return await self._reading.load_tree(session_id)

    # ------------------------------------------------------------------ appending (SPEC C6)

    async def append(self, session_id: str, message: Message | Mapping[str, Any], *,
                     expected_leaf_id: str | None = None, node_id: str | None = None,
                     created_at: datetime | None = None) -> Node:
        """Append one message at the leaf and move the leaf to it (never a checkpoint)."""
        return await self._appending.append(session_id, message,
                                            expected_leaf_id=expected_leaf_id,
                                            node_id=node_id, created_at=created_at)

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]:
        """Append several messages as one chain in one transaction (one leaf move)."""
        return await self._appending.append_many(session_id, messages)

    async def import_tree(self, nodes_in: Sequence[Node], leaf_id: str, *,
                          title: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> SessionInfo:
        """Store a whole pre-built tree as a new tree and session (all-or-nothing)."""
        return await self._appending.import_tree(nodes_in, leaf_id, title=title,
                                                 metadata=metadata)

    async def append_pin_event(self, session_id: str, event: PinEvent, *,
                               expected_leaf_id: str | None = None,
                               node_id: str | None = None) -> Node:
        """Append a pin or unpin event at the leaf (SPEC N2)."""
        return await self._pins.append_pin_event(session_id, event,
                                                 expected_leaf_id=expected_leaf_id,
                                                 node_id=node_id)

    # ------------------------------------------------------------------ commit (SPEC C2-C4)

    async def commit_checkpoint(self, plan: Plan, checkpoint: Checkpoint, *,
                                session_id: str) -> CommitResult:
        """Append `checkpoint` at the leaf iff the branch is still the one `plan` was made
        for; else `status="stale"` and nothing is written."""
        return await self._committing.commit_checkpoint(plan, checkpoint,
                                                        session_id=session_id)

    def compaction_lease(self, session_id: str,
                         ttl: float = LEASE_TTL) -> AbstractAsyncContextManager[None]:
        """Hold the session's compaction lease for a block, or `SessionBusyError` (SPEC U4)."""
        return self._leases.compaction_lease(session_id, ttl)

    async def lease_holder(self, session_id: str) -> str | None:
        """Who holds an unexpired lease on the session (None if nobody)."""
        return await self._leases.lease_holder(session_id)

    # ------------------------------------------------------------------ branching (SPEC O1-O3)

    async def retry(self, session_id: str) -> SessionInfo:
        """SPEC O1: move the leaf to the parent of the last real assistant message."""
        return await self._branching.retry(session_id)

    async def pop_message(self, session_id: str) -> Node | None:
        """Move the leaf to the parent of the last message on the branch (None: none)."""
        return await self._branching.pop_message(session_id)

    async def clear_branch(self, session_id: str) -> SessionInfo:
        """Start the session over with an empty branch; the old nodes stay in the tree."""
        return await self._branching.clear_branch(session_id)

    async def edit(self, session_id: str, message: Message | Mapping[str, Any]) -> Node:
        """SPEC O2: a new user message as a sibling of the last real user message."""
        return await self._branching.edit(session_id, message)

    async def fork(self, session_id: str, node_id: str, *,
                   title: str | None = None) -> SessionInfo:
        """SPEC O3: a new session on the same tree whose leaf is `node_id`."""
        return await self._branching.fork(session_id, node_id, title=title)

    # ------------------------------------------------------------------ recall (SPEC L1-L4)

    async def search_history(self, session_id: str, query: str | SearchQuery, *,
                             limit: int = 10, any_term: bool = False) -> list[RecallHit]:
        """Full-text search over the session's own branch, best first."""
        return await self._recall.search_history(session_id, query, limit=limit,
                                                 any_term=any_term)

    async def search_history_each(self, session_id: str,
                                  queries: Sequence[str | SearchQuery], *, limit: int = 10,
                                  any_term: bool = False) -> list[list[RecallHit]]:
        """`search_history` of each query, in one read transaction (SPEC L5)."""
        return await self._recall.search_history_each(session_id, queries, limit=limit,
                                                      any_term=any_term)

    async def expand_history(self, session_id: str, node_id: str, *, before: int = 0,
                             after: int = 0, to_node_id: str | None = None,
                             max_nodes: int = 50) -> list[RecallHit]:
        """The original messages around `node_id` (or from it to `to_node_id`), in order."""
        return await self._recall.expand_history(session_id, node_id, before=before,
                                                 after=after, to_node_id=to_node_id,
                                                 max_nodes=max_nodes)

    # ------------------------------------------------------------------ the mirror (SPEC Y1)

    async def mirror_lookup(self, hashes: Sequence[str], *,
                            tree_id: str | None = None) -> dict[str, MirrorHit]:
        """The stored hits among `hashes` (optionally only in `tree_id`), deepest per hash."""
        return await self._mirroring.mirror_lookup(hashes, tree_id=tree_id)

    async def mirror_session_of_tree(self, tree_id: str) -> str | None:
        """The oldest session of a tree (the one a mirror created with it)."""
        return await self._mirroring.mirror_session_of_tree(tree_id)

    async def mirror_node_hash(self, session_id: str, node_id: str) -> str | None:
        """The chain hash a mirror stored `node_id` under (None: not a mirrored node)."""
        return await self._mirroring.mirror_node_hash(session_id, node_id)

    async def mirror_index_node(self, session_id: str, prefix_hash: str, node_id: str,
                                message_id: str) -> None:
        """Index a node written outside `mirror_extend` (a checkpoint after `message_id`)."""
        await self._mirroring.mirror_index_node(session_id, prefix_hash, node_id, message_id)

    async def mirror_extend(self, session_id: str, hashes: Sequence[str],
                            messages: Sequence[Message], *, hold_last: bool = False,
                            known: Sequence[str] = (),
                            new_ids: Mapping[str, str] | None = None) -> MirrorWrite:
        """Make the session's branch hold `messages` (whose chain hashes are `hashes`)."""
        return await self._mirroring.mirror_extend(session_id, hashes, messages,
                                                   hold_last=hold_last, known=known,
                                                   new_ids=new_ids)

    async def record_response(self, session_id: str, owner: str, response_id: str,
                              node_id: str) -> None:
        """Keep a Responses API response id answered for `owner` (SPEC Y12)."""
        await self._mirroring.record_response(session_id, owner, response_id, node_id)

    async def find_response(self, owner: str, response_id: str) -> tuple[str, str] | None:
        """(session id, reply node id) of a response id kept for `owner` (SPEC Y12, W1)."""
        return await self._mirroring.find_response(owner, response_id)

    # ------------------------------------------------------------------ tokens (SPEC W1, W2)

    async def create_token(self, tenant: str, *,
                           label: str | None = None) -> tuple[TokenInfo, str]:
        """A new token for `tenant` (created if new): its info, and the token (only here)."""
        return await self._tokens.create_token(tenant, label=label)

    async def list_tokens(self, tenant: str | None = None) -> list[TokenInfo]:
        """Every token (of `tenant`, if given), oldest first; never the tokens themselves."""
        return await self._tokens.list_tokens(tenant)

    async def revoke_token(self, token_id: str) -> TokenInfo:
        """Revoke a token by id (idempotent); `TokenNotFoundError` if there is none."""
        return await self._tokens.revoke_token(token_id)

    async def tenant_for_token(self, token: str) -> str | None:
        """The tenant an active `token` belongs to; None for an unknown or revoked one."""
        return await self._tokens.tenant_for_token(token)
