"""What one append costs the database, and that the store's memo never makes a write wrong
(issue 26), on SQLite and PostgreSQL.

A store instance remembers what it read or wrote (node bookkeeping, recall places, the
session row). A steady append then runs only its writes: BEGIN (SQLite), the nodes with
their recall rows, the leaf move with its log row. The remembered row is a guess that the
guarded leaf move proves; these tests make the guess wrong (another worker writes, a fork
takes the remembered recall place) and check the write still lands where SPEC C1, C6 and
L4 say, and that every invariant holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from contextfold.store import StaleBranchError, open_store
from contextfold.store.audit.invariants import check_store
from tests.builders import assistant, user
from tests.store_fixtures import backend, db_url, store  # noqa: F401  (fixtures)

# One statement, outside a transaction (no BEGIN, no COMMIT: it is atomic on its own): the
# node with its recall rows, the move with its log row. It was BEGIN (SQLite), the node, the
# move.
APPEND = {"sqlite": 1, "postgresql": 1}
# A chain: BEGIN (SQLite only), the nodes with their recall rows (one executemany), the move.
CHAIN = {"sqlite": 3, "postgresql": 2}


@contextmanager
def counting(target: Any) -> Iterator[list[str]]:
    """The statements `target` (a store) runs inside the block."""
    seen: list[str] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    engine = target.engine.sync_engine
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


async def test_a_steady_append_runs_only_its_writes(store, backend):  # noqa: F811
    """C6, L1: an append after this instance's own write reads nothing: the node with its
    recall rows and the leaf move with its log in one statement; a chain's nodes in one,
    its move in another; searchable at once."""
    info = await store.create_session()
    await store.append(info.id, user("first"))
    for i in range(5):
        with counting(store) as seen:
            await store.append(info.id, assistant(f"reply zebra{i}"))
        assert len(seen) == APPEND[backend], seen
        assert not any(s.startswith("SELECT") for s in seen), seen
    with counting(store) as seen:
        many = await store.append_many(info.id, [user("a"), assistant("b"), user("c")])
    assert len(seen) == CHAIN[backend], seen  # a chain is one executemany, one move
    assert (await store.get_session(info.id)).leaf_id == many[-1].id
    hits = await store.search_history(info.id, "zebra3")
    assert [h.node.message.text for h in hits] == ["reply zebra3"]  # type: ignore[union-attr]
    assert (await check_store(store)).ok


async def test_c1_another_workers_append_is_not_overwritten(store, db_url):  # noqa: F811
    """C1: this instance's remembered row is stale after another worker's append; its next
    append is rolled back and run again from the stored row, after the other's node."""
    info = await store.create_session()
    mine = await store.append(info.id, user("mine"))
    async with await open_store(db_url) as other:
        theirs = await other.append(info.id, assistant("theirs"))
    with counting(store) as seen:
        again = await store.append(info.id, user("next"))
    assert again.parent_id == theirs.id  # continued from the stored leaf, not the guess
    assert any("FOR UPDATE" in s or s.startswith("SELECT sessions") for s in seen), seen
    stored = await store.get_session(info.id)
    assert (stored.leaf_id, stored.branch_revision) == (again.id, 3)
    # A conditional append from the old leaf is still refused (C1), guess or not.
    try:
        await store.append(info.id, user("late"), expected_leaf_id=mine.id)
    except StaleBranchError:
        pass
    else:
        raise AssertionError("an append from a moved leaf was accepted")
    assert (await check_store(store)).ok


async def test_l4_a_fork_that_took_the_remembered_place(store, db_url, backend):  # noqa: F811
    """L4: another worker forks at this session's leaf and appends first, taking the
    recall place this instance remembered; the next append here is placed on a line of its
    own, and each session finds only its own branch's messages."""
    info = await store.create_session()
    await store.append(info.id, user("shared start"))
    leaf = await store.append(info.id, assistant("shared answer"))
    async with await open_store(db_url) as other:
        fork = await other.fork(info.id, leaf.id)
        await other.append(fork.id, user("walrus on the fork"))
    with counting(store) as seen:
        await store.append(info.id, user("narwhal on the main line"))
    assert len(seen) > APPEND[backend], seen  # refused by the unique place, run again
    assert [h.node.message.text for h in await store.search_history(info.id, "narwhal")] \
        == ["narwhal on the main line"]  # type: ignore[union-attr]
    assert await store.search_history(info.id, "walrus") == []
    assert [h.node.message.text for h in await store.search_history(fork.id, "walrus")] \
        == ["walrus on the fork"]  # type: ignore[union-attr]
    assert await store.search_history(fork.id, "narwhal") == []
    assert (await check_store(store)).ok


async def test_d2_a_session_marked_read_only_elsewhere_refuses(store, db_url):  # noqa: F811
    """D2: a remembered row says writable; the stored flag says read-only: refused."""
    from sqlalchemy import update

    from contextfold.store import ReadOnlySessionError
    from contextfold.store.sql.schema import sessions

    info = await store.create_session()
    await store.append(info.id, user("hello"))
    async with await open_store(db_url) as other, other.engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.id == info.id)
                           .values(read_only=True))
    try:
        await store.append(info.id, user("again"))
    except ReadOnlySessionError:
        pass
    else:
        raise AssertionError("a read-only session took an append")



async def test_a_mirror_lookup_reads_its_rows_not_the_tree(tmp_path):
    # Issue 26: a resent list's look-up asks for a few hashes of one tree. SQLite's planner,
    # without table statistics, took the primary key for `tree_id = ?` and read every row
    # of the tree (a 5,000-message session spent ~5 ms a request there); with the
    # (prefix_hash, tree_id) index of migration 0007 it reads the rows asked for. The plan
    # of the very statement the store ran, with its parameters.
    import sqlite3

    from contextfold.core.values.content_chain import chain_hashes

    db = tmp_path / "plan.db"
    opened = await open_store(f"sqlite:///{db}")
    ran: list[tuple[str, Any]] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        ran.append((statement, params))

    try:
        info = await opened.create_session()
        msgs = [user(f"message {i}") if i % 2 == 0 else assistant(f"reply {i}")
                for i in range(200)]
        first = await opened.mirror_extend(info.id, chain_hashes("s", msgs), msgs)
        more = [*msgs, user("one more")]
        event.listen(opened.engine.sync_engine, "before_cursor_execute", on_execute)
        await opened.mirror_extend(info.id, chain_hashes("s", more), more,
                                  known=first.node_ids)
    finally:
        await opened.close()
    lookups = [(sql, params) for sql, params in ran if sql.startswith("SELECT mirror_index.")]
    assert lookups, ran
    with sqlite3.connect(db) as conn:
        for sql, params in lookups:
            plan = " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}",
                                                            params))
            assert "ix_mirror_index_hash_tree (prefix_hash=? AND tree_id=?)" in plan, plan
