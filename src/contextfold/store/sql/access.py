"""`SqlAccess`: the shared machinery of the SQL store's parts, held by each of them as a
value: transactions, session-row locking, inserting nodes with their insert-time columns
(and the rows of the index kept with them), and moving a session's leaf (every move bumps
the revision and is logged in `leaf_moves`).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contextfold.core.values.messages import Node, utc_now
from contextfold.core.values.tree import Branch, DamagedBranch
from contextfold.ids import new_id

from ..errors import (
    InvalidOperationError,
    ReadOnlySessionError,
    SessionNotFoundError,
)
from ..inputs import checked_title
from ..values import DEFAULT_TENANT, SessionInfo
from . import folded, queries
from .engine import LeafConflict, retry_transient, single_write, write_connection
from .loading import is_damaged
from .memo import KnownRow, StaleMemo, WriteMemo
from .node_index import NodeIndex
from .rows import node_row, session_info
from .schema import leaf_moves, sessions

T = TypeVar("T")
_PENDING = "contextfold_after_commit"  # conn.info key: what to remember once committed
# Set while a write runs again after `StaleMemo`: it then reads and locks as without a memo.
_READ_ALL: contextvars.ContextVar[bool] = contextvars.ContextVar("contextfold_read_all",
                                                                 default=False)


class SqlAccess:
    """What every part of the SQL store works through: its engine, the tenant it is limited
    to, its write memos and the index its node inserts keep; with the transactions,
    session-row reads and locks, node inserts and leaf moves they all share. The store
    (`contextfold.store.sql_store.SqlSessionStore`) makes one and hands it to each part."""

    def __init__(self, engine: AsyncEngine, index: NodeIndex, *, tenant: str | None = None,
                 memo: WriteMemo | None = None, guard_commit: bool = True,
                 step_hook: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.engine = engine
        # Kept in the transaction that inserts the nodes (the recall index, SPEC L1).
        self.index = index
        # SPEC W1: None = every tenant (the library, the CLI, admin tools); a tenant id limits
        # every session read or written through this access to that tenant (`for_tenant`).
        self.tenant = tenant
        # What this store read or wrote already: node bookkeeping, recall places, session
        # rows (a guess, proved by the leaf move), checked index rows (issue 26), and the
        # (tree_id, node_id) whose O(tail) branch it verified healthy (`sound`: nodes never
        # change, so a verified chain stays verified; a child of one is verified by
        # construction; saves re-reading the tail on every append). Shared by the tenant
        # views of one store.
        self.memo = memo if memo is not None else WriteMemo()
        # Test hook: the invariant checker must catch a store that commits stale plans. A
        # test store sets it False to skip the leaf/revision re-check (never elsewhere).
        self.guard_commit = guard_commit
        # Test hook: awaited at named points of a commit (cancellation and crash tests).
        self.step_hook = step_hook

    @property
    def database(self) -> str:
        """Where this store is, for messages: the SQLite file, or the URL without password."""
        url = self.engine.url
        if url.get_backend_name() == "sqlite" and url.database:
            return url.database
        return url.render_as_string(hide_password=True)

    def for_tenant(self, tenant: str) -> SqlAccess:
        """The same engine, memos, index and hooks, limited to `tenant` (SPEC W1)."""
        if not isinstance(tenant, str) or not tenant:
            raise InvalidOperationError(f"tenant must be a non-empty string, got {tenant!r}")
        return SqlAccess(self.engine, self.index, tenant=tenant, memo=self.memo,
                         guard_commit=self.guard_commit, step_hook=self.step_hook)

    def scoped(self, stmt: Any) -> Any:
        """`stmt` (a select over `sessions`) limited to this access's tenant, if any."""
        return stmt if self.tenant is None else stmt.where(sessions.c.tenant_id == self.tenant)

    async def write(self, op: Callable[[AsyncConnection], Awaitable[T]], *,
                     one_statement: bool = False) -> T:
        """Run `op` in a write transaction (retried when transient), remembering what it
        wrote once committed. `one_statement`: `op` runs one statement and reads nothing
        (every check remembered), so it runs without a transaction (`single_write`); when
        the guess fails it runs again in one, reading what it needs."""
        async def attempt() -> T:
            pending: list[Callable[[], None]] = []
            single = one_statement and not _READ_ALL.get()
            async with (single_write(self.engine) if single else
                        write_connection(self.engine)) as conn:
                conn.info[_PENDING] = pending
                try:
                    result = await op(conn)
                finally:
                    conn.info.pop(_PENDING, None)
            for remember in pending:  # committed: now it is true
                remember()
            return result

        try:
            return await retry_transient(attempt)
        except StaleMemo:
            pass
        # A remembered row or place was not the stored one (another writer, or a racer on
        # the same guess): run the write again at once, reading and locking what it needs.
        # Still a taken recall place then: a writer that raced this one for it committed
        # first; run again (each round reads what the last one could not see).
        token = _READ_ALL.set(True)
        try:
            for tries in range(4):
                try:
                    return await retry_transient(attempt)
                except StaleMemo:
                    if tries == 3:
                        raise
            raise AssertionError("unreachable")
        finally:
            _READ_ALL.reset(token)

    def append_reads_nothing(self, session_id: str, expected_leaf_id: str | None) -> bool:
        """Whether an append to `session_id` would run only its one statement: the session
        row, its leaf's soundness, bookkeeping and recall place are all remembered."""
        if _READ_ALL.get():
            return False
        row = self.memo.known_row(session_id, self.tenant)
        if row is None or row["leaf_id"] is None:
            return False
        if expected_leaf_id is not None and row["leaf_id"] != expected_leaf_id:
            return False
        key = (row["tree_id"], row["leaf_id"])
        return key in self.memo.sound and self.memo.nodes.get(key) is not None \
            and self.memo.places.get(key) is not None

    def after_commit(self, conn: AsyncConnection, remember: Callable[[], None]) -> None:
        """Run `remember` once the write on `conn` has committed (at once outside one)."""
        pending = conn.info.get(_PENDING)
        if pending is None:
            remember()
        else:
            pending.append(remember)

    async def step(self, name: str) -> None:
        if self.step_hook is not None:
            await self.step_hook(name)

    async def session_row(self, conn: AsyncConnection, session_id: str) -> RowMapping:
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFoundError(session_id, self.database)
        stmt = self.scoped(select(sessions).where(sessions.c.id == session_id))
        row = (await conn.execute(stmt)).mappings().first()
        if row is None:
            raise SessionNotFoundError(session_id, self.database)
        self.after_commit(conn, lambda: self.memo.remember_row(row))
        return row

    async def lock_session(self, conn: AsyncConnection, session_id: str, *,
                            known: bool = False, expect_leaf: str | None = None
                            ) -> RowMapping:
        """The session row, locked for this write. `known`: the row this instance read or
        wrote last, when it has one (and its leaf is `expect_leaf`, if given), without
        reading it: the leaf move that ends the write is guarded by it (issue 26). Only for
        writes whose checks all follow from the row (appends), never for a commit."""
        if known and not _READ_ALL.get():
            guess = self.memo.known_row(session_id, self.tenant)
            if guess is not None and (expect_leaf is None or guess["leaf_id"] == expect_leaf):
                return guess  # type: ignore[return-value]
        if not isinstance(session_id, str) or not session_id:
            raise SessionNotFoundError(session_id, self.database)
        stmt = self.scoped(select(sessions).where(sessions.c.id == session_id)).with_for_update()
        row = (await conn.execute(stmt)).mappings().first()
        if row is None:
            raise SessionNotFoundError(session_id, self.database)
        self.after_commit(conn, lambda: self.memo.remember_row(row))
        return row

    async def prove_known(self, conn: AsyncConnection, row: Mapping[str, Any]) -> None:
        """A write from a remembered row that ends without a leaf move (nothing new) reads
        the row after all: `StaleMemo` if it is not the one remembered."""
        if not isinstance(row, KnownRow):
            return
        real = await self.lock_session(conn, row["id"])
        if (real["leaf_id"], real["branch_revision"], bool(real["read_only"])) != \
                (row["leaf_id"], row["branch_revision"], False):
            self.memo.rows.pop(row["id"])
            raise StaleMemo(f"session {row['id']} moved since this worker last saw it")

    def info(self, row: RowMapping, *, read_only: bool) -> SessionInfo:
        return session_info(row, read_only=read_only)

    async def is_damaged(self, conn: AsyncConnection, row: RowMapping) -> bool:
        if row["leaf_id"] is None or (row["tree_id"], row["leaf_id"]) in self.memo.sound:
            return False
        if await is_damaged(queries.SqlRows(conn), row["tree_id"], row["leaf_id"],
                            row["branch_revision"]):
            return True
        self.remember_sound(row["tree_id"], row["leaf_id"])
        return False

    async def check_writable(self, conn: AsyncConnection, row: RowMapping) -> None:
        """Refuse to write to a read-only or damaged session (SPEC D2); cheap when cached."""
        if row["read_only"]:
            raise ReadOnlySessionError(row["id"])
        if row["leaf_id"] is None or (row["tree_id"], row["leaf_id"]) in self.memo.sound:
            return
        await self.writable_branch(conn, row)

    async def writable_branch(self, conn: AsyncConnection, row: RowMapping) -> Branch:
        if row["read_only"]:
            raise ReadOnlySessionError(row["id"])
        branch = await queries.load_tail(conn, row["tree_id"], row["leaf_id"],
                                         row["branch_revision"])
        if isinstance(branch, DamagedBranch):
            raise ReadOnlySessionError(row["id"], branch.problems)
        # Damage in summarised history makes the session read-only too (one rule, SPEC D2).
        problems = await queries.history_problems(conn, row["tree_id"], branch)
        if problems:
            raise ReadOnlySessionError(row["id"], problems)
        if row["leaf_id"] is not None:
            self.remember_sound(row["tree_id"], row["leaf_id"])
        return branch

    def remember_sound(self, tree_id: str, node_id: str) -> None:
        self.memo.sound.put((tree_id, node_id), True)

    async def insert_chain(self, conn: AsyncConnection, row: RowMapping,
                            chain: Sequence[Node], prefix_hashes: Sequence[str] = (), *,
                            move_op: str | None = None) -> int:
        """Insert linked nodes whose first parent is stored; compute depth and latest
        checkpoint. Each node gets its recall row (SPEC L1: searchable in the transaction
        that stores it) and, with `prefix_hashes` (one per leading node), its mirror index
        row: one statement (`folded`). With `move_op`, the leaf then moves to the last node
        (`move_leaf`); for one node, in the same statement (an append: issue 26). Returns
        the depth of the first (so a caller need not read it again)."""
        tree_id = row["tree_id"]
        first_parent = chain[0].parent_id
        depth, latest, parent_chain = 0, None, None
        if first_parent is not None:
            meta = await self.node_meta(conn, tree_id, first_parent)
            if meta is None:
                raise ReadOnlySessionError(row["id"], reason=f"parent {first_parent!r} is missing")
            depth, latest = meta["depth"] + 1, meta["latest_checkpoint_id"]
            parent_chain = meta["chain_hash"]
        rows = []
        for node in chain:
            rows.append(node_row(node, tree_id=tree_id, depth=depth,
                                 latest_checkpoint_id=latest, session_id=row["id"],
                                 parent_chain=parent_chain))
            latest, parent_chain = rows[-1]["latest_checkpoint_id"], rows[-1]["chain_hash"]
            depth += 1
        remembered = None if _READ_ALL.get() else self.memo.places
        placement = await self.index.place(conn, tree_id, [(n, r["depth"]) for n, r in
                                                           zip(chain, rows, strict=True)],
                                           remembered)
        last = chain[-1].id
        fused = move_op is not None and len(chain) == 1
        try:
            if not fused:
                await folded.insert_nodes(conn, rows, placement.rows, prefix_hashes)
            else:
                move = self._move_values(row, last, op=move_op, node_id=last)  # type: ignore[arg-type]
                # Always guarded by read_only = false too: redundant for a row read under the
                # lock (checked writable), but it keeps a write sent without a transaction
                # (`single_write`) whole even if the remembered row was dropped meanwhile.
                if not await folded.append_node(conn, rows[0], placement.rows[0],
                                                prefix_hashes[0] if prefix_hashes else None,
                                                move, writable=True):
                    self._refuse_move(row)
        except IntegrityError as exc:
            if not folded.is_place_race(exc):
                raise
            # Another writer took the place first: a fork of a remembered parent, or one
            # that skipped the parent's row lock because it remembered the parent. Run the
            # write again reading what is stored (issue 26).
            placement.forget(remembered, tree_id)
            raise StaleMemo(f"a recall place in tree {tree_id} was taken by another "
                            "writer") from exc

        def remember() -> None:
            if first_parent is not None:  # its next place on its line may be taken now
                self.memo.places.pop((tree_id, first_parent))
            for r in rows:
                self.memo.remember_node(tree_id, r)
            # the others have a child on their line already
            self.memo.places.put((tree_id, last), placement.places[last])

        self.after_commit(conn, remember)
        if fused:
            self._moved(conn, row, move)
        elif move_op is not None:
            await self.move_leaf(conn, row, last, op=move_op, node_id=last)
        return int(rows[0]["depth"])

    async def node_meta(self, conn: AsyncConnection, tree_id: str,
                         node_id: str) -> Mapping[str, Any] | None:
        """`queries.node_meta`, from the memo when this instance read or wrote it before
        (a node's bookkeeping columns never change)."""
        meta = self.memo.nodes.get((tree_id, node_id))
        if meta is None:
            row = await queries.node_meta(conn, tree_id, node_id)
            if row is None:
                return None
            meta = dict(row)
            self.after_commit(conn, lambda: self.memo.remember_node(tree_id, meta))
        return meta

    async def move_leaf(
        self, conn: AsyncConnection, row: RowMapping, to_leaf: str | None, *, op: str,
        node_id: str | None = None, planned: tuple[str, int] | None = None,
    ) -> SessionInfo:
        """Move the leaf and bump the revision, conditional on the row we locked; log the move."""
        values = self._move_values(row, to_leaf, op=op, node_id=node_id, planned=planned)
        if self.guard_commit or op != "commit":
            # Conditional on the row as locked, or as remembered (not read under the lock:
            # then this statement proves it, and that it is still writable).
            if not await folded.move_leaf(conn, values, writable=isinstance(row, KnownRow)):
                self._refuse_move(row)
        else:  # the test hook that lets a stale commit through (the checker must catch it)
            await conn.execute(update(sessions).where(sessions.c.id == row["id"]).values(
                leaf_id=to_leaf, branch_revision=values["revision"], updated_at=values["at"]))
            await conn.execute(insert(leaf_moves).values(**values))
        return self._moved(conn, row, values)

    @staticmethod
    def _move_values(row: RowMapping, to_leaf: str | None, *, op: str,
                     node_id: str | None = None,
                     planned: tuple[str, int] | None = None) -> dict[str, Any]:
        """The `leaf_moves` row of moving `row`'s leaf to `to_leaf` (the next revision)."""
        return dict(tree_id=row["tree_id"], session_id=row["id"],
                    revision=row["branch_revision"] + 1, op=op, from_leaf_id=row["leaf_id"],
                    to_leaf_id=to_leaf, node_id=node_id,
                    planned_leaf_id=planned[0] if planned else None,
                    planned_revision=planned[1] if planned else None, at=utc_now())

    def _refuse_move(self, row: RowMapping) -> None:
        """The guarded move found the row elsewhere: `StaleMemo` for a remembered row (run
        again reading it), else `LeafConflict` (retried)."""
        if isinstance(row, KnownRow):
            self.memo.rows.pop(row["id"])
            raise StaleMemo(f"session {row['id']} moved since this worker last saw it")
        raise LeafConflict(f"session {row['id']} changed under its lock")

    def _moved(self, conn: AsyncConnection, row: RowMapping,
               values: Mapping[str, Any]) -> SessionInfo:
        """After a move: the new leaf is sound if it is the node just written; the moved row
        is remembered once committed."""
        to_leaf, node_id = values["to_leaf_id"], values["node_id"]
        if node_id is not None and node_id == to_leaf:
            self.remember_sound(row["tree_id"], node_id)
        new = dict(row)
        new.update(leaf_id=to_leaf, branch_revision=values["revision"],
                   updated_at=values["at"])
        self.after_commit(conn, lambda: self.memo.remember_row(new))
        return self.info(new, read_only=False)  # type: ignore[arg-type]

    async def insert_session(
        self, conn: AsyncConnection, tree_id: str, leaf_id: str | None, title: str | None,
        meta_json: str, *, op: str, tenant: str | None = None,
    ) -> SessionInfo:
        now = utc_now()
        values = dict(id=new_id(), tree_id=tree_id, leaf_id=leaf_id, branch_revision=0,
                      read_only=False, title=checked_title(title), metadata=meta_json,
                      created_at=now, updated_at=now,
                      tenant_id=tenant or self.tenant or DEFAULT_TENANT)
        await conn.execute(insert(sessions).values(**values))
        await conn.execute(insert(leaf_moves).values(
            tree_id=tree_id, session_id=values["id"], revision=0, op=op, from_leaf_id=None,
            to_leaf_id=leaf_id, at=now))
        return self.info(values, read_only=False)  # type: ignore[arg-type]



# ---------------------------------------------------------------------- helpers


def metadata_json(metadata: Mapping[str, Any] | None) -> str:
    try:
        return json.dumps(dict(metadata or {}), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidOperationError(f"session metadata must be JSON-serialisable: {exc}") from exc
