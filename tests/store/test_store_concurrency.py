"""Reliability under real concurrency: 8 OS processes, crashes, and a deliberately faulty store.

Every run ends with the invariant checker (`contextfold.store.audit.invariants`), which must also
be shown to catch the faults it exists for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import signal
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import pytest
from sqlalchemy import delete, text, update

from contextfold.store import SqlSessionStore, open_store
from contextfold.store.audit.invariants import (
    check_store,
    dump_tables,
    payload_digest,
    take_snapshot,
)
from contextfold.store.sql.engine import write_connection
from contextfold.store.sql.schema import nodes
from tests.builders import user

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import (  # noqa: E402
    checkpoint_for,
    concurrency_worker,
    crash_worker,
    manual_plan,
    seed_session,
)

pytest_plugins = ["tests.store_fixtures"]

WORKERS = 8
OPS_PER_WORKER = 60


@pytest.mark.slow
async def test_eight_processes_keep_every_invariant(db_url, backend):  # C1 C2 C3 C6 O1 O2 O3 T1 T6
    store = await open_store(db_url)
    sids = [await seed_session(store, turns=2, tools=1) for _ in range(3)]
    snapshots = [await take_snapshot(store)]
    ctx = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(WORKERS, mp_context=ctx) as pool:
        futures = [
            loop.run_in_executor(pool, concurrency_worker, db_url, w, sids, OPS_PER_WORKER,
                                 1000 + w)
            for w in range(WORKERS)
        ]
        while not all(f.done() for f in futures):
            await asyncio.sleep(0.5)
            snapshots.append(await take_snapshot(store))  # for "never updated or deleted"
        results = await asyncio.gather(*futures)
    acks: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for result in results:
        acks.update(result["acks"])
        counts.update(result["counts"])
    report = await check_store(store, acknowledged=acks, snapshots=snapshots)
    print(f"\n[{backend}] operations: {dict(sorted(counts.items()))}")
    print(f"[{backend}] {report}  snapshots={len(snapshots)}")
    await store.close()
    assert report.ok, str(report)
    assert sum(counts.values()) >= WORKERS * OPS_PER_WORKER
    assert counts["commit"] >= 3, counts  # contention makes most commits stale, by design
    assert counts["stale_commit"] >= 1, counts  # the conditional commit really was exercised
    assert counts["append"] + counts["append_many"] >= 100, counts
    assert counts["retry"] and counts["edit"] and counts["fork"], counts
    assert report.counts["acknowledged"] == len(acks) >= 150


class StaleCommittingStore(SqlSessionStore):
    """A broken store that commits without re-checking the leaf and revision."""

    _guard_commit = False


async def test_checker_catches_a_stale_commit(db_url):  # C2 C3
    good = await open_store(db_url)
    sid = await seed_session(good, turns=3)
    plan = manual_plan(await good.load_branch(sid))
    await good.append(sid, user("written while summarising"))
    assert (await good.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)).status == (
        "stale")
    assert (await check_store(good)).ok
    broken = StaleCommittingStore(good.engine)
    result = await broken.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
    assert result.status == "committed"
    report = await check_store(good)
    assert not report.ok
    assert any("stale commit" in p for p in report.problems), report
    await good.close()


async def test_checker_catches_updates_deletes_and_lost_appends(db_url, backend):  # D3 C6
    store = await open_store(db_url)
    sid = await seed_session(store, turns=2)
    acked = await store.append(sid, user("acknowledged"))
    acks = {acked.id: payload_digest(acked.payload)}
    first = await take_snapshot(store)
    assert (await check_store(store, acknowledged=acks, snapshots=[first])).ok
    branch = await store.load_branch(sid)
    async with write_connection(store.engine) as conn:  # tamper, bypassing the triggers
        if backend == "sqlite":
            await conn.execute(text("DROP TRIGGER nodes_no_update"))
            await conn.execute(text("DROP TRIGGER nodes_no_delete"))
        else:
            await conn.execute(text("ALTER TABLE nodes DISABLE TRIGGER nodes_append_only"))
        await conn.execute(update(nodes).where(nodes.c.id == branch.nodes[0].id)
                           .values(payload='{"kind":"message","role":"user","parts":[]}'))
        await conn.execute(delete(nodes).where(nodes.c.id == acked.id))
    report = await check_store(store, acknowledged=acks, snapshots=[first])
    text_report = "\n".join(report.problems)
    assert "modified after it was written" in text_report
    assert f"node {branch.nodes[0].id} was modified" in text_report
    assert f"node {acked.id} was deleted" in text_report
    assert f"acknowledged append {acked.id} is missing" in text_report
    await store.close()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["inserted", "moved"])
async def test_sigkill_during_commit_leaves_store_consistent(db_url, point):  # C4 D3
    store = await open_store(db_url)
    sid = await seed_session(store, turns=3)
    rows = await dump_tables(store)
    marker = f"{db_url.rsplit('/', 1)[-1][:40].replace('?', '_')}-{point}.marker"
    marker_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cf-{os.getpid()}-{marker}")
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=crash_worker, args=(db_url, sid, marker_path, point))
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker_path):
            assert proc.is_alive() and time.monotonic() < deadline, "worker never got there"
            await asyncio.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # mid-transaction: checkpoint inserted, not committed
        proc.join(10)
    finally:
        if proc.is_alive():
            proc.kill()
        if os.path.exists(marker_path):
            os.remove(marker_path)
    assert proc.exitcode == -signal.SIGKILL
    assert await dump_tables(store) == rows
    report = await check_store(store)
    assert report.ok, str(report)
    plan = manual_plan(await store.load_branch(sid))
    result = await asyncio.wait_for(
        store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid), 30)
    assert result.committed
    await store.close()


async def test_concurrent_appends_in_one_process_are_serialised(store):  # C1 C2
    sid = await seed_session(store, turns=1)
    before = await store.get_session(sid)
    made = await asyncio.gather(*(store.append(sid, user(f"m{i}")) for i in range(20)))
    after = await store.get_session(sid)
    assert after.branch_revision == before.branch_revision + 20
    branch = await store.load_branch(sid)
    assert {n.id for n in made} <= {n.id for n in branch.nodes}  # one chain, none lost
    assert (await check_store(store)).ok
    replaced = dataclasses.replace(manual_plan(branch))
    assert (await store.commit_checkpoint(replaced, checkpoint_for(replaced),
                                          session_id=sid)).committed
