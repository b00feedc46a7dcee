"""SQLite writers of one process take turns instead of waiting on the file lock (issue 26).

SQLite has one write lock per file. Two writers of one process that both issue `BEGIN
IMMEDIATE` leave one of them sleeping in SQLite's busy handler (up to 100 ms a try) after
the lock is already free: sessions in parallel waited on one another's writes. Now the
writers queue in the process, and each starts as soon as the previous one commits.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from contextfold.core.values.messages import text_message
from contextfold.store import open_store
from contextfold.store.sql.engine import write_connection


async def test_parallel_sessions_never_hold_two_sqlite_write_transactions(tmp_path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'w.db'}")
    sids = [(await store.create_session(title=f"s{n}")).id for n in range(8)]
    open_writes, most = 0, 0

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal open_writes, most
        if statement.startswith("BEGIN IMMEDIATE"):
            open_writes += 1
            most = max(most, open_writes)

    def on_end(_conn: Any) -> None:
        nonlocal open_writes
        open_writes = max(0, open_writes - 1)

    sync = store.engine.sync_engine
    event.listen(sync, "before_cursor_execute", on_execute)
    event.listen(sync, "commit", on_end)
    event.listen(sync, "rollback", on_end)
    try:
        async def session_turns(sid: str) -> None:
            for i in range(5):
                await store.append(sid, text_message("user", f"question {i}"))
                await store.append(sid, text_message("assistant", f"answer {i}"))

        await asyncio.gather(*(session_turns(s) for s in sids))
    finally:
        await store.close()
    assert most == 1  # a writer never waited inside SQLite for another of this process
    assert open_writes == 0



@contextmanager
def statements_where(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool]]]:
    """Each SQLite statement run through `sqlite_hops` inside the block: its first word
    (the table, for an INSERT) and whether it ran in the event loop's thread (True) or in
    aiosqlite's (False). Skips where the installed versions keep the driver's cursor."""
    from contextfold.store.sqlite import sqlite_hops

    if not sqlite_hops.enabled():
        pytest.skip("other SQLAlchemy / aiosqlite versions, or $CONTEXTFOLD_SQLITE_ONE_HOP=0, "
                    "keep the driver's own cursor")
    where: list[tuple[str, bool]] = []
    run = sqlite_hops._run_statement

    def spied(conn: Any, operation: Any, parameters: Any, many: bool) -> Any:
        words = str(operation).split()
        where.append((words[2] if words[0] == "INSERT" else words[0],
                      threading.current_thread() is threading.main_thread()))
        return run(conn, operation, parameters, many)

    monkeypatch.setattr(sqlite_hops, "_run_statement", spied)
    yield where


@contextmanager
def another_process_writing(db: Path) -> Iterator[sqlite3.Connection]:
    """Another process's writer holding the file's write lock (until COMMIT or the end)."""
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("COMMIT")
        other.close()


async def waits_while_the_loop_runs(write: Awaitable[Any], other: sqlite3.Connection) -> None:
    """`write` does not finish while `other` holds the lock, the event loop runs meanwhile,
    and it finishes once the lock is free."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    clock = asyncio.create_task(ticker())
    task = asyncio.ensure_future(write)
    try:
        while ticks < 10:  # the loop ran ten times while the write waited (no fixed sleep)
            await asyncio.wait({task, clock}, timeout=0.01)
            assert not task.done()
        assert not task.done()  # waiting, and the loop ran meanwhile
        other.execute("COMMIT")
        started = time.perf_counter()
        await asyncio.wait_for(task, 10)
        assert time.perf_counter() - started < 5
    finally:
        clock.cancel()


async def test_a_write_transactions_statements_run_without_a_thread_hop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 26: inside BEGIN IMMEDIATE the connection holds the file's write lock, so its
    # statements cannot wait and run in the event loop's thread; BEGIN IMMEDIATE itself (it
    # may wait for another process) and reads outside a write run in aiosqlite's thread.
    store = await open_store(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        with statements_where(monkeypatch) as where:
            sid = (await store.create_session(title="s")).id
            await store.append(sid, text_message("user", "question"))
            where.clear()
            async with write_connection(store.engine) as conn:
                await conn.exec_driver_sql("SELECT 1")
                await conn.exec_driver_sql("SELECT 2")
            inside = list(where)
            where.clear()
            await store.load_branch(sid)
            reads = list(where)
    finally:
        await store.close()
    assert inside[0] == ("BEGIN", False)  # in the driver's thread: it may wait
    assert inside[1:] == [("SELECT", True), ("SELECT", True)]  # in the loop's thread
    assert reads and all(not in_loop for _, in_loop in reads)


async def test_another_process_holding_the_lock_never_blocks_the_event_loop(
        tmp_path: Path) -> None:
    # Issue 26: BEGIN IMMEDIATE waits for another process's lock in aiosqlite's thread (the
    # busy timeout), so the event loop keeps serving other work meanwhile, and the write
    # lands once the lock is free.
    db = tmp_path / "busy.db"
    store = await open_store(f"sqlite:///{db}")
    try:
        sid = (await store.create_session(title="s")).id
        with another_process_writing(db) as other:
            await waits_while_the_loop_runs(store.append(sid, text_message("user", "waits")),
                                            other)
        branch = await store.load_branch(sid)
    finally:
        await store.close()
    assert [n.message.parts[0].text for n in branch.nodes if n.message] == ["waits"]


async def test_a_remembered_append_is_tried_in_the_loop_and_waits_in_the_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 26: an append whose every check was remembered is one statement outside a
    # transaction (`single_write`). It is tried in the event loop's thread without waiting
    # for a lock; when another process holds the lock it waits in aiosqlite's thread (the
    # busy timeout) while the loop runs on, and lands once the lock is free.
    db = tmp_path / "single.db"
    store = await open_store(f"sqlite:///{db}")
    try:
        with statements_where(monkeypatch) as where:
            sid = (await store.create_session(title="s")).id
            await store.append(sid, text_message("user", "first"))  # the memo is warm now
            where.clear()
            await store.append(sid, text_message("assistant", "at once"))
            assert where == [("cf_append", True)]  # one statement, in the loop's thread
            where.clear()
            with another_process_writing(db) as other:
                await waits_while_the_loop_runs(
                    store.append(sid, text_message("user", "waits")), other)
            # tried in the loop (refused at once), then waited for in the driver's thread
            assert where[:2] == [("cf_append", True), ("cf_append", False)], where
        branch = await store.load_branch(sid)
    finally:
        await store.close()
    assert [n.message.parts[0].text for n in branch.nodes if n.message] == \
        ["first", "at once", "waits"]


async def test_a_point_read_on_its_own_runs_in_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 26: the read a service turn starts with (the session row with its lease, one
    # statement without BEGIN) runs in the event loop's thread (a branch read does not:
    # the first test of this file).
    store = await open_store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        sid = (await store.create_session(title="s")).id
        await store.append(sid, text_message("user", "hello"))
        with statements_where(monkeypatch) as where:
            info, holder = await store.session_and_lease(sid)
    finally:
        await store.close()
    assert info.id == sid and holder is None
    assert where == [("SELECT", True)]
