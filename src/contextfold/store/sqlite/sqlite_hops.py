"""SQLite statements in one thread hop each (issue 26).

aiosqlite runs every call on the sqlite3 connection in its own thread, and SQLAlchemy's
adapter makes four calls per statement (open a cursor, execute, fetch, close): four hand-offs
between the event loop and that thread, each a wake-up of the other thread (~30 µs of CPU
on an idle box, far more wall time on a busy one), for statements that take microseconds.
A service turn ran 32 of them. Here a statement is one hand-off: the cursor is opened,
executed, read and closed in the connection's thread, and the adapter keeps the rows, the
description, the row count and the last row id. Inside a write transaction (after BEGIN
IMMEDIATE, which holds the file's write lock) a statement is no hand-off at all: nothing can
make it wait, so it runs in the event loop's thread. A rollback with no transaction open (a
connection back from a committed write or a one-statement read) is not sent at all.

Installed on each new connection of a contextfold SQLite engine (`engine.py`); streamed
results (server-side cursors) keep SQLAlchemy's own cursor.

It fails soft. The adapter subclasses SQLAlchemy's private aiosqlite classes and reaches into
aiosqlite's internals, which a minor release may rename; so they are imported only inside
`_one_hop_classes`, under a guard: when they are missing or changed, or when
`$CONTEXTFOLD_SQLITE_ONE_HOP=0` turns the fast path off, every connection keeps
SQLAlchemy's ordinary cursor (correct, only slower) and one log line says why.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import sqlite3
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

ENV_VAR = "CONTEXTFOLD_SQLITE_ONE_HOP"  # "0" (or "off", "false", "no"): the ordinary path
# How long a writer waits for another process's lock: the connection's busy timeout, set by
# `engine.py` on each new connection and restored here after a statement tried at once.
BUSY_TIMEOUT_MS = 30_000


def _run_statement(conn: sqlite3.Connection, operation: Any, parameters: Any,
                   many: bool) -> tuple[Any, list[Any], int, int | None]:
    """In the connection's thread: the statement's description, rows, row count, last id."""
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


_BEGIN_WRITE = "BEGIN IMMEDIATE"  # what `engine.write_connection` begins with
# Set on the aiosqlite connection by a successful BEGIN IMMEDIATE, cleared by its commit or
# rollback (a plain attribute: the adapter classes have slots, aiosqlite's has a __dict__).
_LOCKED = "_contextfold_write_locked"
# Set by `engine.single_write` / `single_read` for their one statement (taken by it;
# cleared on rollback).
_SINGLE = "_contextfold_single"


def mark_single(sync_conn: Any) -> None:
    """Tell the connection its next statement stands alone (`engine.single_write`: a
    remembered append; `single_read`: a point read of the session row or the lease): it is
    tried in the event loop's thread, without waiting for a lock (`_run`)."""
    adapted = sync_conn.connection.dbapi_connection
    hops = adapter()
    if hops is not None and isinstance(adapted, hops.connection):  # installed on it
        setattr(adapted._connection, _SINGLE, True)


def _try_at_once(conn: sqlite3.Connection, operation: Any, parameters: Any,
                 many: bool) -> tuple[Any, list[Any], int, int | None] | None:
    """`_run_statement` with no busy wait: None when the file's write lock is taken
    (another process writes; SQLite then wrote nothing), for the driver's thread to wait."""
    conn.execute("PRAGMA busy_timeout=0")
    try:
        return _run_statement(conn, operation, parameters, many)
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return None
        raise
    finally:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


class OneHop(NamedTuple):
    """The adapter's two classes, built on the installed SQLAlchemy and aiosqlite."""

    base: type  # SQLAlchemy's own aiosqlite connection class
    connection: type  # its one-hop subclass


def _one_hop_classes() -> OneHop:
    """Build the adapter on SQLAlchemy's private aiosqlite classes. Raises ImportError or
    AttributeError when the installed versions lack what it uses (SQLAlchemy 2.1's shared
    asyncio adapter, aiosqlite's `_execute`, a `__dict__` on aiosqlite's connection for
    the `_LOCKED` mark)."""
    import aiosqlite
    from sqlalchemy.dialects.sqlite.aiosqlite import (
        AsyncAdapt_aiosqlite_connection,
        AsyncAdapt_aiosqlite_cursor,
    )
    from sqlalchemy.util.concurrency import await_

    if not (hasattr(AsyncAdapt_aiosqlite_connection, "_cursor_cls")
            and any("_execute_mutex" in getattr(cls, "__slots__", ())
                    for cls in AsyncAdapt_aiosqlite_connection.__mro__)
            and callable(getattr(aiosqlite.Connection, "_execute", None))
            and "__slots__" not in vars(aiosqlite.Connection)):
        raise AttributeError("SQLAlchemy's aiosqlite adapter or aiosqlite's connection "
                             "changed: no cursor class, execute mutex or `_execute`")

    class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
        """SQLAlchemy's aiosqlite cursor, each statement one call into the driver's thread."""

        __slots__ = ("_description", "_lastrowid", "_rowcount")

        def __init__(self, adapt_connection: Any) -> None:
            # No driver cursor is opened here (that was a hop of its own): each statement
            # opens and closes one in the connection's thread.
            self._adapt_connection = adapt_connection
            self._connection = adapt_connection._connection
            self._cursor = None  # type: ignore[assignment]
            self._soft_closed_memoized = {}  # type: ignore[assignment]
            self._rows = collections.deque()
            self._description: Any = None
            self._rowcount = -1
            self._lastrowid: int | None = None

        @property
        def description(self) -> Any:
            return self._description

        @property
        def rowcount(self) -> int:
            return self._rowcount

        @property
        def lastrowid(self) -> int:
            return self._lastrowid  # type: ignore[return-value]

        @property
        def arraysize(self) -> int:
            return 1

        @arraysize.setter
        def arraysize(self, value: int) -> None:
            pass  # the rows are all fetched with the statement

        async def _async_soft_close(self) -> None:
            pass  # the driver's cursor is closed already

        def close(self) -> None:
            self._rows.clear()

        async def _run(self, operation: Any, parameters: Any, many: bool) -> None:
            driver = self._connection
            raw = driver._conn
            single = getattr(driver, _SINGLE, False)
            setattr(driver, _SINGLE, False)  # the mark is for one statement
            done = None
            if single and not raw.in_transaction:
                # A statement on its own: a remembered append (`single_write`, in the process's
                # writer queue already, so only another process's lock can make it wait) or a
                # point read (`single_read`; in WAL mode a reader waits only in rare recovery
                # cases). Tried here without waiting, else it waits in the driver's thread.
                done = _try_at_once(raw, operation, parameters, many)
            elif getattr(driver, _LOCKED, False) and raw.in_transaction:
                # Inside BEGIN IMMEDIATE this connection holds the file's write lock: nothing
                # can make the statement wait, and a write transaction's statements take
                # microseconds, so it runs here, without the hand-off to the driver's thread
                # (two thread wake-ups a statement; issue 26). Only this coroutine uses the
                # connection now (SQLAlchemy runs one call on it at a time).
                done = _run_statement(raw, operation, parameters, many)
            if done is None:
                async with self._adapt_connection._execute_mutex:
                    # aiosqlite's own hand-off (its queue and thread; SQLAlchemy's adapter
                    # reaches into the same internals for isolation_level). What may wait runs
                    # there: BEGIN IMMEDIATE (another process's lock: the busy timeout), a
                    # write outside a transaction, and reads, which may be long.
                    done = await driver._execute(_run_statement, raw, operation, parameters,
                                                 many)
                if operation == _BEGIN_WRITE:
                    setattr(driver, _LOCKED, True)
            description, rows, rowcount, lastrowid = done
            self._description, self._rowcount, self._lastrowid = description, rowcount, lastrowid
            self._rows = collections.deque(rows)

        def execute(self, operation: Any, parameters: Any = None) -> Any:
            try:
                await_(self._run(operation, parameters, False))
            except Exception as error:
                self._adapt_connection._handle_exception(error)

        def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
            try:
                await_(self._run(operation, seq_of_parameters, True))
            except Exception as error:
                self._adapt_connection._handle_exception(error)

        def nextset(self) -> None:
            raise NotImplementedError("sqlite3 has no result sets after the first")

        def setinputsizes(self, *inputsizes: Any) -> None:
            pass  # sqlite3 ignores them too


    class OneHopConnection(AsyncAdapt_aiosqlite_connection):
        """SQLAlchemy's aiosqlite connection with `OneHopCursor`, and no rollback round trip
        when no transaction is open."""

        __slots__ = ()
        _cursor_cls = OneHopCursor

        def rollback(self) -> None:
            setattr(self._connection, _LOCKED, False)
            setattr(self._connection, _SINGLE, False)
            raw = self._connection._connection
            # Reading the flag from this thread is safe: SQLAlchemy's adapter runs one call on
            # a connection at a time, so the driver's thread is not using it now.
            if raw is not None and not raw.in_transaction:
                return
            super().rollback()

        def commit(self) -> None:
            # In the driver's thread: a commit may run a WAL checkpoint (disk writes, fsync).
            setattr(self._connection, _LOCKED, False)
            super().commit()

    return OneHop(AsyncAdapt_aiosqlite_connection, OneHopConnection)


@functools.cache
def adapter() -> OneHop | None:
    """The adapter, built on first use (a PostgreSQL process never imports aiosqlite), or
    None, with one log line, when the installed versions cannot have it."""
    try:
        return _one_hop_classes()
    except (ImportError, AttributeError, TypeError) as error:
        log.warning("contextfold: SQLite statements take SQLAlchemy's ordinary path (four "
                    "thread hops each, correct and slower): the one-hop adapter does not fit "
                    "the installed SQLAlchemy / aiosqlite (%s)", error)
        return None


@functools.cache
def _told_off() -> None:
    log.info("contextfold: the SQLite one-hop path is off ($%s); statements take "
             "SQLAlchemy's ordinary path", ENV_VAR)


def enabled() -> bool:
    """Whether new connections get the fast path: the installed versions allow it and
    `$CONTEXTFOLD_SQLITE_ONE_HOP` does not turn it off (read for each new connection)."""
    if os.environ.get(ENV_VAR, "").strip().lower() in ("0", "off", "false", "no"):
        _told_off()  # once a process
        return False
    return adapter() is not None


def install(dbapi_connection: Any) -> None:
    """Make a new SQLAlchemy aiosqlite connection a one-hop connection (same state: the
    subclass adds no slots), where the installed versions allow it and it is not off."""
    hops = adapter() if enabled() else None
    if hops is not None and type(dbapi_connection) is hops.base:
        dbapi_connection.__class__ = hops.connection
