"""A read-only snapshot of an embedded SQLite store through the standard library's `sqlite3`.

Why: importing SQLAlchemy's async engine costs a short command more than Typer, Rich and
pydantic together (docs/benchmarks.md), and `sessions`, `show` and `project` only read.
`read_only_store` runs their reads on this snapshot when it can, else on the full store.

The store's guarantees hold because the snapshot refuses anything it was not built for:
- it opens the file `mode=ro`: it can never write, create or migrate a database;
- it serves only a database exactly at the schema this code ships: the stored Alembic
  revision equals the newest shipped migration, and the tables, indexes and triggers are
  exactly the ones that revision creates (`SCHEMA_NAMES`);
- on any other state (no such file, a `postgresql://` or unusual URL, an older database
  that needs migrating, a hand-edited schema, a session id it cannot find, any SQLite
  error) it raises `SnapshotUnusable` and the full store runs the same reads, with its
  migrations and its exact errors.
The loading rules are the store's own (`loading.py`, `rows.py`): only the SQL execution
differs, and the queries below are those of `queries.py` and `sql.py` written out.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from contextfold.core.values.messages import Node
from contextfold.core.values.tree import Branch, DamagedBranch

from .._sync import WouldWait, run_now
from .sql import loading
from .sql.head import shipped_head
from .sql.location import ENV_VAR, default_sqlite_path
from .sql.rows import session_info, utc
from .values import SessionInfo

if TYPE_CHECKING:
    from .protocol import SessionReader

T = TypeVar("T")
Row = dict[str, Any]

# The schema the snapshot reads: migration 0009's objects, by name (a test checks them
# against a freshly migrated file, so a new migration must come here too).
SCHEMA_REVISION = "0009"
SCHEMA_NAMES = frozenset({
    *(("table", name) for name in (
        "alembic_version", "api_tokens", "compaction_leases", "leaf_moves", "mirror_index",
        "nodes", "recall_fts", "recall_fts_config", "recall_fts_data", "recall_fts_docsize",
        "recall_fts_idx", "recall_nodes", "response_ids", "sessions", "tenants", "trees")),
    *(("index", name) for name in (
        "ix_api_tokens_tenant", "ix_mirror_index_hash_tree", "ix_nodes_id", "ix_sessions_created",
        "ix_sessions_tenant",
        "ix_sessions_tree_id", "sqlite_autoindex_alembic_version_1",
        "sqlite_autoindex_api_tokens_1", "sqlite_autoindex_api_tokens_2",
        "sqlite_autoindex_compaction_leases_1", "sqlite_autoindex_leaf_moves_1",
        "sqlite_autoindex_mirror_index_1", "sqlite_autoindex_nodes_1",
        "sqlite_autoindex_recall_nodes_1", "sqlite_autoindex_response_ids_1",
        "sqlite_autoindex_sessions_1",
        "sqlite_autoindex_tenants_1", "sqlite_autoindex_trees_1", "ux_recall_nodes_line")),
    *(("trigger", name) for name in (
        "leaf_moves_no_delete", "leaf_moves_no_replace", "leaf_moves_no_update",
        "mirror_index_no_delete", "mirror_index_no_replace", "mirror_index_no_update",
        "nodes_no_delete", "nodes_no_replace", "nodes_no_update", "recall_nodes_no_delete",
        "recall_nodes_no_replace", "recall_nodes_no_update", "response_ids_no_delete",
        "response_ids_no_replace", "response_ids_no_update")),
})

_NODE_COLUMNS = ("tree_id, id, parent_id, kind, role, created_at, payload, content_hash, "
                 "chain_hash")
_WALK = f"""
WITH RECURSIVE chain({_NODE_COLUMNS}) AS (
    SELECT {_NODE_COLUMNS} FROM nodes WHERE tree_id = :tree AND id = :leaf
    UNION
    SELECT {", ".join("parent." + c for c in _NODE_COLUMNS.split(", "))}
    FROM nodes AS parent JOIN chain
        ON parent.tree_id = chain.tree_id AND parent.id = chain.parent_id
    WHERE (:stop IS NULL OR chain.id != :stop)
        AND (:min_depth IS NULL OR parent.depth >= :min_depth)
)
SELECT {_NODE_COLUMNS} FROM chain"""
_SESSION_COLUMNS = ("id, tree_id, leaf_id, branch_revision, read_only, title, metadata, "
                    "created_at, updated_at, tenant_id")  # by name: a changed table fails here
_CHUNK = 500  # ids per IN (...) list, as queries.py chunks them


class SnapshotUnusable(Exception):
    """The snapshot cannot serve this read: the full store must (module docstring)."""


def sqlite_file(url: str | None) -> Path | None:
    """The SQLite file a `--db` value names when it is a plain one (nothing, a path, or
    `sqlite:///path`), as `engine.resolve_url` reads it; None for anything else."""
    raw = url or os.environ.get(ENV_VAR) or ""
    if not raw:
        return default_sqlite_path()
    if "://" not in raw:
        return Path(raw).expanduser().resolve()
    prefix = "sqlite:///"
    if raw.startswith(prefix) and not any(c in raw for c in "?#%"):
        return Path(raw[len(prefix):]).resolve()
    return None  # PostgreSQL, a driver name, query options, escapes: the full store


def _stamp(text: str) -> datetime:
    """A stored time as the store reads it (SQLAlchemy's SQLite DATETIME, then UTC)."""
    return utc(datetime.fromisoformat(text))


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    row = {d[0]: v for d, v in zip(cursor.description, values, strict=True)}
    for key in ("created_at", "updated_at"):
        if isinstance(row.get(key), str):
            row[key] = _stamp(row[key])
    return row


class SnapshotReader:
    """The read-only calls of the store API that the command line's reading commands make
    (`protocol.SessionReader`), answered from one read transaction (one consistent snapshot)
    of a SQLite file. Also a `loading.RowSource`."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    def open(cls, url: str | None) -> SnapshotReader:
        """The snapshot of the database `url` names; `SnapshotUnusable` unless it is a SQLite
        file exactly at this code's schema (module docstring)."""
        path = sqlite_file(url)
        if path is None or not path.is_file():
            raise SnapshotUnusable(f"not an existing SQLite file: {url!r}")
        try:
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            raise SnapshotUnusable(str(exc)) from None
        try:
            # `ANALYZE` statistics (sqlite_stat*) change plans, never results.
            names = {tuple(r) for r in conn.execute(
                "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%'")}
            stored = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
            if stored != [SCHEMA_REVISION] or shipped_head() != SCHEMA_REVISION or \
                    names != SCHEMA_NAMES:
                raise SnapshotUnusable(f"schema revision {stored}, not exactly the shipped "
                                       f"{shipped_head()} with its tables and triggers")
            conn.row_factory = _dict_row
            conn.execute("BEGIN")  # every later read sees this one snapshot
        except (sqlite3.Error, SnapshotUnusable) as exc:
            conn.close()
            raise SnapshotUnusable(str(exc)) from None
        return cls(conn)

    def _all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Row]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except (sqlite3.Error, ValueError) as exc:  # ValueError: a time that does not parse
            raise SnapshotUnusable(str(exc)) from None

    def close(self) -> None:
        """End the read transaction and close the file (synchronous: sqlite3 never waits)."""
        self._conn.close()

    # ------------------------------------------------------------ loading.RowSource

    async def node_meta(self, tree_id: str, node_id: str) -> Row | None:
        """Bookkeeping columns of one node (`queries.node_meta`)."""
        rows = self._all(
            "SELECT id, parent_id, kind, role, depth, latest_checkpoint_id, first_kept_id, "
            "content_hash, chain_hash FROM nodes WHERE tree_id = ? AND id = ?",
            (tree_id, node_id))
        return rows[0] if rows else None

    async def walk_rows(self, tree_id: str, leaf_id: str, stop_id: str | None = None,
                        min_depth: int | None = None) -> list[Row]:
        """The ancestor chain of `leaf_id` (`queries._walk_rows`)."""
        return self._all(_WALK, {"tree": tree_id, "leaf": leaf_id, "stop": stop_id,
                                 "min_depth": min_depth})

    # ------------------------------------------------------------ the store's reads

    def _session_row(self, session_id: str) -> Row:
        rows = self._all(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        if not rows:  # the full store words this error (and names the database)
            raise SnapshotUnusable(f"no session {session_id!r}")
        return rows[0]

    async def _info(self, row: Row) -> SessionInfo:
        damaged = await loading.is_damaged(self, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])
        return session_info(row, read_only=damaged)

    async def get_session(self, session_id: str) -> SessionInfo:
        """As `SqlSessionStore.get_session`."""
        return await self._info(self._session_row(session_id))

    async def list_sessions(self) -> list[SessionInfo]:
        """As `SqlSessionStore.list_sessions`: every session, oldest first."""
        return [await self._info(row)
                for row in self._all(
                    f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY created_at, id")]

    async def sessions_newest(self, *, limit: int,
                              before: tuple[datetime, str] | None = None) -> list[SessionInfo]:
        """As `SqlSessionStore.sessions_newest`: the newest `limit` sessions, newest first, on
        the (created_at, id) index; a later page (`before`) is the full store's (the stored
        time's text form is the SQL layer's to compare)."""
        if before is not None:
            raise SnapshotUnusable("a page after the first")
        rows = self._all(f"SELECT {_SESSION_COLUMNS} FROM sessions "
                         "ORDER BY created_at DESC, id DESC LIMIT ?", (limit,))
        return [session_info(row, read_only=False) for row in rows]

    async def load_branch(self, session_id: str) -> Branch | DamagedBranch:
        """As `SqlSessionStore.load_branch` (O(tail))."""
        row = self._session_row(session_id)
        return await loading.load_tail(self, row["tree_id"], row["leaf_id"],
                                       row["branch_revision"])

    async def load_full_branch(self, session_id: str) -> Branch | DamagedBranch:
        """As `SqlSessionStore.load_full_branch`."""
        row = self._session_row(session_id)
        return await loading.load_full(self, row["tree_id"], row["leaf_id"],
                                       row["branch_revision"])

    async def load_branch_page(self, session_id: str, *, limit: int) -> Branch | DamagedBranch:
        """As `SqlSessionStore.load_branch_page` (the last page only)."""
        if limit < 1:  # the store's error
            raise SnapshotUnusable(f"limit {limit}")
        row = self._session_row(session_id)
        return await loading.load_page(self, row["tree_id"], row["leaf_id"],
                                       row["branch_revision"], limit)

    async def load_tree_page(self, session_id: str, *, limit: int) -> list[Node]:
        """As `SqlSessionStore.load_tree_page`: the branch's last `limit` nodes and the
        first node of every fork off them."""
        page = await self.load_branch_page(session_id, limit=limit)
        shown = page.nodes if isinstance(page, Branch) else page.readable
        tree_id = self._session_row(session_id)["tree_id"]
        ids = [n.id for n in shown]
        children: list[Row] = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            children += self._all(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE tree_id = ? AND parent_id IN "
                f"({', '.join('?' * len(chunk))})", (tree_id, *chunk))
        return loading.with_forks(shown, children)

    async def load_tree(self, session_id: str) -> list[Node]:
        """As `SqlSessionStore.load_tree`: every readable node, parents before children."""
        tree_id = self._session_row(session_id)["tree_id"]
        return loading.readable_nodes(self._all(
            f"SELECT {_NODE_COLUMNS}, depth FROM nodes WHERE tree_id = ? "
            "ORDER BY depth, created_at, id", (tree_id,)))


    async def find_sessions(self, prefix: str, *, limit: int) -> list[SessionInfo]:
        """As `SqlSessionStore.find_sessions`."""
        rows = self._all(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE substr(id, 1, ?) = ? "
                         "ORDER BY id LIMIT ?", (len(prefix), prefix, limit)) if prefix else []
        if not rows:  # the full store words the "no session" error (and names the database)
            raise SnapshotUnusable(f"no session {prefix!r}")
        return [session_info(row, read_only=False) for row in rows]

    async def latest_session(self) -> SessionInfo | None:
        """As `SqlSessionStore.latest_session`."""
        rows = self._all(f"SELECT {_SESSION_COLUMNS} FROM sessions "
                         "ORDER BY updated_at DESC, id DESC LIMIT 1")
        if not rows:  # as above: the full store words it
            raise SnapshotUnusable("no session")
        return session_info(rows[0], read_only=False)

    async def find_nodes(self, session_id: str, prefix: str, *, limit: int) -> list[str]:
        """As `SqlSessionStore.find_nodes`."""
        tree_id = self._session_row(session_id)["tree_id"]
        if not prefix:
            return []
        return [row["id"] for row in self._all(
            "SELECT id FROM nodes WHERE tree_id = ? AND substr(id, 1, ?) = ? ORDER BY id "
            "LIMIT ?", (tree_id, len(prefix), prefix, limit))]


def read_only_store(url: str | None, reads: Callable[[SessionReader], Awaitable[T]]) -> T:
    """`reads(store)` (read-only calls of the store API) on a snapshot of the database when
    it can serve them, else on the full store (`open_store`), whose results and errors are
    the reference: the snapshot answers the same or gives way.

    Synchronous: the snapshot needs no event loop, and only the full store starts one
    (`asyncio.run`), so call it from synchronous code, not from a running loop.
    """
    try:
        reader = SnapshotReader.open(url)
    except SnapshotUnusable:
        pass
    else:
        try:
            return _to_the_end(reads(reader))
        except SnapshotUnusable:
            pass
        finally:
            reader.close()
    import asyncio  # only here: the snapshot path runs without it (docs/benchmarks.md)

    from . import open_store

    async def on_full_store() -> T:
        async with await open_store(url) as store:
            return await reads(store)

    return asyncio.run(on_full_store())


def _to_the_end(reads: Awaitable[T]) -> T:
    # The snapshot's calls are `async` only to share the store's API and `loading` with
    # the full store: reads that wait for anything else give way to the full store, which
    # runs them again under asyncio (`_sync.run_now`).
    try:
        return run_now(reads)
    except WouldWait as exc:
        raise SnapshotUnusable(f"the reads wait for more than the snapshot: {exc}") from None
