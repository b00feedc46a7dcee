"""Retry, edit and fork only move a leaf or add a session; nothing is copied or modified."""

from __future__ import annotations

import pytest

from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import project
from contextfold.store import InvalidOperationError, NodeNotFoundError
from contextfold.store.audit.invariants import check_store, dump_tables
from tests.builders import assistant, tool_call, tool_result, turn, user

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import checkpoint_for, manual_plan, seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]


def ids(branch):
    return [n.id for n in branch.nodes]


async def _unchanged_rows(store, before):
    """Every row that existed before is still there, byte for byte (nodes are append-only)."""
    after = await dump_tables(store)
    for table in ("nodes", "leaf_moves", "trees"):
        assert set(before[table]) <= set(after[table]), table


async def test_retry_moves_leaf_to_parent_of_last_assistant(store):  # O1
    sid = await seed_session(store, turns=2, tools=1)
    before = await store.load_branch(sid)
    rows = await dump_tables(store)
    info = await store.retry(sid)
    assert info.leaf_id == before.nodes[-2].id  # the tool result before the final answer
    assert info.branch_revision == before.revision + 1
    after = await store.load_branch(sid)
    assert ids(after) == ids(before)[:-1]
    await _unchanged_rows(store, rows)
    assert len(await store.load_tree(sid)) == len(before.nodes)  # old reply still stored


async def test_retry_drops_a_checkpoint_after_the_reply_from_the_branch(store):  # O1 T1
    sid = await seed_session(store, turns=3, tools=0)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    result = await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    info = await store.retry(sid)  # skips the checkpoint at the leaf
    assert info.leaf_id == branch.nodes[-2].id
    after = await store.load_branch(sid)
    assert result.checkpoint.id not in after
    assert project(after).checkpoint is None
    assert (await check_store(store)).ok


async def test_retry_without_assistant_reply_is_refused(store):  # O1
    info = await store.create_session()
    await store.append(info.id, user())
    with pytest.raises(InvalidOperationError, match="nothing to retry"):
        await store.retry(info.id)
    assert (await store.get_session(info.id)).branch_revision == 1


async def test_edit_appends_sibling_of_last_user_message(store):  # O2
    sid = await seed_session(store, turns=2, tools=0)
    before = await store.load_branch(sid)
    last_user = before.nodes[-2]
    rows = await dump_tables(store)
    node = await store.edit(sid, user("better question"))
    assert node.parent_id == last_user.parent_id
    after = await store.load_branch(sid)
    assert ids(after) == [*ids(before)[:-2], node.id]
    assert after.revision == before.revision + 1
    await _unchanged_rows(store, rows)


async def test_edit_moves_branch_off_a_later_checkpoint(store):  # O2
    sid = await seed_session(store, turns=3, tools=0)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    cp = (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).checkpoint
    node = await store.edit(sid, user("edited"))
    after = await store.load_branch(sid)
    assert cp.id not in after and after.leaf_id == node.id
    assert project(after).checkpoint is None


async def test_edit_takes_only_user_messages(store):  # O2 C6
    sid = await seed_session(store, turns=1)
    with pytest.raises(InvalidOperationError, match="user message"):
        await store.edit(sid, assistant())


async def test_fork_shares_ancestors_and_copies_nothing(store):  # O3 T5
    sid = await seed_session(store, turns=2, tools=0)
    branch = await store.load_branch(sid)
    rows = await dump_tables(store)
    fork = await store.fork(sid, branch.nodes[1].id, title="fork")
    assert fork.tree_id == (await store.get_session(sid)).tree_id
    assert fork.leaf_id == branch.nodes[1].id and fork.branch_revision == 0
    assert ids(await store.load_branch(fork.id)) == ids(branch)[:2]
    await _unchanged_rows(store, rows)
    assert len(await store.load_tree(sid)) == len(branch.nodes)


async def test_fork_before_checkpoint_does_not_inherit_it(store):  # T5
    sid = await seed_session(store, turns=3, tools=0)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    cp = (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).checkpoint
    early = await store.fork(sid, branch.nodes[1].id)
    assert project(await store.load_branch(early.id)).checkpoint is None
    reply = await store.append(sid, user("after"))
    answer = await store.append(sid, assistant("after answer"))
    late = await store.fork(sid, answer.id)
    late_branch = await store.load_branch(late.id)
    assert project(late_branch).checkpoint.id == cp.id
    assert ids(late_branch)[-2:] == [reply.id, answer.id]


async def test_fork_refuses_checkpoints_unstable_and_foreign_nodes(store):  # O3
    sid = await seed_session(store, turns=3, tools=0)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    cp = (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).checkpoint
    with pytest.raises(InvalidOperationError, match="checkpoint"):
        await store.fork(sid, cp.id)
    with pytest.raises(InvalidOperationError, match="user message"):
        await store.fork(sid, branch.nodes[0].id)
    await store.append(sid, user("run a tool"))
    call = await store.append(sid, tool_call("c1"))
    with pytest.raises(InvalidOperationError, match="not finished"):
        await store.fork(sid, call.id)
    other = await seed_session(store, turns=1)
    foreign = (await store.load_branch(other)).leaf_id
    with pytest.raises(InvalidOperationError, match="another session tree"):
        await store.fork(sid, foreign)
    with pytest.raises(NodeNotFoundError):
        await store.fork(sid, "no-such-node")
    await store.append(sid, tool_result("c1"))
    answer = await store.append(sid, assistant("done"))
    assert (await store.fork(sid, answer.id)).leaf_id == answer.id


async def test_compacting_one_session_never_changes_a_sibling(store):  # T6
    sid = await seed_session(store, turns=3, tools=1)
    branch = await store.load_branch(sid)
    sibling = await store.fork(sid, branch.leaf_id)
    seen = project(await store.load_branch(sibling.id))
    plan = manual_plan(branch)
    assert (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).committed
    await store.append_many(sid, turn(9))
    assert project(await store.load_branch(sibling.id)) == seen
    sibling_branch = await store.load_branch(sibling.id)
    assert isinstance(sibling_branch, Branch) and sibling_branch.revision == 0
