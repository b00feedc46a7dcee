"""Store basics on SQLite and PostgreSQL: migrations, sessions, append, load, commit, import."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from contextfold.core.values.messages import Checkpoint, Node, text_message
from contextfold.core.values.tree import Branch, build_branch
from contextfold.core.view.projection import project
from contextfold.store import (
    DuplicateNodeError,
    InvalidOperationError,
    InvalidPayloadError,
    SessionNotFoundError,
    SessionStore,
    StaleBranchError,
    open_store,
    resolve_url,
)
from contextfold.store.sql.engine import read_connection
from contextfold.store.sql.migrate import current_revision, downgrade, head_revision, upgrade
from tests.builders import assistant, chain, turn, user

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import checkpoint_for, manual_plan, seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]  # backend / db_url / store fixtures


async def test_async_with_closes_the_store_also_when_the_body_fails(db_url):
    # Closing releases the pooled connections: the engine gets a fresh, empty pool.
    async with await open_store(db_url) as store:
        pool = store.engine.pool
        await store.create_session(title="kept")
    assert store.engine.pool is not pool
    with pytest.raises(RuntimeError, match="body failed"):
        async with await open_store(db_url) as again:
            pool = again.engine.pool
            assert [s.title for s in await again.list_sessions()] == ["kept"]
            raise RuntimeError("body failed")
    assert again.engine.pool is not pool


async def test_migrations_run_from_empty_and_are_versioned(db_url):  # D3
    opened = await open_store(db_url)
    async with read_connection(opened.engine) as conn:
        assert await conn.run_sync(current_revision) == head_revision()
    await downgrade(opened.engine, "base")
    async with read_connection(opened.engine) as conn:
        assert await conn.run_sync(current_revision) is None
    await upgrade(opened.engine)
    await upgrade(opened.engine)  # idempotent at head
    info = await opened.create_session()
    assert (await opened.get_session(info.id)).branch_revision == 0
    await opened.close()


def test_default_url_is_embedded_sqlite_and_env_overrides(monkeypatch, tmp_path):  # D3
    monkeypatch.delenv("CONTEXTFOLD_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = resolve_url(None)
    assert url.startswith("sqlite+aiosqlite:///") and url.endswith("contextfold.db")
    assert str(tmp_path / "data") in url
    monkeypatch.setenv("CONTEXTFOLD_DB", "postgresql://u@h/db")
    assert resolve_url(None) == "postgresql+psycopg://u@h/db"
    assert resolve_url(str(tmp_path / "x.db")) == f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"


async def test_sqlite_uses_wal(tmp_path: Path):  # D3
    opened = await open_store(str(tmp_path / "w.db"))
    async with read_connection(opened.engine) as conn:
        assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
    await opened.close()


async def test_append_moves_leaf_and_bumps_revision(store):  # C1
    assert isinstance(store, SessionStore)  # the protocol others code against
    info = await store.create_session(title="t", metadata={"k": [1]})
    a = await store.append(info.id, user("hi"))
    b = await store.append(info.id, assistant("hello"), expected_leaf_id=a.id)
    assert b.parent_id == a.id and a.parent_id is None
    got = await store.get_session(info.id)
    assert (got.leaf_id, got.branch_revision, got.title, got.metadata) == (b.id, 2, "t", {"k": [1]})
    branch = await store.load_branch(info.id)
    assert isinstance(branch, Branch)
    assert [n.id for n in branch.nodes] == [a.id, b.id] and branch.revision == 2
    assert branch.nodes[1] == b  # round trip keeps payload and timestamp


async def test_append_with_wrong_expected_leaf_is_refused(store):  # C1
    info = await store.create_session()
    a = await store.append(info.id, user())
    await store.append(info.id, assistant())
    with pytest.raises(StaleBranchError, match="expected"):
        await store.append(info.id, user(), expected_leaf_id=a.id)
    assert (await store.get_session(info.id)).branch_revision == 2


async def test_append_refuses_checkpoints(store):  # C6
    info = await store.create_session()
    cp = Checkpoint(summary="s", first_kept_id=None, tokens_before=1)
    with pytest.raises(InvalidOperationError, match="only by commit_checkpoint"):
        await store.append(info.id, cp)
    with pytest.raises(InvalidOperationError, match="only by commit_checkpoint"):
        await store.append(info.id, cp.model_dump(mode="json"))
    with pytest.raises(InvalidOperationError, match="only by commit_checkpoint"):
        await store.append_many(info.id, [user(), cp])
    assert (await store.get_session(info.id)).branch_revision == 0
    assert await store.load_tree(info.id) == []


async def test_malformed_payload_names_the_field(store):  # C6
    info = await store.create_session()
    with pytest.raises(InvalidPayloadError, match="parts"):
        await store.append(info.id, {"kind": "message", "role": "user",
                                     "parts": [{"type": "tool_result"}]})
    with pytest.raises(InvalidPayloadError, match="role"):
        await store.append(info.id, {"kind": "message", "role": "robot"})
    with pytest.raises(InvalidOperationError):
        await store.append(info.id, Node(id="x", payload=user()))
    assert await store.load_tree(info.id) == []


async def test_append_with_node_id_is_idempotent(store):  # C6
    info = await store.create_session()
    msg = user("once")
    first = await store.append(info.id, msg, node_id="client-1")
    again = await store.append(info.id, msg, node_id="client-1", created_at=first.created_at)
    assert again == first
    assert len(await store.load_tree(info.id)) == 1
    with pytest.raises(DuplicateNodeError):
        await store.append(info.id, user("other"), node_id="client-1")


async def test_unknown_session_is_a_clear_error(store):  # D2
    with pytest.raises(SessionNotFoundError, match="nope") as raised:
        await store.append("nope", user())
    # The message names the database searched and how to list it, in words for the CLI's
    # users too (no Python call in it, issue 41).
    assert store.database in str(raised.value) and "password" not in store.database
    assert "contextfold sessions" in str(raised.value)
    assert "store.list_sessions()" not in str(raised.value)
    assert f"contextfold sessions --db {store.database}" in str(raised.value)
    with pytest.raises(SessionNotFoundError):
        await store.load_branch("nope")
    with pytest.raises(SessionNotFoundError):
        await store.retry("nope")


async def test_commit_checkpoint_appends_one_node_and_moves_leaf(store):  # T1 C2
    sid = await seed_session(store, turns=3)
    before = await store.load_branch(sid)
    plan = manual_plan(before)
    result = await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    assert result.status == "committed" and result.reason is None
    cp = result.checkpoint
    assert cp is not None and cp.parent_id == before.leaf_id
    assert result.session.leaf_id == cp.id
    assert result.session.branch_revision == before.revision + 1
    tree = await store.load_tree(sid)
    assert {n.id for n in tree} == {n.id for n in before.nodes} | {cp.id}


async def test_load_branch_reads_only_the_tail_after_a_checkpoint(store):  # T2 T3 C1
    sid = await seed_session(store, turns=4, tools=0)
    full = await store.load_branch(sid)
    plan = manual_plan(full)  # keep the last user turn raw
    result = await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    tail = await store.load_branch(sid)
    assert isinstance(tail, Branch) and not tail.complete
    assert tail.nodes[0].id == plan.first_kept_id
    assert tail.leaf_id == result.checkpoint.id
    assert tail.revision == result.session.branch_revision
    u5 = await store.append(sid, user("U5"))
    tail = await store.load_branch(sid)
    projection = project(tail)
    assert projection.checkpoint.id == result.checkpoint.id
    assert [n.id for n in projection.messages] == [*plan_kept_ids(plan), u5.id]
    whole = await store.load_full_branch(sid)
    assert whole.complete and whole.nodes[-len(tail.nodes):] == tail.nodes
    assert project(whole) == projection


def plan_kept_ids(plan):
    return [n.id for n in plan.kept]


async def test_checkpoint_keeping_nothing_loads_from_the_checkpoint(store):  # K3 T2
    sid = await seed_session(store, turns=2, tools=0)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch, first_kept_id=None)
    plan = plan.__class__(**{**plan.__dict__, "first_kept_id": None})
    result = await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    assert result.committed
    after = await store.append(sid, user("next"))
    tail = await store.load_branch(sid)
    assert [n.id for n in tail.nodes] == [result.checkpoint.id, after.id]
    assert [n.id for n in project(tail).messages] == [after.id]


async def test_import_tree_keeps_ids_and_checkpoints(store):  # T1 T4
    nodes = chain([*turn(0), *turn(1)], prefix="imp")
    cp = Checkpoint(summary="s", first_kept_id=nodes[3].id, tokens_before=10)
    nodes += chain([cp, *turn(2)], prefix="imq", parent=nodes[-1].id)
    side = chain([user("side")], prefix="side", parent=nodes[1].id)
    info = await store.import_tree(nodes + side, nodes[-1].id, title="pi")
    assert info.leaf_id == nodes[-1].id and not info.read_only
    tail = await store.load_branch(info.id)
    assert tail.nodes[0].id == nodes[3].id and not tail.complete
    assert {n.id for n in await store.load_tree(info.id)} == {n.id for n in nodes + side}
    with pytest.raises(DuplicateNodeError, match="imported before"):
        await store.import_tree(nodes, nodes[-1].id)


async def test_import_tree_rejects_bad_trees_and_writes_nothing(store):  # D1
    good = chain(turn(0), prefix="g")
    with pytest.raises(InvalidOperationError, match="not in the import"):
        await store.import_tree([*good, Node(id="o", parent_id="elsewhere", payload=user())], "o")
    bad_cp = Checkpoint(summary="s", first_kept_id="nowhere", tokens_before=1)
    with pytest.raises(InvalidOperationError, match="not one of its ancestors"):
        await store.import_tree(good + chain([bad_cp], prefix="c", parent=good[-1].id), "c0")
    a = Node(id="a", parent_id="b", payload=user())
    b = Node(id="b", parent_id="a", payload=assistant())
    with pytest.raises(InvalidOperationError, match="cycle"):
        await store.import_tree([*good, a, b], good[-1].id)
    with pytest.raises(InvalidOperationError, match="twice"):
        await store.import_tree([*good, good[0]], good[-1].id)
    assert await store.list_sessions() == []


async def test_list_sessions_and_shared_ancestors(store):  # T5
    sid = await seed_session(store, turns=2)
    base = await store.load_branch(sid)
    other = await store.create_session(from_node_id=base.nodes[2].id, title="from node")
    assert other.tree_id == (await store.get_session(sid)).tree_id
    listed = await store.list_sessions()
    assert [s.id for s in listed] == [sid, other.id]
    branch = await store.load_branch(other.id)
    assert branch.nodes == base.nodes[:3]
    assert branch == build_branch(base.nodes, base.nodes[2].id)


async def test_created_at_round_trips_as_utc(store):  # D3
    from datetime import datetime, timedelta, timezone

    info = await store.create_session()
    stamp = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=9)))
    node = await store.append(info.id, text_message("user", "日本語"), created_at=stamp)
    loaded = (await store.load_branch(info.id)).nodes[0]
    assert loaded.created_at == stamp and loaded.created_at.utcoffset() == timedelta(0)
    assert loaded.payload == node.payload
