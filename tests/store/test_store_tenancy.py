"""SPEC W1 in the store itself: `store.for_tenant(t)` scopes every session read, write, list
and lease to tenant t (the service only uses scoped stores); migration 0004 gives existing
sessions the tenant "default" and downgrades cleanly. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, select

from contextfold.core.values.messages import text_message
from contextfold.store import (
    InvalidOperationError,
    NodeNotFoundError,
    SessionNotFoundError,
    open_store,
)
from contextfold.store.sql.migrate import downgrade, upgrade
from contextfold.store.sql.schema import sessions
from tests.store_fixtures import backend, db_url, seed_session, store  # noqa: F401


async def test_w1_scoped_store_cannot_touch_another_tenants_session(store) -> None:  # noqa: F811
    acme, globex = store.for_tenant("acme"), store.for_tenant("globex")
    mine = await acme.create_session(title="acme")
    assert mine.tenant_id == "acme"
    await acme.append(mine.id, text_message("user", "q"))
    reply = await acme.append(mine.id, text_message("assistant", "a"))
    calls = [
        lambda: globex.get_session(mine.id), lambda: globex.load_branch(mine.id),
        lambda: globex.load_full_branch(mine.id), lambda: globex.load_tree(mine.id),
        lambda: globex.load_branch_page(mine.id, limit=5),
        lambda: globex.append(mine.id, text_message("user", "intruder")),
        lambda: globex.append_many(mine.id, [text_message("user", "intruder")]),
        lambda: globex.retry(mine.id), lambda: globex.edit(mine.id, text_message("user", "x")),
        lambda: globex.fork(mine.id, reply.id),
        lambda: globex.update_session_metadata(mine.id, {"x": 1}),
        lambda: globex.search_history(mine.id, "q"),
    ]
    for call in calls:
        with pytest.raises(SessionNotFoundError):
            await call()
    with pytest.raises(SessionNotFoundError):
        async with globex.compaction_lease(mine.id):
            pass
    with pytest.raises(NodeNotFoundError):  # a node of acme's tree is not globex's to branch
        await globex.create_session(from_node_id=reply.id)
    assert [s.id for s in await globex.list_sessions()] == []
    assert [s.id for s in await acme.list_sessions()] == [mine.id]
    assert (await store.get_session(mine.id)).branch_revision == 2  # nothing changed
    forked = await acme.fork(mine.id, reply.id)
    assert forked.tenant_id == "acme"
    assert {s.id for s in await store.list_sessions()} == {mine.id, forked.id}  # unscoped: all
    with pytest.raises(InvalidOperationError):
        store.for_tenant("")


async def test_w1_library_sessions_are_the_default_tenants(store) -> None:  # noqa: F811
    sid = await seed_session(store, turns=1)
    info = await store.get_session(sid)
    assert info.tenant_id == "default"
    assert [s.id for s in await store.for_tenant("default").list_sessions()] == [sid]
    assert await store.for_tenant("acme").list_sessions() == []


async def test_w2_migration_0004_backfills_default_and_downgrades(db_url) -> None:  # noqa: F811
    opened = await open_store(db_url)
    try:
        old = await opened.create_session(title="before tenants")
        await downgrade(opened.engine, _before_tenants())
        async with opened.engine.connect() as conn:
            columns = await conn.run_sync(
                lambda c: [col["name"] for col in inspect(c).get_columns("sessions")])
        assert "tenant_id" not in columns
        await upgrade(opened.engine)
        assert (await opened.get_session(old.id)).tenant_id == "default"
        async with opened.engine.connect() as conn:
            tenants = (await conn.execute(select(sessions.c.tenant_id))).scalars().all()
        assert tenants == ["default"]
        _, token = await opened.create_token("acme")
        assert await opened.tenant_for_token(token) == "acme"
        assert await opened.tenant_for_token(token + "x") is None
    finally:
        await opened.close()


def _before_tenants() -> str:
    """The revision before the tenants migration (its number depends on landing order)."""
    from alembic.script import ScriptDirectory

    from contextfold.store.sql.migrate import _config

    script = ScriptDirectory.from_config(_config())
    tenants = next(r for r in script.walk_revisions() if r.path.endswith("_tenants.py"))
    assert isinstance(tenants.down_revision, str)
    return tenants.down_revision


async def test_w1_another_tenants_import_and_nodes_are_not_found(store) -> None:  # noqa: F811
    """W1: the import duplicate check and the fork look-up see only the caller's trees: a
    file another tenant imported imports fine (and twice is still a duplicate for the same
    tenant), and forking with another tenant's node id fails exactly like an unknown id."""
    from contextfold.core.values.messages import Node, utc_now
    from contextfold.store import DuplicateNodeError

    now = utc_now()
    tree = [Node(id="pi000001", parent_id=None, created_at=now,
                 payload=text_message("user", "shared file")),
            Node(id="pi000002", parent_id="pi000001", created_at=now,
                 payload=text_message("assistant", "answer"))]
    acme, globex = store.for_tenant("acme"), store.for_tenant("globex")
    await acme.import_tree(tree, "pi000002")
    theirs = await globex.import_tree(tree, "pi000002")  # not "already stored" for globex
    assert theirs.tenant_id == "globex"
    with pytest.raises(DuplicateNodeError):
        await globex.import_tree(tree, "pi000002")
    with pytest.raises(DuplicateNodeError):
        await store.import_tree(tree, "pi000002")  # unscoped (the CLI): every tree counts

    mine = await acme.create_session()
    await acme.append(mine.id, text_message("user", "q"))
    secret = await acme.append(mine.id, text_message("assistant", "acme's reply"))
    other = await globex.create_session()
    await globex.append(other.id, text_message("user", "q"))
    errors = []
    for node_id in (secret.id, "0193-never-stored"):
        with pytest.raises(NodeNotFoundError) as caught:
            await globex.fork(other.id, node_id)
        errors.append(str(caught.value).replace(node_id, "<id>"))
    assert errors[0] == errors[1]  # a foreign id says exactly what an unknown one says
    # Within one tenant, a node of another of its own trees is still named as such.
    with pytest.raises(InvalidOperationError, match="another session tree"):
        await acme.fork((await acme.create_session()).id, secret.id)
