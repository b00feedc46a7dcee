"""Damaged history opens read-only and nothing writes to it (SPEC D1-D3); bad input is refused.

Damage is made the way it happens in real life: rows written by something other than the
store (a bad import script, a partial restore, a manual fix), inserted straight into the tables.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from sqlalchemy import text, update

from contextfold.core.values.messages import Checkpoint
from contextfold.core.values.tree import Branch, DamagedBranch
from contextfold.store import (
    InvalidOperationError,
    NodeNotFoundError,
    ReadOnlySessionError,
    SessionNotFoundError,
    open_store,
)
from contextfold.store.audit.invariants import dump_tables
from contextfold.store.sql.engine import write_connection
from contextfold.store.sql.rows import payload_json
from contextfold.store.sql.schema import nodes
from tests.builders import assistant, user
from tests.damage import raw_node, set_leaf

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import checkpoint_for, manual_plan, seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]

async def assert_read_only(store, sid, kind):
    """D2: loads show the readable part; every write is refused; no row changes."""
    rows = await dump_tables(store, leases=True)
    branch = await store.load_branch(sid)
    assert isinstance(branch, DamagedBranch), branch
    assert kind in {p.kind for p in branch.problems}
    assert (await store.get_session(sid)).read_only
    assert [s.read_only for s in await store.list_sessions() if s.id == sid] == [True]
    assert isinstance(await store.load_full_branch(sid), DamagedBranch)
    healthy = [n for n in branch.readable if n.message and n.message.role == "assistant"]
    info = await store.get_session(sid)
    users = [n for n in branch.readable if n.is_user_message]
    plan = manual_plan(Branch(nodes=tuple(users)), users[0].id) if users else None
    writes = [
        lambda: store.append(sid, user("more")),
        lambda: store.append_many(sid, [user("a"), assistant("b")]),
        lambda: store.retry(sid),
        lambda: store.edit(sid, user("edited")),
        lambda: store.fork(sid, healthy[-1].id if healthy else "any"),
    ]
    if plan is not None:
        plan = dataclasses.replace(plan, session_leaf_id=info.leaf_id,
                                   branch_revision=info.branch_revision)
        writes.append(lambda: store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid))
    for write in writes:
        with pytest.raises(ReadOnlySessionError, match="read-only"):
            await write()
    assert await dump_tables(store, leases=True) == rows  # D3: nothing written
    return branch


async def test_missing_parent_opens_read_only(store):  # D1 D2 D3
    sid = await seed_session(store, turns=2, tools=0)
    info = await store.get_session(sid)
    await raw_node(store, info.tree_id, "orphan-a", "ghost", assistant("where is my parent"))
    await raw_node(store, info.tree_id, "orphan-u", "orphan-a", user("hello"))
    await raw_node(store, info.tree_id, "orphan-b", "orphan-u", assistant("reply"))
    await set_leaf(store, sid, "orphan-b")
    branch = await assert_read_only(store, sid, "missing_parent")
    assert [n.id for n in branch.readable] == ["orphan-a", "orphan-u", "orphan-b"]


async def test_parent_cycle_opens_read_only(store):  # D1 D2
    sid = await seed_session(store, turns=1)
    tree = (await store.get_session(sid)).tree_id
    await raw_node(store, tree, "cyc-a", "cyc-c", user("a"))
    await raw_node(store, tree, "cyc-b", "cyc-a", assistant("b"))
    await raw_node(store, tree, "cyc-c", "cyc-b", user("c"))
    await raw_node(store, tree, "cyc-leaf", "cyc-c", assistant("leaf"))
    await set_leaf(store, sid, "cyc-leaf")
    branch = await assert_read_only(store, sid, "cycle")
    assert [n.id for n in branch.readable][-1] == "cyc-leaf"


@pytest.mark.parametrize("body", [
    '{"kind":"message","role":"robot","parts":[]}',
    '{"kind":"message","role":"user","parts":[{"type":"hologram"}]}',
    "{not json",
])
async def test_unparseable_row_opens_read_only(store, body):  # D1 D2
    sid = await seed_session(store, turns=2, tools=0)
    info = await store.get_session(sid)
    await raw_node(store, info.tree_id, "bad", info.leaf_id, body)
    await raw_node(store, info.tree_id, "after-bad", "bad", user("next"))
    await set_leaf(store, sid, "after-bad")
    branch = await assert_read_only(store, sid, "invalid_node")
    assert [n.id for n in branch.readable] == ["after-bad"]
    assert any("payload does not parse" in p.detail for p in branch.problems)


async def test_checkpoint_keeping_a_non_ancestor_opens_read_only(store):  # D1 D2
    sid = await seed_session(store, turns=2, tools=0)
    info = await store.get_session(sid)
    side = await store.fork(sid, (await store.load_branch(sid)).nodes[1].id)
    await store.append(side.id, user("side question"))
    side_leaf = (await store.get_session(side.id)).leaf_id
    cp = Checkpoint(summary="s", first_kept_id=side_leaf, tokens_before=5)
    await raw_node(store, info.tree_id, "bad-cp", info.leaf_id, cp, kind="checkpoint",
                   first_kept_id=side_leaf)
    await set_leaf(store, sid, "bad-cp")
    await assert_read_only(store, sid, "bad_checkpoint")
    assert not (await store.get_session(side.id)).read_only  # the sibling is unaffected


async def test_parent_in_another_tree_is_a_missing_parent(store):  # D1 D2
    sid = await seed_session(store, turns=1)
    other = await seed_session(store, turns=1)
    foreign_leaf = (await store.get_session(other)).leaf_id
    tree = (await store.get_session(sid)).tree_id
    await raw_node(store, tree, "cross", foreign_leaf, user("crossing trees"))
    await set_leaf(store, sid, "cross")
    await assert_read_only(store, sid, "missing_parent")
    assert not (await store.get_session(other)).read_only


async def test_missing_leaf_opens_read_only(store):  # D1 D2
    sid = await seed_session(store, turns=1)
    await set_leaf(store, sid, "vanished")
    branch = await assert_read_only(store, sid, "missing_leaf")
    assert branch.readable == ()


async def test_modified_row_is_detected_by_its_hash(db_url, backend):  # D1 D2
    store = await open_store(db_url)
    sid = await seed_session(store, turns=2, tools=0)
    leaf = (await store.get_session(sid)).leaf_id
    async with write_connection(store.engine) as conn:
        if backend == "sqlite":
            await conn.execute(text("DROP TRIGGER nodes_no_update"))
        else:
            await conn.execute(text("ALTER TABLE nodes DISABLE TRIGGER nodes_append_only"))
        payload = json.loads(payload_json(assistant("the answer was rewritten")))
        await conn.execute(update(nodes).where(nodes.c.id == leaf)
                           .values(payload=json.dumps(payload)))
    await store.close()
    fresh = await open_store(db_url)  # a new process opening the tampered database
    branch = await assert_read_only(fresh, sid, "invalid_node")
    assert "modified after it was written" in branch.problems[0].detail
    await fresh.close()


async def test_database_refuses_updates_and_deletes_of_nodes(store):  # D3
    sid = await seed_session(store, turns=1)
    leaf = (await store.get_session(sid)).leaf_id
    for statement in (update(nodes).where(nodes.c.id == leaf).values(payload="{}"),
                      nodes.delete().where(nodes.c.id == leaf)):
        with pytest.raises(Exception, match="append-only"):
            async with write_connection(store.engine) as conn:
                await conn.execute(statement)
    assert (await store.load_branch(sid)).leaf_id == leaf


async def test_damage_before_the_boundary_is_found_by_the_full_load(store):  # D1
    sid = await seed_session(store, turns=3, tools=0)
    info = await store.get_session(sid)
    first = (await store.load_branch(sid)).nodes[0]
    # A root whose parent points into a loop: the summarised part of history is broken.
    await raw_node(store, info.tree_id, "loop-a", "loop-b", user("a"))
    await raw_node(store, info.tree_id, "loop-b", "loop-a", assistant("b"))
    await raw_node(store, info.tree_id, "new-root-child", "loop-b", user(first.message.text))
    await raw_node(store, info.tree_id, "x-answer", "new-root-child", assistant("x"))
    await raw_node(store, info.tree_id, "x-user", "x-answer", user("y"))
    await raw_node(store, info.tree_id, "x-leaf", "x-user", assistant("z"))
    cp = Checkpoint(summary="s", first_kept_id="x-user", tokens_before=1)
    await raw_node(store, info.tree_id, "x-cp", "x-leaf", cp, kind="checkpoint",
                   first_kept_id="x-user")
    await set_leaf(store, sid, "x-cp")
    tail = await store.load_branch(sid)  # O(tail): never reads the summarised part
    assert isinstance(tail, Branch) and not tail.complete
    assert [n.id for n in tail.nodes] == ["x-user", "x-leaf", "x-cp"]
    full = await store.load_full_branch(sid)
    assert isinstance(full, DamagedBranch) and full.problems[0].kind == "cycle"


async def test_bad_ids_are_clear_errors(store):  # D2
    sid = await seed_session(store, turns=1)
    for bad in ("", None, 42):
        with pytest.raises(SessionNotFoundError):
            await store.get_session(bad)
    with pytest.raises(NodeNotFoundError, match="no such node"):
        await store.create_session(from_node_id="nowhere")
    with pytest.raises(InvalidOperationError, match="JSON"):
        await store.create_session(metadata={"x": object()})
    assert len(await store.list_sessions()) == 1
    assert (await store.load_branch(sid)).leaf_id is not None
