"""Where the database is and how to talk to it: URL resolution, engines, transactions.

One code path serves SQLite (embedded default, WAL mode) and PostgreSQL. Writers on SQLite
take the write lock up front (`BEGIN IMMEDIATE`) so two writers never deadlock upgrading a
read lock; on PostgreSQL the session row is locked with `SELECT ... FOR UPDATE`.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..errors import ConfigurationError
from ..sqlite.sqlite_hops import BUSY_TIMEOUT_MS, install, mark_single
from .location import ENV_VAR, default_sqlite_path

_BEGIN_OPTION = "contextfold_sqlite_begin"
_NO_BEGIN = "none"  # one statement, its own snapshot: no BEGIN sent (`single_read`)
T = TypeVar("T")


def resolve_url(url: str | None = None) -> str:
    """Turn what the user gave (a URL, a file path, or nothing) into a driver URL.

    Nothing → `$CONTEXTFOLD_DB` → the embedded SQLite file. `postgresql://` and `sqlite://`
    URLs get the async drivers (psycopg 3, aiosqlite); a bare path means a SQLite file.
    """
    raw = url or os.environ.get(ENV_VAR) or ""
    if not raw:
        path = default_sqlite_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite+aiosqlite:///{path}"
    if "://" not in raw:
        path = Path(raw).expanduser().resolve()
        check_sqlite_file(path)
        return f"sqlite+aiosqlite:///{path}"
    try:
        parsed = make_url(raw)
    except Exception:  # sqlalchemy's own wording repeats the URL, password included
        raise ConfigurationError(
            f"cannot parse database URL {redact_url(raw)!r}: use sqlite:///path or "
            "postgresql://user@host/db") from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
        if parsed.database and parsed.database != ":memory:":
            check_sqlite_file(Path(parsed.database))
    else:
        raise ConfigurationError(
            f"unsupported database {backend!r} in {redact_url(raw)!r}: use sqlite:///path or "
            "postgresql://user@host/db"
        )
    return parsed.render_as_string(hide_password=False)


_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def redact_url(url: str) -> str:
    """`url` with any password replaced by `***`, for messages and logs."""
    url = _PASSWORD.sub(r"\1***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(path: Path) -> None:
    """Refuse, with a clear message, a path that cannot be a contextfold SQLite database:
    a directory, something that is not a regular file, or a file that is not SQLite."""
    if path.is_dir():
        raise ConfigurationError(f"the database path {path} is a directory; give a file "
                                 f"path such as {path}/contextfold.db")
    if not path.exists():
        if not path.parent.is_dir():
            raise ConfigurationError(f"cannot create the database {path}: the directory "
                                     f"{path.parent} does not exist")
        return
    if not path.is_file():
        raise ConfigurationError(f"the database path {path} is not a regular file")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise ConfigurationError(f"cannot read the database {path}: "
                                 f"{exc.strerror or exc}") from None
    if header and header != SQLITE_HEADER:
        raise ConfigurationError(f"{path} is not a SQLite database (is --db pointing at "
                                 "another file?); nothing was changed")


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine with contextfold's connection settings for the backend."""
    if make_url(url).get_backend_name() == "sqlite":
        # `sqlite_hops` runs a write transaction's statements in the event loop's thread,
        # the connection being opened in aiosqlite's (never two threads at once: SQLAlchemy
        # runs one call on a connection at a time).
        args = kwargs.setdefault("connect_args", {})
        args.setdefault("check_same_thread", False)
    engine = create_async_engine(url, **kwargs)
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        install(dbapi_connection)  # one thread hop per statement, not four (issue 26)
        # Let us emit BEGIN ourselves (the driver's implicit BEGIN is always DEFERRED).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # The busy timeout first: switching a new file to WAL takes a lock that a
        # concurrent first opener may hold.
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # REPLACE's implicit delete then fires the append-only DELETE triggers too (the
        # BEFORE INSERT trigger of migration 0002 refuses it as well, for other clients).
        cursor.execute("PRAGMA recursive_triggers=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        if mode != _NO_BEGIN:
            conn.exec_driver_sql(f"BEGIN {mode}")


# One writer at a time per SQLite engine and event loop: SQLite has one write lock per
# file, and a writer that waits for it inside the driver sleeps in SQLite's busy handler
# (up to 100 ms a try) instead of starting the moment the lock is free. Queued here, the
# next writer starts as soon as the previous one commits (issue 26: sessions in parallel
# on SQLite waited on one another's writes, p99 1.7-2.5 s). Other processes still wait in
# the busy handler (`busy_timeout`).
_WRITERS: weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[Any, asyncio.Lock]] = \
    weakref.WeakKeyDictionary()


def _writer_lock(engine: AsyncEngine) -> asyncio.Lock:
    locks = _WRITERS.setdefault(engine.sync_engine, weakref.WeakKeyDictionary())
    loop = asyncio.get_running_loop()
    lock = locks.get(loop)
    if lock is None:
        lock = locks[loop] = asyncio.Lock()
    return lock


@asynccontextmanager
async def write_connection(engine: AsyncEngine, *,
                           folded: bool = True) -> AsyncIterator[AsyncConnection]:
    """A connection inside a write transaction; rolled back on any exception or cancel.

    On SQLite the writers of this process take turns (`_writer_lock`) before `BEGIN
    IMMEDIATE`, so none of them waits on the file lock another of them holds; the
    connection has the temp views of `folded.py` (`folded=False`: it has none, for a
    migration).
    """
    if engine.dialect.name != "sqlite":
        async with engine.connect() as conn, conn.begin():
            yield conn
        return
    async with _writer_lock(engine), engine.connect() as conn:
        await conn.run_sync(_fold_writes, folded)
        await conn.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        async with conn.begin():
            yield conn


@asynccontextmanager
async def single_write(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for a write that is one statement, atomic on its own: no BEGIN and no
    COMMIT are sent (PostgreSQL: autocommit; SQLite: the writers' turn as in
    `write_connection`, the temp views, no BEGIN). Two round trips fewer than a
    transaction, for an append whose every check was remembered (issue 26)."""
    if engine.dialect.name != "sqlite":
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn
        return
    async with _writer_lock(engine), engine.connect() as conn:
        await conn.run_sync(_fold_writes, True, single=True)  # and no BEGIN
        yield conn


_FOLDED = "contextfold_folded"  # connection-record info: its temp views exist


def _fold_writes(sync_conn: Any, wanted: bool, *, single: bool = False) -> None:
    """Create (or drop) the SQLite connection's temp views that fold an append's writes
    (`folded.py`), outside any transaction and below SQLAlchemy (no statement of the
    write's own). Dropped for a migration: SQLite re-checks every trigger when a table is
    renamed, and the tables are rebuilt under them. `single`: the connection's next
    statement is one statement on its own, without BEGIN (`_single`)."""
    info = sync_conn.info
    if bool(info.get(_FOLDED)) != wanted:
        from .folded import SQLITE_SETUP, SQLITE_TEARDOWN

        cursor = sync_conn.connection.dbapi_connection.cursor()
        try:
            for statement in SQLITE_SETUP if wanted else SQLITE_TEARDOWN:
                cursor.execute(statement)
        finally:
            cursor.close()
        info[_FOLDED] = wanted
    if single:  # after the views: the mark is for the write's own statement
        _single(sync_conn)


@asynccontextmanager
async def read_connection(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection inside a read transaction (one consistent snapshot on both backends)."""
    async with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            yield conn


@asynccontextmanager
async def single_read(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for a read that is one statement (a statement is its own consistent
    snapshot): no BEGIN is sent for it, a round trip saved on every service turn (issue
    26); on PostgreSQL it runs in autocommit, which also spares the COMMIT's round trip.
    Further statements on the connection each see their own snapshot: only for reads of
    rows that never change (nodes) after the one statement."""
    if engine.dialect.name != "sqlite":
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            yield conn
        return
    async with engine.connect() as conn:
        await conn.run_sync(_single)
        yield conn


def _single(sync_conn: Any) -> None:
    """No BEGIN for the connection's next statement, tried in the event loop's thread
    without a busy wait (`sqlite_hops.mark_single`): one call into the connection."""
    sync_conn.execution_options(**{_BEGIN_OPTION: _NO_BEGIN})
    mark_single(sync_conn)


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying the whole transaction for: lock timeouts, deadlocks, conflicts."""
    if isinstance(exc, LeafConflict):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    if sqlstate in ("40001", "40P01", "55P03"):  # serialization, deadlock, lock not available
        return True
    if isinstance(exc, OperationalError):
        text = str(exc).lower()
        return "database is locked" in text or "database is busy" in text
    return False


class LeafConflict(Exception):
    """The conditional leaf update hit zero rows although the row was locked (retry)."""



async def retry_transient(action: Callable[[], Awaitable[T]], *, attempts: int = 8) -> T:
    """Run `action` (one whole transaction), retrying transient database conflicts."""
    for attempt in range(attempts):
        try:
            return await action()
        except Exception as exc:
            if attempt == attempts - 1 or not is_transient(exc):
                raise
            # Jittered backoff so competing writers do not collide again in lockstep.
            await asyncio.sleep(min(0.5, 0.01 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")
