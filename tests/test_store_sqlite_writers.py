"""SQLite writers of one process take turns instead of waiting on the file lock (issue 26).

SQLite has one write lock per file. Two writers of one process that both issue `BEGIN
IMMEDIATE` leave one of them sleeping in SQLite's busy handler (up to 100 ms a try) after
the lock is already free: sessions in parallel waited on one another's writes. Now the
writers queue in the process, and each starts as soon as the previous one commits.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event

from contextfold.core.messages import text_message
from contextfold.store import open_store


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
