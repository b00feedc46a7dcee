"""`SqlSessionStore`: the durable session store on SQLite or PostgreSQL (SQLAlchemy Core).

Every write is one short transaction that first locks the session row (PostgreSQL
`FOR UPDATE`; SQLite `BEGIN IMMEDIATE`), so writers of one session are serialised and a
conditional commit (SPEC C2) cannot interleave with an append. Nodes are only ever
inserted; a session's leaf moves and its `branch_revision` grows by one with every move,
and each move is logged in `leaf_moves`.

Size: the store class proper (sessions, reading a branch, appending, importing, the conditional
commit) over its operation mixins; recomposing it from mixins into parts is the store regrouping
of issue 39, which only the script moving `store/` may do.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, String, bindparam, func, insert, select, tuple_, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Checkpoint, Message, Node, utc_now
from contextfold.core.values.tree import Branch, DamagedBranch, build_branch, check_stability
from contextfold.ids import new_id

from ..errors import (
    DuplicateNodeError,
    InvalidOperationError,
    NodeNotFoundError,
    SessionNotFoundError,
    StaleBranchError,
)
from ..inputs import as_message
from ..recall.recall import RecallOps
from ..values import CommitResult, SessionInfo
from . import queries
from .base import metadata_json
from .branching import BranchingOps
from .engine import read_connection, single_read
from .lease import LeaseMixin, db_now
from .loading import readable_nodes, with_forks
from .mirroring import MirrorOps
from .pinning import PinOps
from .rows import node_row, utc
from .schema import compaction_leases, nodes, sessions, trees
from .tenancy import TenantOps

if TYPE_CHECKING:
    from contextfold.core.planning.plan import Plan


@functools.cache
def _session_and_lease_stmt(dialect: str, scoped: bool) -> Select[Any]:
    """The session row (bound `session_id`, and `tenant_id` when `scoped`, SPEC W1) with
    its unexpired lease holder: built once per dialect and scope, not on every turn."""
    holder = select(compaction_leases.c.holder).where(
        compaction_leases.c.session_id == sessions.c.id,
        compaction_leases.c.expires_at > db_now(dialect),
    ).scalar_subquery().label("lease_holder")
    stmt = select(sessions, holder).where(sessions.c.id == bindparam("session_id", type_=String))
    if scoped:
        stmt = stmt.where(sessions.c.tenant_id == bindparam("tenant_id", type_=String))
    return stmt


class SqlSessionStore(BranchingOps, RecallOps, LeaseMixin, PinOps, MirrorOps, TenantOps):
    """Session trees in one SQL database. Create it with `open_store(url)`."""

    # ------------------------------------------------------------------ sessions

    async def create_session(
        self,
        *,
        from_node_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """A new session: empty on a new tree, or with leaf `from_node_id` (shared ancestors)."""
        meta_json = metadata_json(metadata)

        async def op(conn: AsyncConnection) -> SessionInfo:
            if from_node_id is None:
                tree_id = new_id()
                await conn.execute(insert(trees).values(id=tree_id, created_at=utc_now()))
            else:
                # W1: only trees this tenant has sessions on
                found = await queries.trees_of_node(conn, from_node_id, self.tenant)
                if not found:
                    raise NodeNotFoundError(f"cannot start a session from node {from_node_id!r}:"
                                            " no such node is stored")
                if len(found) > 1:
                    raise InvalidOperationError(
                        f"node id {from_node_id!r} is stored in {len(found)} session trees "
                        "(imported ids are unique per tree only); fork it from its session "
                        "instead")
                tree_id = found[0]
                branch = await queries.load_tail(conn, tree_id, from_node_id, 0)
                if isinstance(branch, DamagedBranch):
                    raise InvalidOperationError(
                        f"cannot start a session from node {from_node_id!r}: its history is "
                        "damaged (" + "; ".join(str(p) for p in branch.problems) + ")")
            return await self._insert_session(conn, tree_id, from_node_id, title, meta_json,
                                              op="create")

        return await self._write(op)

    async def update_session_metadata(self, session_id: str,
                                      updates: Mapping[str, Any]) -> SessionInfo:
        """Merge `updates` into the session's metadata (top-level keys replace). Metadata is
        not history: no node, leaf or revision changes."""

        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await self._session_row(conn, session_id)
            merged = {**json.loads(row["metadata"] or "{}"), **updates}
            await conn.execute(update(sessions).where(sessions.c.id == session_id)
                               .values(metadata=metadata_json(merged)))
            return self._info(await self._session_row(conn, session_id), read_only=False)

        return await self._write(op)

    async def get_session(self, session_id: str) -> SessionInfo:
        """One session; `read_only` is True when its stored history is damaged (SPEC D2)."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            return self._info(row, read_only=await self._is_damaged(conn, row))

    async def session_and_lease(self, session_id: str) -> tuple[SessionInfo, str | None]:
        """`get_session` and `lease_holder` in one read (one snapshot, one statement): what
        the service checks before every turn (issue 26)."""
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFoundError(session_id, self.database)
        params = {"session_id": session_id, "tenant_id": self.tenant}
        async with single_read(self.engine) as conn:  # the damage check reads only nodes
            stmt = _session_and_lease_stmt(self.engine.dialect.name, self.tenant is not None)
            row = (await conn.execute(stmt, params)).mappings().first()
            if row is None:
                raise SessionNotFoundError(session_id, self.database)
            info = self._info(row, read_only=await self._is_damaged(conn, row))
            return info, row["lease_holder"]

    async def list_sessions(self, *, check_damage: bool = True) -> list[SessionInfo]:
        """Every session, oldest first. `check_damage=False` skips the per-session tail read
        (then `read_only` reflects only the stored flag)."""
        async with read_connection(self.engine) as conn:
            rows = (await conn.execute(
                self._scoped(select(sessions)).order_by(sessions.c.created_at, sessions.c.id)
            )).mappings().all()
            out = []
            for row in rows:
                damaged = check_damage and await self._is_damaged(conn, row)
                out.append(self._info(row, read_only=bool(damaged)))
            return out

    async def sessions_newest(self, *, limit: int,
                              before: tuple[datetime, str] | None = None) -> list[SessionInfo]:
        """A page of this tenant's sessions, newest first by creation (ties by id): at most
        `limit`, those created before `before` (the `(created_at, id)` of the previous
        page's last). One keyset range on an index (migration 0009, or the tenant's
        `ix_sessions_tenant`), so a caller that stops at the first match never reads the
        whole table; damage is not checked."""
        stmt = self._scoped(select(sessions))
        if before is not None:
            stmt = stmt.where(tuple_(sessions.c.created_at, sessions.c.id) <
                              tuple_(bindparam("at", before[0], type_=sessions.c.created_at.type),
                                     before[1]))
        async with read_connection(self.engine) as conn:
            rows = (await conn.execute(
                stmt.order_by(sessions.c.created_at.desc(), sessions.c.id.desc()).limit(limit)
            )).mappings().all()
        return [self._info(row, read_only=False) for row in rows]

    async def find_sessions(self, prefix: str, *, limit: int) -> list[SessionInfo]:
        """Sessions of this tenant whose id starts with `prefix` (compared as text, not as a
        LIKE pattern: an id may hold `_` or `%`), by id; damage is not checked."""
        if not prefix:
            return []
        async with read_connection(self.engine) as conn:
            rows = (await conn.execute(
                self._scoped(select(sessions))
                .where(func.substr(sessions.c.id, 1, len(prefix)) == prefix)
                .order_by(sessions.c.id).limit(limit))).mappings().all()
        return [self._info(row, read_only=False) for row in rows]

    async def latest_session(self) -> SessionInfo | None:
        """This tenant's session with the latest leaf move (its last activity)."""
        async with read_connection(self.engine) as conn:
            row = (await conn.execute(
                self._scoped(select(sessions))
                .order_by(sessions.c.updated_at.desc(), sessions.c.id.desc()).limit(1)
            )).mappings().first()
        return None if row is None else self._info(row, read_only=False)

    async def find_nodes(self, session_id: str, prefix: str, *, limit: int) -> list[str]:
        """Ids of the session tree's nodes starting with `prefix` (W1: the session is this
        tenant's, or `SessionNotFoundError`)."""
        async with read_connection(self.engine) as conn:
            tree_id = (await self._session_row(conn, session_id))["tree_id"]
            if not prefix:
                return []
            found = await conn.execute(
                select(nodes.c.id).where(nodes.c.tree_id == tree_id,
                                         func.substr(nodes.c.id, 1, len(prefix)) == prefix)
                .order_by(nodes.c.id).limit(limit))
            return [r[0] for r in found]

    # ------------------------------------------------------------------ loading

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch:
        """What the model needs, read in O(tail): from the latest checkpoint's boundary to the
        leaf. `Branch.complete` is False when older history was not read."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            branch = await queries.load_tail(conn, row["tree_id"], row["leaf_id"],
                                             row["branch_revision"])
            if isinstance(branch, Branch) and row["leaf_id"] is not None and \
                    (row["tree_id"], row["leaf_id"]) not in self._memo.sound and \
                    not await queries.history_problems(conn, row["tree_id"], branch):
                # A write needn't re-read. Sound means the whole branch, summarised history
                # included (hash-only walk, once per leaf and store instance), so that every
                # write agrees with `get_session(...).read_only` (SPEC D2).
                self._remember_sound(row["tree_id"], row["leaf_id"])
            elif isinstance(branch, DamagedBranch) and row["leaf_id"] is not None:
                # A row changed since this instance found the branch sound (edited in place
                # by hand): forget that, so its writes and `get_session(...).read_only` see
                # the damage as a fresh process does (SPEC D2).
                self._memo.sound.pop((row["tree_id"], row["leaf_id"]))
                self._memo.rows.pop(session_id)
            return branch

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch:
        """The whole branch from its root to the leaf (for a UI or an audit)."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            return await queries.load_full(conn, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])

    async def load_branch_page(self, session_id: str, *, limit: int,
                               before_id: str | None = None) -> Branch | DamagedBranch:
        """A page of the branch for a UI: its last `limit` nodes, or the `limit` nodes
        before `before_id` (a node of the branch: page back from a page's first node).
        Reads `limit` rows however long the history; `complete` is False when older
        nodes exist."""
        if limit < 1:
            raise InvalidOperationError(f"limit must be at least 1, got {limit}")
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            end = row["leaf_id"]
            if before_id is not None:
                meta = await queries.node_meta(conn, row["tree_id"], before_id)
                if meta is None:
                    raise NodeNotFoundError(f"node {before_id!r} is not in this session's tree")
                end = meta["parent_id"]
            return await queries.load_page(conn, row["tree_id"], end, row["branch_revision"],
                                           limit)

    async def load_branch_at(self, session_id: str, node_id: str) -> Branch | DamagedBranch:
        """What the model would need if `node_id` (of this session's tree) were the leaf:
        read in O(tail) like `load_branch`."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            if await queries.node_meta(conn, row["tree_id"], node_id) is None:
                raise NodeNotFoundError(f"node {node_id!r} is not in this session's tree")
            return await queries.load_tail(conn, row["tree_id"], node_id,
                                           row["branch_revision"])

    async def load_tree_page(self, session_id: str, *, limit: int) -> list[Node]:
        """The tree around the branch's last `limit` nodes: those nodes and every child
        of them (the first node of each fork off the page), parents before children."""
        page = await self.load_branch_page(session_id, limit=limit)
        shown = page.nodes if isinstance(page, Branch) else page.readable
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            kids = await queries.children_of(conn, row["tree_id"], [n.id for n in shown])
        return with_forks(shown, kids)

    async def load_tree(self, session_id: str) -> list[Node]:
        """Every readable node of the session's tree, all branches, parents before children.
        Rows that fail validation are left out (`load_full_branch` reports them)."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            return readable_nodes(await queries.tree_rows(conn, row["tree_id"]))

    # ------------------------------------------------------------------ appending (SPEC C6)

    async def append(
        self,
        session_id: str,
        message: Message | Mapping[str, Any],
        *,
        expected_leaf_id: str | None = None,
        node_id: str | None = None,
        created_at: datetime | None = None,
    ) -> Node:
        """Append one message at the leaf and move the leaf to it.

        Never writes a checkpoint (SPEC C6). `expected_leaf_id` makes the append conditional
        (`StaleBranchError` if the leaf moved). A caller-chosen `node_id` makes the append
        idempotent: repeating it returns the stored node instead of writing twice.
        """
        msg = as_message(message)
        nid = node_id or new_id()
        stamp = utc(created_at) if created_at is not None else utc_now()

        async def op(conn: AsyncConnection) -> Node:
            # A caller-chosen id reads first whether it is stored (exactly once), so only
            # an append with a new id starts from the remembered row (issue 26).
            row = await self._lock_session(conn, session_id, known=node_id is None,
                                           expect_leaf=expected_leaf_id)
            if node_id is not None:
                again = await self._already_appended(conn, row, nid, msg, stamp)
                if again is not None:
                    return again
            if expected_leaf_id is not None and row["leaf_id"] != expected_leaf_id:
                raise StaleBranchError(session_id, expected_leaf_id, row["leaf_id"])
            await self._check_writable(conn, row)
            node = Node(id=nid, parent_id=row["leaf_id"], created_at=stamp, payload=msg)
            await self._insert_chain(conn, row, [node], move_op="append")  # one statement
            return node

        # A steady append (everything remembered) is that one statement and nothing else.
        return await self._write(op, one_statement=node_id is None and
                                 self._append_reads_nothing(session_id, expected_leaf_id))

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]:
        """Append several messages as one chain in one transaction (one leaf move)."""
        msgs = [as_message(m) for m in messages]
        if not msgs:
            return []

        async def op(conn: AsyncConnection) -> list[Node]:
            row = await self._lock_session(conn, session_id, known=True)
            await self._check_writable(conn, row)
            stamp = utc_now()
            parent, chain = row["leaf_id"], []
            for msg in msgs:
                chain.append(Node(id=new_id(), parent_id=parent, created_at=stamp, payload=msg))
                parent = chain[-1].id
            await self._insert_chain(conn, row, chain)
            await self._move_leaf(conn, row, chain[-1].id, op="append", node_id=chain[-1].id)
            return chain

        return await self._write(op)

    async def import_tree(
        self,
        nodes_in: Sequence[Node],
        leaf_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Store a whole pre-built tree (checkpoints allowed) as a new tree and session.

        Validated in memory first; all-or-nothing. Node ids are kept (unique per tree: an
        unrelated tree may hold the same id); a node already stored with the same id and
        content raises `DuplicateNodeError` (a re-import).
        """
        from ..recall.recall_index import index_nodes
        from .importing import already_imported, prepare_import  # writers only

        prepared = prepare_import(nodes_in, leaf_id)
        meta_json = metadata_json(metadata)

        async def op(conn: AsyncConnection) -> SessionInfo:
            tree_id = new_id()
            rows, chains = [], {}
            for p in prepared:  # parents first, so every parent's chain digest is known
                rows.append(node_row(p.node, tree_id=tree_id, depth=p.depth,
                                     latest_checkpoint_id=p.latest_checkpoint_id,
                                     session_id=None, parent_chain=chains.get(p.node.parent_id)))
                chains[p.node.id] = rows[-1]["chain_hash"]
            # Ids are unique per tree, so an unrelated session that happens to share an id
            # imports fine; the same node (same id and content hash) means a re-import, of
            # this tenant's (W1: another tenant's imports are not an oracle, nor a block).
            stored = await queries.stored_hashes(conn, [p.node.id for p in prepared],
                                                 self.tenant)
            same = sorted((r["id"], r["content_hash"]) for r in rows
                          if (r["id"], r["content_hash"]) in stored)
            if same:
                holders = await queries.sessions_holding(conn, same, self.tenant)
                raise already_imported([nid for nid, _ in same], holders)
            await conn.execute(insert(trees).values(id=tree_id, created_at=utc_now()))
            for start in range(0, len(rows), 1000):
                await conn.execute(insert(nodes), rows[start : start + 1000])
            await index_nodes(conn, tree_id, [(p.node, p.depth) for p in prepared],
                              new_tree=True)
            return await self._insert_session(conn, tree_id, leaf_id, title, meta_json,
                                              op="import")

        return await self._write(op)

    # ------------------------------------------------------------------ commit (SPEC C2-C4)

    async def commit_checkpoint(
        self, plan: Plan, checkpoint: Checkpoint, *, session_id: str
    ) -> CommitResult:
        """Append `checkpoint` at the leaf iff the branch is still the one `plan` was made for.

        One transaction re-checks leaf, revision, tool-workflow stability and that the
        boundary is on the branch; only then inserts the checkpoint, moves the leaf and bumps
        the revision. Any mismatch → `status="stale"` and nothing is written (SPEC C3).
        Cancelling the calling task before it returns rolls everything back (SPEC C4).
        """
        if not isinstance(checkpoint, Checkpoint):
            raise InvalidOperationError(
                f"commit_checkpoint takes a core Checkpoint, got {type(checkpoint).__name__}")
        if checkpoint.first_kept_id != plan.first_kept_id:
            raise InvalidOperationError(
                f"checkpoint keeps raw history from {checkpoint.first_kept_id!r} but the plan's "
                f"boundary is {plan.first_kept_id!r}; build the checkpoint from the plan")

        async def op(conn: AsyncConnection) -> CommitResult:
            row = await self._lock_session(conn, session_id)
            await self._step("locked")
            # Damage first: a damaged session refuses every write, stale plan or not (D2).
            branch = await self._commit_view(conn, row, plan)
            if self._guard_commit:
                reason = _plan_mismatch(row, plan)
                if reason is not None:
                    return CommitResult("stale", None, reason, self._info(row, read_only=False))
            reason = await self._branch_mismatch(conn, row, branch, plan)
            if reason is not None:
                return CommitResult("stale", None, reason, self._info(row, read_only=False))
            await self._step("checked")
            node = Node(id=new_id(), parent_id=row["leaf_id"], created_at=utc_now(),
                        payload=checkpoint)
            await self._insert_chain(conn, row, [node])
            await self._step("inserted")
            info = await self._move_leaf(conn, row, node.id, op="commit", node_id=node.id,
                                         planned=(plan.session_leaf_id, plan.branch_revision))
            await self._step("moved")
            return CommitResult("committed", node, None, info)

        return await self._write(op)

    async def _commit_view(self, conn: AsyncConnection, row: RowMapping, plan: Plan) -> Branch:
        """The part of the branch the C2 re-checks need, after the damage check (D2).

        When this instance has verified the branch already (it loaded it for the plan),
        only the kept tail is read: from the leaf up to the plan's boundary, which holds
        the current turn (stability) and proves the boundary is on the branch. A boundary
        that is not on the branch walks to the root and is reported as such.
        """
        boundary = plan.first_kept_id
        if boundary is None or row["read_only"] or row["leaf_id"] is None or \
                (row["tree_id"], row["leaf_id"]) not in self._memo.sound:
            return await self._writable_branch(conn, row)
        found = await queries.walk_up(conn, row["tree_id"], row["leaf_id"], boundary)
        branch = build_branch(found, row["leaf_id"], revision=row["branch_revision"],
                              stop_at=boundary)
        if isinstance(branch, DamagedBranch):
            # The tail alone can look damaged when the new boundary lies between the latest
            # checkpoint's first_kept_id and that checkpoint (its raw start is older than the
            # tail read): decide on the verified branch, which raises only on real damage.
            return await self._writable_branch(conn, row)
        return branch

    async def _branch_mismatch(
        self, conn: AsyncConnection, row: RowMapping, branch: Branch, plan: Plan
    ) -> str | None:
        """The C2 re-checks that need the branch: stability and the boundary."""
        stability = check_stability(branch)
        if not stability.stable:
            return "the tool workflow is not stable: " + "; ".join(stability.reasons)
        boundary = plan.first_kept_id
        if boundary is None:
            return None
        if boundary in branch:
            node = branch.nodes[branch.index[boundary]]
            return None if node.message is not None else (
                f"boundary {boundary!r} is a checkpoint, not a message")
        if not branch.complete:
            full = await queries.load_full(conn, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])
            if isinstance(full, Branch) and boundary in full:
                return None
        return f"boundary {boundary!r} is not on the current branch"

    async def _already_appended(
        self, conn: AsyncConnection, row: RowMapping, node_id: str, msg: Message,
        stamp: datetime,
    ) -> Node | None:
        """A repeated append with the same caller id returns the stored node (exactly once)."""
        found = await queries.trees_of_node(conn, node_id, self.tenant)  # W1: ours only
        if not found:
            return None
        if row["tree_id"] in found:
            tree_id = row["tree_id"]
            found = await queries.walk_up(conn, tree_id, node_id, node_id)
            node = found.get(node_id)
            if isinstance(node, Node) and node.payload == msg and node.created_at == stamp:
                return node
        raise DuplicateNodeError(f"node id {node_id!r} is already stored with other content; "
                                 "choose a new id")


def _plan_mismatch(row: RowMapping, plan: Plan) -> str | None:
    """C2: same leaf, same revision as when the plan was made."""
    if row["leaf_id"] != plan.session_leaf_id:
        return (f"the session moved while summarising (its latest node was "
                f"{plan.session_leaf_id!r}, now {row['leaf_id']!r})")
    if row["branch_revision"] != plan.branch_revision:
        return (f"branch revision is {row['branch_revision']}, the plan was made at "
                f"{plan.branch_revision}")
    return None
