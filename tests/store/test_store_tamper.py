"""Tamper evidence (issue 10): chained digests, no REPLACE / TRUNCATE, per-tree node ids.

The attacks are made the way an outsider with database access would: raw SQL, triggers
dropped, hashes recomputed with the store's own formulas.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from sqlalchemy import select, text, update
from typer.testing import CliRunner

from contextfold.cli.app import app
from contextfold.core.values.tree import Branch, DamagedBranch
from contextfold.store import (
    DuplicateNodeError,
    InvalidOperationError,
    ReadOnlySessionError,
    open_store,
)
from contextfold.store.audit.invariants import check_store
from contextfold.store.sql.engine import read_connection, write_connection
from contextfold.store.sql.migrate import current_revision, downgrade, head_revision, upgrade
from contextfold.store.sql.rows import chain_digest, content_hash
from contextfold.store.sql.schema import nodes
from tests.builders import chain, turn, user

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import checkpoint_for, manual_plan, seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]

FORGED = '{"kind":"message","parts":[{"text":"forged","type":"text"}],"role":"user"}'


async def _drop_update_guard(conn, backend: str) -> None:
    if backend == "sqlite":
        await conn.execute(text("DROP TRIGGER IF EXISTS nodes_no_update"))
    else:
        await conn.execute(text("ALTER TABLE nodes DISABLE TRIGGER nodes_append_only"))


async def _forge(store, backend, node, *, recompute_chain: bool) -> None:
    """Rewrite one node's payload with a recomputed content hash (and chain digest)."""
    async with write_connection(store.engine) as conn:
        await _drop_update_guard(conn, backend)
        row = (await conn.execute(select(nodes).where(nodes.c.id == node.id))).mappings().one()
        parent_chain = (await conn.execute(select(nodes.c.chain_hash).where(
            nodes.c.tree_id == row["tree_id"], nodes.c.id == row["parent_id"]))
        ).scalar_one_or_none()
        digest = content_hash(node.id, node.parent_id, row["created_at"], FORGED)
        # A forger who recomputes the hash fixes the role column too (it is checked
        # against the payload): what is left to catch it is the chain.
        values = {"payload": FORGED, "content_hash": digest, "role": "user"}
        if recompute_chain:
            values["chain_hash"] = chain_digest(parent_chain, digest)
        await conn.execute(update(nodes).where(nodes.c.id == node.id).values(**values))


@pytest.mark.parametrize("recompute_chain", [False, True])
async def test_rewritten_node_with_recomputed_hash_is_detected(store, backend, recompute_chain):
    sid = await seed_session(store, turns=2, tools=0)
    branch = await store.load_branch(sid)
    victim = branch.nodes[1]  # has a child: recomputing its own chain breaks the child's
    await _forge(store, backend, victim, recompute_chain=recompute_chain)
    fresh = await open_store(store.engine.url.render_as_string(hide_password=False))
    try:
        loaded = await fresh.load_branch(sid)
        assert isinstance(loaded, DamagedBranch)
        assert any("chain digest mismatch" in p.detail for p in loaded.problems)
        assert (await fresh.get_session(sid)).read_only
        report = await check_store(fresh, check_projections=False)
        assert any("chain digest mismatch" in p for p in report.problems), report
    finally:
        await fresh.close()


async def test_sqlite_insert_or_replace_is_refused_from_any_client(tmp_path):
    path = tmp_path / "r.db"
    store = await open_store(str(path))
    sid = await seed_session(store, turns=1, tools=0)
    leaf = (await store.get_session(sid)).leaf_id
    await store.close()
    # A plain sqlite3 client without contextfold's pragmas: the BEFORE INSERT trigger.
    with sqlite3.connect(path) as raw:
        for statement in (
            "INSERT OR REPLACE INTO nodes SELECT * FROM nodes WHERE id = ?",
            "REPLACE INTO nodes SELECT * FROM nodes WHERE id = ?",
        ):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                raw.execute(statement, (leaf,))
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            raw.execute("INSERT OR REPLACE INTO leaf_moves SELECT * FROM leaf_moves "
                        "WHERE session_id = ?", (sid,))
    store = await open_store(str(path))
    try:  # through the store's own engine (recursive triggers on) as well
        async with read_connection(store.engine) as conn:
            assert (await conn.execute(text("PRAGMA recursive_triggers"))).scalar() == 1
        with pytest.raises(Exception, match="append-only"):
            async with write_connection(store.engine) as conn:
                await conn.execute(text("INSERT OR REPLACE INTO nodes SELECT * FROM nodes "
                                        "WHERE id = :i"), {"i": leaf})
        assert isinstance(await store.load_branch(sid), Branch)
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_postgres_truncate_is_refused(store):
    sid = await seed_session(store, turns=1, tools=0)
    for table in ("nodes", "leaf_moves"):
        with pytest.raises(Exception, match="append-only"):
            async with write_connection(store.engine) as conn:
                await conn.execute(text(f"TRUNCATE {table}"))
    assert isinstance(await store.load_branch(sid), Branch)


async def test_unrelated_trees_may_share_node_ids(store):
    """Pi ids are 8 hex characters: two unrelated sessions can share one."""
    first = chain([*turn(0, tools=0)], prefix="abcd")
    other = chain([user("a different session"), *turn(1, tools=0)[1:]], prefix="abcd")
    assert first[0].id == other[0].id and first[0] != other[0]
    one = await store.import_tree(first, first[-1].id, title="one")
    two = await store.import_tree(other, other[-1].id, title="two")
    assert one.tree_id != two.tree_id
    b1, b2 = await store.load_branch(one.id), await store.load_branch(two.id)
    assert isinstance(b1, Branch) and isinstance(b2, Branch)
    assert b1.nodes == tuple(first) and b2.nodes == tuple(other)
    await store.append(two.id, user("goes on"))
    assert (await store.load_branch(one.id)).nodes == tuple(first)
    with pytest.raises(DuplicateNodeError, match="imported before"):
        await store.import_tree(first, first[-1].id)  # the same content is a re-import
    with pytest.raises(InvalidOperationError, match="2 session trees"):
        await store.create_session(from_node_id=first[0].id)
    assert (await check_store(store)).ok


async def test_migration_0002_backfills_the_chain(store):
    sid = await seed_session(store, turns=3)
    before = await store.load_full_branch(sid)
    await downgrade(store.engine, "0001")
    await upgrade(store.engine)
    async with read_connection(store.engine) as conn:
        assert await conn.run_sync(current_revision) == head_revision()
    fresh = await open_store(store.engine.url.render_as_string(hide_password=False))
    try:
        after = await fresh.load_full_branch(sid)
        assert isinstance(after, Branch) and after.nodes == before.nodes
        await fresh.append(sid, user("after the upgrade"))
        assert (await check_store(fresh)).ok
    finally:
        await fresh.close()


async def _checkpointed(store) -> tuple[str, Branch]:
    sid = await seed_session(store, turns=4, tools=0)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    result = await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    assert result.committed
    await store.append(sid, user("after the checkpoint"))
    tail = await store.load_branch(sid)
    assert isinstance(tail, Branch) and not tail.complete
    return sid, tail


async def test_damage_in_summarised_history_is_reported_one_way(store, backend, db_url):  # D2
    sid, tail = await _checkpointed(store)
    full = await store.load_full_branch(sid)
    summarised = next(n for n in full.nodes if n.id not in {m.id for m in tail.nodes}
                      and n.parent_id is not None)
    await _forge(store, backend, summarised, recompute_chain=False)
    fresh = await open_store(db_url)
    try:
        assert isinstance(await fresh.load_branch(sid), Branch)  # still readable (D2)
        assert (await fresh.get_session(sid)).read_only
        assert [s.read_only for s in await fresh.list_sessions() if s.id == sid] == [True]
        for write in (lambda: fresh.append(sid, user("more")),
                      lambda: fresh.append_many(sid, [user("a")]),
                      lambda: fresh.retry(sid),
                      lambda: fresh.edit(sid, user("edited"))):
            with pytest.raises(ReadOnlySessionError, match="chain digest mismatch"):
                await write()
    finally:
        await fresh.close()
    def cli(*args: str):  # the CLI runs its own event loop: give it a thread
        return asyncio.to_thread(CliRunner().invoke, app, [*args, "--db", db_url])

    shown = await cli("show", sid, "--json")
    assert shown.exit_code == 0, shown.output
    payload = json.loads(shown.stdout)
    assert payload["read_only"] is True
    assert any("chain digest mismatch" in p for p in payload["problems"])
    human = await cli("show", sid)
    assert "read-only" in human.output
    projected = await cli("project", sid, "--json")
    assert projected.exit_code == 2 and "read-only" in projected.stdout


async def test_verify_checks_the_whole_tree_and_the_recorded_head(store, backend, db_url):
    sid, _ = await _checkpointed(store)

    def cli(*args: str):
        return asyncio.to_thread(CliRunner().invoke, app, [*args, "--db", db_url])

    sound = await cli("verify", sid, "--json")
    assert sound.exit_code == 0, sound.output
    report = json.loads(sound.stdout)
    assert report["ok"] and report["problems"] == [] and report["nodes"] >= 10
    head = report["heads"][sid]
    assert len(head) == 64
    assert (await cli("verify", sid, "--expect", head)).exit_code == 0
    # A consistent rewrite of the leaf (content and chain recomputed, no child to betray
    # it) is invisible inside the database; the head recorded elsewhere still catches it.
    leaf = (await store.load_branch(sid)).nodes[-1]
    await _forge(store, backend, leaf, recompute_chain=True)
    rewritten = await cli("verify", sid, "--expect", head, "--json")
    assert rewritten.exit_code == 1
    problems = json.loads(rewritten.stdout)["problems"]
    assert any("was rewritten" in p for p in problems)
    # The forger left the leaf's full-text entry as it was: verify's derived-table check
    # sees that too (a forger must rewrite the recall index as well to hide).
    assert any("recall entry" in p for p in problems)
    # A rewrite further up breaks the chain: found without any recorded head.
    middle = (await store.load_full_branch(sid)).nodes[3]
    await _forge(store, backend, middle, recompute_chain=True)
    damaged = await cli("verify", sid, "--json")
    assert damaged.exit_code == 1
    assert any("chain digest mismatch" in p for p in json.loads(damaged.stdout)["problems"])
    missing = await cli("verify", "no-such-session", "--json")
    assert missing.exit_code == 2
