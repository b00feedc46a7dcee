"""Backends and helpers for the store tests: every test gets its own database.

SQLite: a fresh file under tmp_path. PostgreSQL: a fresh schema in the `test` database, put
first on `search_path` through the URL, dropped afterwards. Import the fixtures into a test
module (`from tests.store_fixtures import backend, db_url, store`).

Also holds the worker functions that the multi-process tests run in spawned processes
(they must be importable by module path).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import Plan
from contextfold.core.values.messages import Checkpoint, Ledger, Node, text_message
from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import raw_start
from contextfold.store import (
    SessionBusyError,
    SqlSessionStore,
    StaleBranchError,
    StoreError,
    open_store,
)
from contextfold.store.audit.invariants import payload_digest
from tests.builders import tool_call, tool_result, turn

PG_ADMIN = os.environ.get("CONTEXTFOLD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgresql")
CAPACITY = ModelCapacity(model="test-model", context_window=32_000, max_output=4_096)
BUDGET = derive_budget(CAPACITY)


# ---------------------------------------------------------------------- databases


def new_pg_schema() -> str:
    """Create an empty schema and return a URL whose connections use it."""
    schema = f"cf_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{PG_ADMIN}?options=-csearch_path%3D{schema}"


def drop_pg_schema(url: str) -> None:
    schema = url.rsplit("%3D", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def new_db_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / f'store-{uuid.uuid4().hex[:8]}.db'}"
    return new_pg_schema()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    url = new_db_url(backend, tmp_path)
    yield url
    if backend == "postgresql":
        drop_pg_schema(url)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[SqlSessionStore]:
    async with await open_store(db_url) as opened:
        yield opened


# ---------------------------------------------------------------------- plans


def manual_plan(branch: Branch, first_kept_id: str | None = None, *,
                boundary_index: int = -1) -> Plan:
    """A plan with the boundary at a user message of the raw region (default: the latest).

    A hand-made stand-in for the planner where a test needs one exact boundary.
    """
    start = raw_start(branch)
    users = [n for n in branch.nodes[start:] if n.is_user_message]
    if first_kept_id is None and users:
        first_kept_id = users[boundary_index].id
    cut = branch.index[first_kept_id] if first_kept_id in branch else len(branch.nodes)
    previous = branch.latest_checkpoint
    prev_cp = previous.checkpoint if previous is not None else None
    assert branch.leaf_id is not None
    return Plan(
        trigger="manual",
        session_leaf_id=branch.leaf_id,
        branch_revision=branch.revision,
        first_kept_id=first_kept_id,
        previous_checkpoint_id=previous.id if previous else None,
        previous_summary=prev_cp.summary if prev_cp else None,
        previous_ledger=prev_cp.ledger if prev_cp else Ledger(),
        newly_old=tuple(n for n in branch.nodes[start:cut] if n.message is not None),
        kept=tuple(n for n in branch.nodes[cut:] if n.message is not None),
        chunks=(),
        tokens_before=1000,
        kept_tokens=100,
        newly_old_tokens=900,
        budget=BUDGET,
        summarizer_budget=BUDGET,
        profile="coding",
        previous_first_kept_id=prev_cp.first_kept_id if prev_cp else None,
    )


def checkpoint_for(plan: Plan, summary: str = "summary of earlier work") -> Checkpoint:
    return Checkpoint(summary=summary, first_kept_id=plan.first_kept_id,
                      tokens_before=plan.tokens_before)


def real_plan(branch: Branch) -> Plan | None:
    """A manual compaction plan from the real planner, or None for a no-op."""
    from contextfold.core.planning.planner import plan_compaction

    result = plan_compaction(branch, BUDGET, "manual", capacity=CAPACITY)
    return None if result.is_noop else result  # type: ignore[return-value]


def make_checkpoint(plan: Plan, summary: str) -> Checkpoint:
    """The checkpoint the runtime would build for `plan` (the real `build_checkpoint`).

    No fallback: if the planner does not import, the store tests fail rather than
    silently testing a hand-made plan (issue 14).
    """
    from contextfold.core.planning.planner import build_checkpoint

    return build_checkpoint(plan, summary, summarizer="test")


async def seed_session(store: SqlSessionStore, turns: int = 3, tools: int = 1) -> str:
    info = await store.create_session(title="seeded")
    for i in range(turns):
        await store.append_many(info.id, turn(i, tools=tools))
    return info.id


def node_ids(nodes: list[Node] | tuple[Node, ...]) -> list[str]:
    return [n.id for n in nodes]


# ---------------------------------------------------------------------- worker processes


def concurrency_worker(url: str, worker: int, session_ids: list[str], ops: int,
                       seed: int) -> dict[str, Any]:
    """One OS process of the concurrency test: a random mix of every write operation."""
    return asyncio.run(_concurrency_worker(url, worker, session_ids, ops, seed))


async def _concurrency_worker(url: str, worker: int, session_ids: list[str], ops: int,
                              seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    store = await open_store(url)
    acks: dict[str, str] = {}
    counts: dict[str, int] = {}

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    sessions = list(session_ids)
    try:
        for i in range(ops):
            sid = rng.choice(sessions[:3]) if rng.random() < 0.85 else rng.choice(sessions)
            roll = rng.random()
            tag = f"w{worker}-op{i}"
            try:
                if roll < 0.45:
                    leaf = (await store.get_session(sid)).leaf_id if rng.random() < 0.3 else None
                    msg = text_message("user" if rng.random() < 0.5 else "assistant", tag)
                    node = await store.append(sid, msg, expected_leaf_id=leaf)
                    acks[node.id] = payload_digest(msg)
                    count("append")
                elif roll < 0.6:
                    msgs = [text_message("user", f"{tag} q"), tool_call(f"c-{tag}"),
                            tool_result(f"c-{tag}", f"{tag} out"),
                            text_message("assistant", f"{tag} a")]
                    for node in await store.append_many(sid, msgs):
                        acks[node.id] = payload_digest(node.payload)
                    count("append_many")
                elif roll < 0.85:
                    await _compact(store, sid, rng, count, use_lease=rng.random() < 0.7)
                elif roll < 0.9:
                    await store.retry(sid)
                    count("retry")
                elif roll < 0.95:
                    msg = text_message("user", f"{tag} edited")
                    node = await store.edit(sid, msg)
                    acks[node.id] = payload_digest(msg)
                    count("edit")
                else:
                    branch = await store.load_branch(sid)
                    assert isinstance(branch, Branch)
                    candidates = [n for n in branch.nodes if n.message is not None
                                  and n.message.role == "assistant" and not n.message.tool_calls]
                    if candidates:
                        info = await store.fork(sid, rng.choice(candidates).id)
                        sessions.append(info.id)
                        count("fork")
            except StaleBranchError:
                count("stale_append")
            except SessionBusyError:
                count("busy")
            except StoreError as exc:  # e.g. nothing to retry/edit on an emptied branch
                count(f"refused_{type(exc).__name__}")
    finally:
        await store.close()
    return {"acks": acks, "counts": counts, "sessions": sessions}


async def _compact(store: SqlSessionStore, sid: str, rng: random.Random, count: Any,
                   *, use_lease: bool) -> None:
    """Plan, 'summarise' slowly, commit: the window in which others move the branch."""
    async def run() -> None:
        branch = await store.load_branch(sid)
        assert isinstance(branch, Branch), branch
        plan = real_plan(branch)
        count("plans_by_planner")
        if plan is None:
            count("noop")
            return
        await asyncio.sleep(rng.uniform(0.005, 0.06))
        checkpoint = make_checkpoint(plan, f"summary at {time.time()}")
        result = await store.commit_checkpoint(plan, checkpoint, session_id=sid)
        count("commit" if result.committed else "stale_commit")

    if use_lease:
        async with store.compaction_lease(sid, ttl=10):
            await run()
    else:
        await run()


def crash_worker(url: str, session_id: str, marker: str, point: str) -> None:
    """Start a commit and stop at `point` (writing `marker`) until the parent kills us."""
    async def main() -> None:
        store = await open_store(url)
        branch = await store.load_branch(session_id)
        assert isinstance(branch, Branch)
        plan = manual_plan(branch)

        async def hook(step: str) -> None:
            if step == point:
                Path(marker).write_text(step)
                await asyncio.sleep(120)

        store._step_hook = hook
        await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=session_id)

    asyncio.run(main())



def first_open_worker(url: str, path: str) -> str:
    """One of several processes importing the same file into a database nobody created yet
    (issue 10: migrations on a new SQLite file race). Returns 'imported' or 'duplicate'."""
    return asyncio.run(_first_open_worker(url, path))


async def _first_open_worker(url: str, path: str) -> str:
    from contextfold.formats import import_file
    from contextfold.store import DuplicateNodeError

    result = import_file(path)
    store = await open_store(url)
    try:
        await store.import_tree(result.nodes, result.leaf_id, title="race")
        return "imported"
    except DuplicateNodeError:
        return "duplicate"
    finally:
        await store.close()
