"""Responses API continuation handles in the store (SPEC Y6, Y12; issue 38): a response id is
kept with its owner and reply node (`response_ids`, migration 0008), found by one look-up
under that owner however many sessions the database holds, never for another owner or
tenant, and the ids the proxy kept in session metadata before the migration are carried
over. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import event, text

from contextfold.proxy.responses import ResponseLog
from contextfold.store import InvalidOperationError, open_store
from contextfold.store.sql.migrate import downgrade, upgrade

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]


async def _leaf(store, sid: str) -> str:
    return (await store.get_session(sid)).leaf_id


async def test_y12_a_response_id_is_found_only_under_its_owner_and_tenant(store) -> None:
    sid = await seed_session(store, turns=2, tools=0)
    node = await _leaf(store, sid)
    await store.record_response(sid, "default:key-a", "resp_1", node)
    await store.record_response(sid, "default:key-a", "resp_1", node)  # idempotent
    assert await store.find_response("default:key-a", "resp_1") == (sid, node)
    assert await store.find_response("default:key-b", "resp_1") is None  # another key
    assert await store.find_response("default:key-a", "resp_2") is None  # never kept
    # Another tenant's view of the store finds nothing, even under the same owner string.
    assert await store.for_tenant("other").find_response("default:key-a", "resp_1") is None
    with pytest.raises(InvalidOperationError):
        await store.record_response(sid, "default:key-a", "resp_3", "no-such-node")
    with pytest.raises(Exception, match="append-only"):
        async with store.engine.begin() as conn:
            await conn.execute(text("UPDATE response_ids SET node_id = 'x'"))


async def test_y12_an_unknown_response_id_is_one_look_up_however_many_sessions(store) -> None:
    """issue 38: a miss used to read every session's metadata; now one statement reads the
    one row it asks for (none), with 25 sessions holding 4 ids each."""
    for i in range(25):
        sid = await seed_session(store, turns=2, tools=0)
        node = await _leaf(store, sid)
        for k in range(4):
            await store.record_response(sid, f"default:key-{i}", f"resp_{i}_{k}", node)
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", seen)
    try:
        log = ResponseLog()
        assert await log.resolve(store, "default:key-3", "resp_9_0") is None  # another's
        assert await log.resolve(store, "default:key-3", "resp_unknown") is None
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", seen)
    reads = [s for s in statements if "FROM" in s.upper()]
    assert len(reads) == 2 and all("response_ids" in s for s in reads), statements
    assert not any("metadata" in s for s in reads)
    # The owner's own id: one look-up, then its session's branch.
    found = await ResponseLog().resolve(store, "default:key-9", "resp_9_0")
    assert found and found[0]["role"] == "user"


async def test_migration_0008_carries_over_the_ids_kept_in_session_metadata(db_url) -> None:
    store = await open_store(db_url)
    try:
        sid = await seed_session(store, turns=2, tools=0)
        node = await _leaf(store, sid)
        await downgrade(store.engine, "0007")
        await store.update_session_metadata(sid, {"proxy_responses": {
            "resp_old": {"node": node, "owner": "default:key-a"},
            "resp_ownerless": {"node": node},  # before SPEC Y12: proves no scope
        }})
        await upgrade(store.engine)
        assert await store.find_response("default:key-a", "resp_old") == (sid, node)
        assert await store.find_response("default:key-a", "resp_ownerless") is None
        assert await store.find_response("default:key-b", "resp_old") is None
    finally:
        await store.close()
