"""Sessions newest first, a page at a time, on an index (issue 38: one database for months).

`contextfold mcp` finds a client's conversation among the newest sessions (`mcp/which.py`);
it read every session of the store on each tool call. `sessions_newest` reads one keyset
page on an index (migration 0009), and `which_session` stops at the first page that settles
the answer. Checked by the plans the databases choose and by the pages read, not by time.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from contextfold.mcp import which
from contextfold.mcp.which import Asked, which_session
from tests.store_fixtures import backend, db_url, store  # noqa: F401


def proxied(n: int, **extra: str) -> dict[str, Any]:
    return {"proxy": {"client": "claude-cli/2.0", "model": "m", **extra}, "n": n}


async def test_pages_are_newest_first_and_cover_every_session(store) -> None:  # noqa: F811
    made = [(await store.create_session(title=f"s{i}")).id for i in range(7)]
    other = store.for_tenant("acme")
    theirs = (await other.create_session(title="acme's")).id
    for scoped, expected in ((store, [*made, theirs]), (other, [theirs])):
        seen, before = [], None
        while True:
            page = await scoped.sessions_newest(limit=3, before=before)
            seen += [s.id for s in page]
            if len(page) < 3:
                break
            before = (page[-1].created_at, page[-1].id)
        assert seen == list(reversed(expected))


async def _plan(store, scoped) -> str:  # noqa: F811
    """The plan the database chooses for a page after a first one (the statement
    `sessions_newest` sends, captured, then explained with its parameters)."""
    first = (await scoped.sessions_newest(limit=1))[0]
    sent: list[tuple[str, Any]] = []

    def keep(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        if "FROM sessions" in statement and "ORDER BY" in statement:
            sent.append((statement, params))

    event.listen(store.engine.sync_engine, "before_cursor_execute", keep)
    try:
        await scoped.sessions_newest(limit=2, before=(first.created_at, first.id))
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", keep)
    statement, params = sent[-1]
    sqlite = store.engine.dialect.name == "sqlite"
    async with store.engine.connect() as conn:
        if not sqlite:  # a table of a few rows is read whole; ask whether an index can serve
            await conn.exec_driver_sql("SET enable_seqscan = off")
        rows = (await conn.exec_driver_sql(
            ("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement, params)).all()
    return "\n".join(str(row[-1] if sqlite else row[0]) for row in rows)


async def test_a_page_is_one_index_range_without_a_sort(store) -> None:  # noqa: F811
    for i in range(5):
        await store.create_session(title=f"s{i}")
        await store.for_tenant("acme").create_session(title=f"a{i}")
    for scoped, index in ((store, "ix_sessions_created"),
                          (store.for_tenant("acme"), "ix_sessions_tenant")):
        plan = await _plan(store, scoped)
        assert index in plan, plan
        if store.engine.dialect.name == "sqlite":
            assert "SCAN sessions\n" not in plan + "\n" and "ORDER BY" not in plan.replace(
                "RIGHT PART OF ORDER BY", ""), plan
        else:
            assert "Seq Scan" not in plan and "\n  ->  Sort" not in plan and \
                not plan.startswith("Sort"), plan


class Counting:
    """A store that counts the pages `which_session` reads."""

    def __init__(self, store) -> None:  # noqa: F811
        self.store, self.pages = store, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def sessions_newest(self, **kwargs: Any) -> Any:
        self.pages += 1
        return await self.store.sessions_newest(**kwargs)


async def test_which_session_stops_at_the_page_that_settles_it(store, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(which, "PAGE", 2)
    ids = [(await store.create_session(metadata=proxied(
        i, label=f"task-{i}", cwd=f"/repo/p{i % 2}"))).id for i in range(9)]
    await store.create_session(title="not proxied")
    counting = Counting(store)
    found = await which_session(counting, Asked(session="task-8"))  # type: ignore[arg-type]
    assert (found.session_id, counting.pages) == (ids[8], 1)
    counting.pages = 0
    found = await which_session(counting, Asked(client="claude-code"))  # type: ignore[arg-type]
    assert (found.session_id, counting.pages) == (ids[8], 1)
    # A label of an older session: pages until it, not beyond.
    counting.pages = 0
    found = await which_session(counting, Asked(session="task-2"))  # type: ignore[arg-type]
    assert found.session_id == ids[2] and counting.pages == 4
    # The first directory wins over a later one however old its session is: every page
    # up to it is read.
    counting.pages = 0
    found = await which_session(counting, Asked(directories=("/nowhere", "/repo/p1")))  # type: ignore[arg-type]
    assert found.session_id == ids[7] and counting.pages == 6  # all 10, 2 a page, and none
    counting.pages = 0
    found = await which_session(counting, Asked(directories=("/repo/p0/src", "/repo/p1")))  # type: ignore[arg-type]
    assert found.session_id == ids[7] and counting.pages == 6
    counting.pages = 0
    found = await which_session(counting, Asked(directories=("/repo/p0",)))  # type: ignore[arg-type]
    assert found.session_id == ids[8] and counting.pages == 1


@pytest.mark.parametrize("given", ["/repo"])
async def test_a_directory_above_the_stated_one_finds_it(store, given) -> None:  # noqa: F811
    sid = (await store.create_session(metadata=proxied(0, cwd="/repo/app"))).id
    assert (await which_session(store, Asked(directories=(given,)))).session_id == sid
