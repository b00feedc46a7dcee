"""`SqlSessionStore`: the durable session store on SQLite or PostgreSQL (SQLAlchemy Core).

Every write is one short transaction that first locks the session row (PostgreSQL
`FOR UPDATE`; SQLite `BEGIN IMMEDIATE`), so writers of one session are serialised and a
conditional commit (SPEC C2) cannot interleave with an append. Nodes are only ever
inserted; a session's leaf moves and its `branch_revision` grows by one with every move,
and each move is logged in `leaf_moves`.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contextfold.core.messages import Checkpoint, Message, Node, parse_payload, utc_now
from contextfold.core.plan import Plan
from contextfold.core.tree import Branch, DamagedBranch, check_stability
from contextfold.ids import new_id

from . import queries
from .engine import LeafConflict, read_connection, retry_transient, write_connection
from .errors import (
    DuplicateNodeError,
    InvalidOperationError,
    InvalidPayloadError,
    NodeNotFoundError,
    ReadOnlySessionError,
    SessionNotFoundError,
    StaleBranchError,
)
from .importing import prepare_import
from .lease import LeaseMixin
from .rows import node_row, utc
from .schema import leaf_moves, nodes, sessions, trees
from .values import CommitResult, SessionInfo

T = TypeVar("T")
_SOUND_CACHE_SIZE = 4096


class SqlSessionStore(LeaseMixin):
    """Session trees in one SQL database. Create it with `open_store(url)`."""

    # Test hook: the invariant checker must catch a store that commits stale plans. A test
    # subclass sets this False to skip the leaf/revision re-check (never do it elsewhere).
    _guard_commit: bool = True

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        # (tree_id, node_id) whose O(tail) branch this instance has verified healthy. Nodes
        # never change, so a verified chain stays verified; a child of one is verified by
        # construction. Saves re-reading the tail on every append.
        self._sound: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Test hook: awaited at named points of a commit (cancellation and crash tests).
        self._step_hook: Callable[[str], Awaitable[None]] | None = None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def close(self) -> None:
        """Release every pooled connection."""
        await self.engine.dispose()

    # ------------------------------------------------------------------ sessions

    async def create_session(
        self,
        *,
        from_node_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """A new session: empty on a new tree, or with leaf `from_node_id` (shared ancestors)."""
        meta_json = _metadata_json(metadata)

        async def op(conn: AsyncConnection) -> SessionInfo:
            if from_node_id is None:
                tree_id = new_id()
                await conn.execute(insert(trees).values(id=tree_id, created_at=utc_now()))
            else:
                tree_id = await queries.tree_of_node(conn, from_node_id)
                if tree_id is None:
                    raise NodeNotFoundError(f"cannot start a session from node {from_node_id!r}:"
                                            " no such node is stored")
                branch = await queries.load_tail(conn, tree_id, from_node_id, 0)
                if isinstance(branch, DamagedBranch):
                    raise InvalidOperationError(
                        f"cannot start a session from node {from_node_id!r}: its history is "
                        "damaged (" + "; ".join(str(p) for p in branch.problems) + ")")
            return await self._insert_session(conn, tree_id, from_node_id, title, meta_json,
                                              op="create")

        return await self._write(op)

    async def get_session(self, session_id: str) -> SessionInfo:
        """One session; `read_only` is True when its stored history is damaged (SPEC D2)."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            return self._info(row, read_only=await self._is_damaged(conn, row))

    async def list_sessions(self, *, check_damage: bool = True) -> list[SessionInfo]:
        """Every session, oldest first. `check_damage=False` skips the per-session tail read
        (then `read_only` reflects only the stored flag)."""
        async with read_connection(self.engine) as conn:
            rows = (await conn.execute(
                select(sessions).order_by(sessions.c.created_at, sessions.c.id)
            )).mappings().all()
            out = []
            for row in rows:
                damaged = check_damage and await self._is_damaged(conn, row)
                out.append(self._info(row, read_only=bool(damaged)))
            return out

    # ------------------------------------------------------------------ loading

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch:
        """What the model needs, read in O(tail): from the latest checkpoint's boundary to the
        leaf. `Branch.complete` is False when older history was not read."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            return await queries.load_tail(conn, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch:
        """The whole branch from its root to the leaf (for a UI or an audit)."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            return await queries.load_full(conn, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])

    async def load_tree(self, session_id: str) -> list[Node]:
        """Every readable node of the session's tree, all branches, parents before children.
        Rows that fail validation are left out (`load_full_branch` reports them)."""
        async with read_connection(self.engine) as conn:
            row = await self._session_row(conn, session_id)
            found = queries.records(await queries.tree_rows(conn, row["tree_id"]))
            return [n for n in found.values() if isinstance(n, Node)]

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
        msg = _as_message(message)
        nid = node_id or new_id()
        stamp = utc(created_at) if created_at is not None else utc_now()

        async def op(conn: AsyncConnection) -> Node:
            row = await self._lock_session(conn, session_id)
            if node_id is not None:
                again = await self._already_appended(conn, row, nid, msg, stamp)
                if again is not None:
                    return again
            if expected_leaf_id is not None and row["leaf_id"] != expected_leaf_id:
                raise StaleBranchError(session_id, expected_leaf_id, row["leaf_id"])
            await self._check_writable(conn, row)
            node = Node(id=nid, parent_id=row["leaf_id"], created_at=stamp, payload=msg)
            await self._insert_chain(conn, row, [node])
            await self._move_leaf(conn, row, node.id, op="append", node_id=node.id)
            return node

        return await self._write(op)

    async def append_many(self, session_id: str, messages: Sequence[Message]) -> list[Node]:
        """Append several messages as one chain in one transaction (one leaf move)."""
        msgs = [_as_message(m) for m in messages]
        if not msgs:
            return []

        async def op(conn: AsyncConnection) -> list[Node]:
            row = await self._lock_session(conn, session_id)
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

        Validated in memory first; all-or-nothing. Node ids are kept; an id already stored
        raises `DuplicateNodeError`.
        """
        prepared = prepare_import(nodes_in, leaf_id)
        meta_json = _metadata_json(metadata)

        async def op(conn: AsyncConnection) -> SessionInfo:
            taken = await queries.existing_ids(conn, [p.node.id for p in prepared])
            if taken:
                sample = ", ".join(sorted(taken)[:5])
                raise DuplicateNodeError(
                    f"{len(taken)} imported node ids are already stored (e.g. {sample}); "
                    "was this history imported before?")
            tree_id = new_id()
            await conn.execute(insert(trees).values(id=tree_id, created_at=utc_now()))
            rows = [node_row(p.node, tree_id=tree_id, depth=p.depth,
                             latest_checkpoint_id=p.latest_checkpoint_id, session_id=None)
                    for p in prepared]
            for start in range(0, len(rows), 1000):
                await conn.execute(insert(nodes), rows[start : start + 1000])
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
            branch = await self._writable_branch(conn, row)
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

    # ------------------------------------------------------------------ retry / edit / fork

    async def retry(self, session_id: str) -> SessionInfo:
        """SPEC O1: move the leaf to the parent of the last real assistant message.

        Checkpoints after that point leave the branch with the old reply. Nothing is
        deleted; the old reply stays in the tree.
        """
        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await self._lock_session(conn, session_id)
            target = await self._last_message(conn, row, "assistant")
            if target is None:
                raise InvalidOperationError(
                    f"nothing to retry in session {session_id!r}: no assistant reply on its branch")
            return await self._move_leaf(conn, row, target.parent_id, op="retry")

        return await self._write(op)

    async def edit(self, session_id: str, message: Message | Mapping[str, Any]) -> Node:
        """SPEC O2: the new user message becomes a sibling of the last real user message
        (same parent) and the new leaf; the old reply and later checkpoints leave the branch."""
        msg = _as_message(message)
        if msg.role != "user":
            raise InvalidOperationError(
                "edit replaces the last user message, so it takes a user message "
                f"(got {msg.role!r})")

        async def op(conn: AsyncConnection) -> Node:
            row = await self._lock_session(conn, session_id)
            target = await self._last_message(conn, row, "user")
            if target is None:
                raise InvalidOperationError(
                    f"nothing to edit in session {session_id!r}: no user message on its branch")
            node = Node(id=new_id(), parent_id=target.parent_id, created_at=utc_now(), payload=msg)
            await self._insert_chain(conn, row, [node])
            await self._move_leaf(conn, row, node.id, op="edit", node_id=node.id)
            return node

        return await self._write(op)

    async def fork(self, session_id: str, node_id: str, *, title: str | None = None) -> SessionInfo:
        """SPEC O3: a new session on the same tree whose leaf is `node_id`.

        Only from a stable, real assistant message of this session's tree; never from a
        checkpoint. No node is copied or modified (SPEC T5).
        """
        async def op(conn: AsyncConnection) -> SessionInfo:
            row = await self._session_row(conn, session_id)
            await self._check_writable(conn, row)
            tree_id = row["tree_id"]
            branch = await queries.load_tail(conn, tree_id, node_id, 0)
            if isinstance(branch, DamagedBranch):
                if await queries.node_meta(conn, tree_id, node_id) is None:
                    raise _foreign_node(node_id, session_id,
                                        await queries.tree_of_node(conn, node_id))
                raise ReadOnlySessionError(session_id, branch.problems)
            node = branch.nodes[-1]
            if node.checkpoint is not None:
                raise InvalidOperationError(
                    f"cannot fork from checkpoint {node_id!r} (SPEC O3): fork from a real "
                    "assistant message")
            if node.message is None or node.message.role != "assistant":
                role = node.message.role if node.message else "?"
                raise InvalidOperationError(
                    f"cannot fork from {node_id!r}: it is a {role} message; fork from an "
                    "assistant message")
            stability = check_stability(branch)
            if not stability.stable:
                raise InvalidOperationError(
                    f"cannot fork from {node_id!r}: the tool workflow there is not finished ("
                    + "; ".join(stability.reasons) + ")")
            return await self._insert_session(conn, tree_id, node_id, title, "{}", op="fork")

        return await self._write(op)

    # ------------------------------------------------------------------ internals

    async def _write(self, op: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        async def attempt() -> T:
            async with write_connection(self.engine) as conn:
                return await op(conn)

        return await retry_transient(attempt)

    async def _step(self, name: str) -> None:
        if self._step_hook is not None:
            await self._step_hook(name)

    async def _session_row(self, conn: AsyncConnection, session_id: str) -> RowMapping:
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFoundError(repr(session_id))
        row = (await conn.execute(select(sessions).where(sessions.c.id == session_id))
               ).mappings().first()
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    async def _lock_session(self, conn: AsyncConnection, session_id: str) -> RowMapping:
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFoundError(repr(session_id))
        stmt = select(sessions).where(sessions.c.id == session_id).with_for_update()
        row = (await conn.execute(stmt)).mappings().first()
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    def _info(self, row: RowMapping, *, read_only: bool) -> SessionInfo:
        return SessionInfo(
            id=row["id"], tree_id=row["tree_id"], leaf_id=row["leaf_id"],
            branch_revision=row["branch_revision"], read_only=bool(row["read_only"]) or read_only,
            title=row["title"], created_at=utc(row["created_at"]),
            metadata=json.loads(row["metadata"] or "{}"),
        )

    async def _is_damaged(self, conn: AsyncConnection, row: RowMapping) -> bool:
        if row["leaf_id"] is None or (row["tree_id"], row["leaf_id"]) in self._sound:
            return False
        branch = await queries.load_tail(conn, row["tree_id"], row["leaf_id"],
                                         row["branch_revision"])
        if isinstance(branch, Branch):
            self._remember_sound(row["tree_id"], row["leaf_id"])
        return isinstance(branch, DamagedBranch)

    async def _check_writable(self, conn: AsyncConnection, row: RowMapping) -> None:
        """Refuse to write to a read-only or damaged session (SPEC D2); cheap when cached."""
        if row["read_only"]:
            raise ReadOnlySessionError(row["id"])
        if row["leaf_id"] is None or (row["tree_id"], row["leaf_id"]) in self._sound:
            return
        await self._writable_branch(conn, row)

    async def _writable_branch(self, conn: AsyncConnection, row: RowMapping) -> Branch:
        if row["read_only"]:
            raise ReadOnlySessionError(row["id"])
        branch = await queries.load_tail(conn, row["tree_id"], row["leaf_id"],
                                         row["branch_revision"])
        if isinstance(branch, DamagedBranch):
            raise ReadOnlySessionError(row["id"], branch.problems)
        if row["leaf_id"] is not None:
            self._remember_sound(row["tree_id"], row["leaf_id"])
        return branch

    def _remember_sound(self, tree_id: str, node_id: str) -> None:
        self._sound[(tree_id, node_id)] = None
        self._sound.move_to_end((tree_id, node_id))
        while len(self._sound) > _SOUND_CACHE_SIZE:
            self._sound.popitem(last=False)

    async def _last_message(self, conn: AsyncConnection, row: RowMapping, role: str) -> Node | None:
        """The last message of `role` on the branch (tail first; full branch if needed)."""
        branch = await self._writable_branch(conn, row)
        for loaded in (branch, None):
            if loaded is None:
                if branch.complete:
                    return None
                full = await queries.load_full(conn, row["tree_id"], row["leaf_id"],
                                               row["branch_revision"])
                if isinstance(full, DamagedBranch):
                    raise ReadOnlySessionError(row["id"], full.problems)
                loaded = full
            for node in reversed(loaded.nodes):
                msg = node.message
                if msg is not None and msg.role == role:
                    return node
        return None

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
        tree_id = await queries.tree_of_node(conn, node_id)
        if tree_id is None:
            return None
        if tree_id == row["tree_id"]:
            found = await queries.walk_up(conn, tree_id, node_id, node_id)
            node = found.get(node_id)
            if isinstance(node, Node) and node.payload == msg and node.created_at == stamp:
                return node
        raise DuplicateNodeError(f"node id {node_id!r} is already stored with other content; "
                                 "choose a new id")

    async def _insert_chain(self, conn: AsyncConnection, row: RowMapping,
                            chain: Sequence[Node]) -> None:
        """Insert linked nodes whose first parent is stored; compute depth and latest checkpoint."""
        tree_id = row["tree_id"]
        first_parent = chain[0].parent_id
        depth, latest = 0, None
        if first_parent is not None:
            meta = await queries.node_meta(conn, tree_id, first_parent)
            if meta is None:
                raise ReadOnlySessionError(row["id"], reason=f"parent {first_parent!r} is missing")
            depth, latest = meta["depth"] + 1, meta["latest_checkpoint_id"]
        rows = []
        for node in chain:
            rows.append(node_row(node, tree_id=tree_id, depth=depth,
                                 latest_checkpoint_id=latest, session_id=row["id"]))
            latest = rows[-1]["latest_checkpoint_id"]
            depth += 1
        await conn.execute(insert(nodes), rows)

    async def _move_leaf(
        self, conn: AsyncConnection, row: RowMapping, to_leaf: str | None, *, op: str,
        node_id: str | None = None, planned: tuple[str, int] | None = None,
    ) -> SessionInfo:
        """Move the leaf and bump the revision, conditional on the row we locked; log the move."""
        revision = row["branch_revision"] + 1
        now = utc_now()
        guard = [sessions.c.id == row["id"]]
        if self._guard_commit or op != "commit":
            guard += [sessions.c.leaf_id.is_not_distinct_from(row["leaf_id"]),
                      sessions.c.branch_revision == row["branch_revision"]]
        result = await conn.execute(
            update(sessions).where(*guard)
            .values(leaf_id=to_leaf, branch_revision=sessions.c.branch_revision + 1,
                    updated_at=now)
        )
        if result.rowcount != 1:
            raise LeafConflict(f"session {row['id']} changed under its lock")
        await conn.execute(insert(leaf_moves).values(
            tree_id=row["tree_id"], session_id=row["id"], revision=revision, op=op,
            from_leaf_id=row["leaf_id"], to_leaf_id=to_leaf, node_id=node_id,
            planned_leaf_id=planned[0] if planned else None,
            planned_revision=planned[1] if planned else None, at=now,
        ))
        if node_id is not None and node_id == to_leaf:
            self._remember_sound(row["tree_id"], node_id)
        new = dict(row)
        new.update(leaf_id=to_leaf, branch_revision=revision, updated_at=now)
        return self._info(new, read_only=False)  # type: ignore[arg-type]

    async def _insert_session(
        self, conn: AsyncConnection, tree_id: str, leaf_id: str | None, title: str | None,
        meta_json: str, *, op: str,
    ) -> SessionInfo:
        now = utc_now()
        values = dict(id=new_id(), tree_id=tree_id, leaf_id=leaf_id, branch_revision=0,
                      read_only=False, title=title, metadata=meta_json, created_at=now,
                      updated_at=now)
        await conn.execute(insert(sessions).values(**values))
        await conn.execute(insert(leaf_moves).values(
            tree_id=tree_id, session_id=values["id"], revision=0, op=op, from_leaf_id=None,
            to_leaf_id=leaf_id, at=now))
        return self._info(values, read_only=False)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- helpers


def _as_message(value: Any) -> Message:
    """The ordinary write path takes messages only; checkpoints are refused (SPEC C6)."""
    if isinstance(value, Checkpoint):
        raise InvalidOperationError(
            "append/edit cannot write a checkpoint (SPEC C6); checkpoints are written only by "
            "commit_checkpoint(plan, checkpoint)")
    if isinstance(value, Message):
        return value
    if isinstance(value, Node):
        raise InvalidOperationError("pass the message (node.payload), not a Node: the store "
                                    "assigns the id and parent")
    if isinstance(value, Mapping):
        try:
            payload = parse_payload(dict(value))
        except ValueError as exc:
            raise InvalidPayloadError(f"invalid message payload: {exc}") from exc
        return _as_message(payload)
    raise InvalidOperationError(f"expected a Message, got {type(value).__name__}")


def _metadata_json(metadata: Mapping[str, Any] | None) -> str:
    try:
        return json.dumps(dict(metadata or {}), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidOperationError(f"session metadata must be JSON-serialisable: {exc}") from exc


def _plan_mismatch(row: RowMapping, plan: Plan) -> str | None:
    """C2: same leaf, same revision as when the plan was made."""
    if row["leaf_id"] != plan.session_leaf_id:
        return (f"the leaf moved from {plan.session_leaf_id!r} to {row['leaf_id']!r} while "
                "summarising")
    if row["branch_revision"] != plan.branch_revision:
        return (f"branch revision is {row['branch_revision']}, the plan was made at "
                f"{plan.branch_revision}")
    return None


def _foreign_node(node_id: str, session_id: str, other_tree: str | None) -> Exception:
    if other_tree is None:
        return NodeNotFoundError(f"node {node_id!r} is not stored")
    return InvalidOperationError(
        f"node {node_id!r} belongs to another session tree, not to session {session_id!r}")
