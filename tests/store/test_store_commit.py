"""The conditional commit (SPEC C1-C4) and the compaction lease (U4)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest

from contextfold.core.values.messages import Checkpoint
from contextfold.store import InvalidOperationError, SessionBusyError, SessionNotFoundError
from contextfold.store.audit.invariants import check_store, dump_tables
from tests.builders import assistant, tool_call, tool_result, turn, user

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import checkpoint_for, manual_plan, seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]


async def _stale(store, sid, plan, match):
    rows = await dump_tables(store)
    result = await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    assert result.status == "stale" and result.checkpoint is None
    assert match in result.reason
    assert result.session == await store.get_session(sid)  # the real state, to reload
    assert await dump_tables(store) == rows
    return result


async def test_commit_is_stale_after_an_append(store):  # C2 C3
    sid = await seed_session(store, turns=3)
    plan = manual_plan(await store.load_branch(sid))
    await store.append(sid, user("meanwhile"))
    await _stale(store, sid, plan, "moved while summarising")


async def test_commit_is_stale_when_only_the_revision_moved(store):  # C1 C2
    sid = await seed_session(store, turns=3)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    await store.retry(sid)
    await store.append(sid, branch.nodes[-1].payload)  # different node, same content
    leaf_now = (await store.get_session(sid)).leaf_id
    plan_same_leaf = dataclasses.replace(plan, session_leaf_id=leaf_now)
    await _stale(store, sid, plan_same_leaf, "revision")


async def test_second_commit_of_the_same_plan_is_stale(store):  # C2 C3
    sid = await seed_session(store, turns=3)
    plan = manual_plan(await store.load_branch(sid))
    assert (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).committed
    await _stale(store, sid, plan, "moved while summarising")


async def test_commit_on_unstable_branch_is_stale(store):  # C2 A2
    sid = await seed_session(store, turns=2)
    await store.append(sid, user("go"))
    await store.append(sid, tool_call("open"))
    plan = manual_plan(await store.load_branch(sid), boundary_index=-2)
    await _stale(store, sid, plan, "not stable")
    await store.append(sid, tool_result("open"))
    await store.append(sid, assistant("ok"))
    plan = manual_plan(await store.load_branch(sid), boundary_index=-2)
    assert (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).committed


async def test_commit_with_boundary_off_the_branch_is_stale(store):  # C2
    sid = await seed_session(store, turns=3)
    other = await seed_session(store, turns=2)
    foreign = (await store.load_branch(other)).nodes[0].id
    plan = dataclasses.replace(manual_plan(await store.load_branch(sid)), first_kept_id=foreign)
    await _stale(store, sid, plan, "not on the current branch")


async def test_commit_validates_its_arguments(store):  # C2
    sid = await seed_session(store, turns=3)
    plan = manual_plan(await store.load_branch(sid))
    wrong = Checkpoint(summary="s", first_kept_id=None, tokens_before=1)
    with pytest.raises(InvalidOperationError, match="boundary"):
        await store.commit_checkpoint(plan, wrong, session_id=sid)
    with pytest.raises(InvalidOperationError, match="Checkpoint"):
        await store.commit_checkpoint(plan, user(), session_id=sid)
    with pytest.raises(SessionNotFoundError):
        await store.commit_checkpoint(plan, checkpoint_for(plan), session_id="missing")


async def test_successive_checkpoints_project_only_the_latest(store):  # T4 C5
    sid = await seed_session(store, turns=3)
    plan = manual_plan(await store.load_branch(sid))
    first = await store.commit_checkpoint(plan, checkpoint_for(plan, "one"), session_id=sid)
    await store.append_many(sid, turn(7))
    branch = await store.load_branch(sid)
    assert branch.revision == first.session.branch_revision + 1  # C5: what we commit next
    plan2 = manual_plan(branch)
    second = await store.commit_checkpoint(plan2, checkpoint_for(plan2, "two"), session_id=sid)
    assert second.committed
    tail = await store.load_branch(sid)
    assert tail.nodes[0].id == plan2.first_kept_id
    assert [n.id for n in tail.nodes if n.checkpoint] == [second.checkpoint.id]
    assert (await check_store(store)).ok


@pytest.mark.parametrize("point", ["locked", "checked", "inserted", "moved"])
async def test_cancelled_commit_leaves_no_trace(store, point):  # C4
    sid = await seed_session(store, turns=3)
    plan = manual_plan(await store.load_branch(sid))
    rows = await dump_tables(store)
    reached = asyncio.Event()

    async def hook(step: str) -> None:
        if step == point:
            reached.set()
            await asyncio.sleep(60)

    store._step_hook = hook
    task = asyncio.create_task(
        store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid))
    await asyncio.wait_for(reached.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store._step_hook = None
    assert await dump_tables(store) == rows
    # The store is still usable and the same plan can still commit.
    assert (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).committed


async def test_lease_is_exclusive_and_released(store):  # U4
    sid = await seed_session(store, turns=1)
    async with store.compaction_lease(sid, ttl=30):
        assert await store.lease_holder(sid) is not None
        with pytest.raises(SessionBusyError, match="being compacted"):
            async with store.compaction_lease(sid, ttl=30):
                pass
    assert await store.lease_holder(sid) is None
    async with store.compaction_lease(sid, ttl=30):
        pass


async def test_lease_expires_and_is_renewed_while_held(store, monkeypatch):  # U4
    # No real-clock margins: wait until the holder has renewed three times (each ttl/3),
    # i.e. until a lease that was not renewed would have expired, then check it is still held.
    from contextfold.store.sql import lease as lease_module

    sid = await seed_session(store, turns=1)
    renewals: list[int] = []
    renewed = asyncio.Event()
    original = lease_module.write_connection

    @contextlib.asynccontextmanager
    async def counting(engine):
        async with original(engine) as conn:
            yield conn
        renewals.append(1)
        if len(renewals) >= 4:  # the claim, then three renewals
            renewed.set()

    monkeypatch.setattr(lease_module, "write_connection", counting)
    async with store.compaction_lease(sid, ttl=0.6):
        await asyncio.wait_for(renewed.wait(), timeout=60)
        with pytest.raises(SessionBusyError):
            async with store.compaction_lease(sid, ttl=0.6):
                pass
    monkeypatch.setattr(lease_module, "write_connection", original)
    # A crashed holder (never released, never renewed) stops blocking after its ttl.
    await store._leases.claim(sid, "crashed-worker", 0.3)
    with pytest.raises(SessionBusyError, match="crashed-worker"):
        await store._leases.claim(sid, "me", 5)
    await asyncio.sleep(0.5)  # past the ttl: a loaded machine only makes this later (safe)
    async with store.compaction_lease(sid, ttl=5):
        pass


async def test_lease_released_when_compaction_is_cancelled(store):  # U4 C4
    sid = await seed_session(store, turns=1)
    entered = asyncio.Event()

    async def compacting() -> None:
        async with store.compaction_lease(sid, ttl=30):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(compacting())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.lease_holder(sid) is None


async def test_lease_on_unknown_session(store):  # U4
    with pytest.raises(SessionNotFoundError):
        async with store.compaction_lease("missing"):
            pass
