"""What a service turn costs the database, counted (issue 26), on SQLite and PostgreSQL.

A turn used to re-read and re-validate the branch tail on every request even when nothing
had moved (`(leaf_id, branch_revision)` unchanged), and to read the session row and the
compaction lease in transactions of their own: 6 transactions, 30 statements on SQLite,
growing CPU with the session. Now one read gives the row and the lease, the tail is read
again only when another writer moved the leaf (SPEC C1: every move bumps the revision),
each append is one statement (the node with its index rows and the guarded leaf move with
its log row) and reads nothing the worker holds, and the count is the same at turn 60
as at turn 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from contextfold.core.values.messages import text_message
from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

# Every statement the driver executes, BEGIN included (SQLite's BEGIN IMMEDIATE is one;
# PostgreSQL sends none): the read of the session row with its lease before the turn (one
# statement, no BEGIN), the user message's append and the reply's (each one statement,
# outside a transaction: the node with its recall rows and the guarded leaf move with its
# log row); the state the reply reports uses the lease read before the turn. It was 30 on
# SQLite and 22 on PostgreSQL, then 24 and 18, then 8 and 6 (BEGIN, the node, the move per
# append), then 4 (the lease read again for the reply's state).
EXACT_STATEMENTS = {"sqlite": 3, "postgresql": 3}
SHAPE = {
    "sqlite": ["SELECT sessions", "INSERT INTO cf_append", "INSERT INTO cf_append"],
    "postgresql": ["SELECT sessions", "WITH u AS (UPDATE sessions", "WITH u AS (UPDATE sessions"],
}


@contextmanager
def counting(engine: Any) -> Iterator[list[str]]:
    """The statements `engine` runs inside the block, in order."""
    seen: list[str] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", on_execute)


async def test_a_turn_costs_a_bounded_flat_number_of_statements(service_factory, backend):  # noqa: F811
    """C1: an unchanged session is not re-read; the count per turn stays flat over 60 turns."""
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        await say(c, sid, "turn 0")
        counts = []
        for i in range(1, 60):
            with counting(svc.store.engine) as seen:
                await say(c, sid, f"turn {i}: what next?")
            counts.append(len(seen))
            assert not any(s.startswith("WITH RECURSIVE") for s in seen), \
                "the branch tail was re-read although nothing had moved"
            assert [s for s in seen if not any(s.startswith(p) for p in SHAPE[backend])] \
                == [], seen
        assert counts == [EXACT_STATEMENTS[backend]] * len(counts), counts  # flat, and ≤ 8
        assert [next(p for p in SHAPE[backend] if s.startswith(p)) for s in seen] \
            == SHAPE[backend], seen


async def test_c1_a_turn_after_another_writer_reads_what_it_wrote(service_factory):  # noqa: F811
    """C1: when another writer moved the leaf, the next turn re-reads the branch and
    continues from the stored leaf (the skipped reload is only for an unchanged revision)."""
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        await say(c, sid, "first")
        outside = await svc.store.append(sid, text_message("user", "written elsewhere"))
        reply = await svc.store.append(sid, text_message("assistant", "answered elsewhere"))
        assert outside.parent_id is not None
        with counting(svc.store.engine) as seen:
            turn = await say(c, sid, "and now?")
        assert any(s.startswith("WITH RECURSIVE") for s in seen)  # the tail was re-read
        tree = (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
        parent = {n["id"]: n["parent_id"] for n in tree}
        assert parent[turn["node_ids"][0]] == reply.id  # appended after the outside reply
