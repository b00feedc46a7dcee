"""Store benchmarks on SQLite and PostgreSQL → bench/results/store.json.

1. Load for the model: `load_branch` on a checkpointed session with 2,000 and 50,000
   durable nodes and the same tail. The store reads only from the latest checkpoint's
   boundary, so the ratio 50k/2k must stay ≤ 1.5. (`load_full_branch` is timed too, to
   show what O(history) would cost.)
2. Append throughput: one writer, and 8 writer processes (one session each).
3. Commit throughput: turn + conditional checkpoint commit cycles, one writer and 8.

Run: `.venv/bin/python bench/store_bench.py [--quick]`. PostgreSQL: $CONTEXTFOLD_BENCH_PG
(default postgresql://postgres@127.0.0.1:5432/test), a throw-away schema per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

from contextfold.core.planning.plan import Plan
from contextfold.core.values.messages import Checkpoint, Node, text_message
from contextfold.core.values.tree import Branch
from contextfold.store import SqlSessionStore, open_store

PG_ADMIN = os.environ.get("CONTEXTFOLD_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
RESULTS = Path(__file__).parent / "results" / "store.json"
TAIL_TURNS = 10  # turns kept raw after the latest checkpoint (2 nodes each) ...
AFTER_TURNS = 10  # ... and turns written after it


# ---------------------------------------------------------------------- databases


def pg_url() -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{PG_ADMIN}?options=-csearch_path%3D{schema}", schema


def drop_pg(schema: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# ---------------------------------------------------------------------- history builders


def checkpointed_history(total: int, every: int = 500) -> tuple[list[Node], str]:
    """A chain of ~`total` nodes with a checkpoint every `every` nodes; the latest one keeps
    TAIL_TURNS turns raw and AFTER_TURNS turns follow it, whatever `total` is."""
    nodes: list[Node] = []
    parent: str | None = None

    def add(payload: Any) -> Node:
        nonlocal parent
        node = Node(id=str(uuid.uuid4()), parent_id=parent, payload=payload)
        nodes.append(node)
        parent = node.id
        return node

    def add_turn(i: int) -> Node:
        first = add(text_message("user", f"question {i}: " + "lorem ipsum " * 20))
        add(text_message("assistant", f"answer {i}: " + "dolor sit amet " * 30))
        return first

    body = total - 2 * AFTER_TURNS - 1
    turn = 0
    recent_users: list[Node] = []
    while len(nodes) < body:
        recent_users.append(add_turn(turn))
        turn += 1
        due = len(nodes) % every < 2 and len(recent_users) > TAIL_TURNS
        if due or len(nodes) >= body:
            keep = recent_users[-TAIL_TURNS]
            add(Checkpoint(summary=f"summary up to turn {turn}", first_kept_id=keep.id,
                           tokens_before=100_000))
    for _ in range(AFTER_TURNS):
        add_turn(turn)
        turn += 1
    return nodes, nodes[-1].id


# ---------------------------------------------------------------------- 1. load


async def bench_load(url: str, sizes: list[int], repeats: int) -> dict[str, Any]:
    """Import one session per size, then time loads of the sizes interleaved, so that drift
    in machine load (a shared machine) hits every size alike."""
    store = await open_store(url)
    out: dict[str, Any] = {}
    try:
        sessions: dict[int, tuple[str, int, float]] = {}
        for size in sizes:
            nodes, leaf = checkpointed_history(size)
            started = time.perf_counter()
            info = await store.import_tree(nodes, leaf, title=f"bench {size}")
            sessions[size] = (info.id, len(nodes), time.perf_counter() - started)
        times: dict[int, list[float]] = {size: [] for size in sizes}
        loaded: dict[int, int] = {}
        for _ in range(5):  # warm-up: connection pool, prepared statements, page cache
            for size in sizes:
                await store.load_branch(sessions[size][0])
        for _ in range(repeats):
            for size in sizes:
                t0 = time.perf_counter()
                branch = await store.load_branch(sessions[size][0])
                times[size].append(time.perf_counter() - t0)
                assert isinstance(branch, Branch) and not branch.complete
                loaded[size] = len(branch.nodes)
        for size in sizes:
            full_times = []
            for _ in range(max(3, repeats // 20)):
                t0 = time.perf_counter()
                full = await store.load_full_branch(sessions[size][0])
                full_times.append(time.perf_counter() - t0)
                assert isinstance(full, Branch) and len(full.nodes) == sessions[size][1]
            out[str(size)] = {
                "durable_nodes": sessions[size][1],
                "nodes_loaded": loaded[size],
                "load_branch_median_ms": round(statistics.median(times[size]) * 1000, 3),
                "load_branch_p90_ms": round(_p90(times[size]) * 1000, 3),
                "load_full_branch_median_ms": round(statistics.median(full_times) * 1000, 2),
                "import_seconds": round(sessions[size][2], 2),
            }
        small, large = (out[str(s)]["load_branch_median_ms"] for s in (sizes[0], sizes[-1]))
        out["ratio_large_over_small"] = round(large / small, 3)
    finally:
        await store.close()
    return out


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


# ---------------------------------------------------------------------- 2./3. throughput


def _plan_for(branch: Branch, boundary: str) -> Plan:
    from contextfold.core.models.budget import ModelCapacity, derive_budget
    from contextfold.core.values.messages import Ledger

    budget = derive_budget(ModelCapacity(model="bench", context_window=128_000,
                                         max_output=8_192))
    assert branch.leaf_id is not None
    return Plan(trigger="manual", session_leaf_id=branch.leaf_id,
                branch_revision=branch.revision, first_kept_id=boundary,
                previous_checkpoint_id=None, previous_summary=None, previous_ledger=Ledger(),
                newly_old=(), kept=(), chunks=(), tokens_before=1, kept_tokens=0,
                newly_old_tokens=0, budget=budget, summarizer_budget=budget, profile="coding")


async def _writer(url: str, session_id: str, count: int, mode: str, start_at: float
                  ) -> dict[str, Any]:
    store = await open_store(url)
    await store.load_branch(session_id)  # warm the connection pool
    await asyncio.sleep(max(0.0, start_at - time.time()))
    started = time.perf_counter()
    commit_seconds = 0.0
    for i in range(count):
        if mode == "append":
            await store.append(session_id, text_message("user", f"message {i}"))
            continue
        nodes = await store.append_many(session_id, [text_message("user", f"q{i}"),
                                                     text_message("assistant", f"a{i}")])
        branch = await store.load_branch(session_id)
        assert isinstance(branch, Branch)
        plan = _plan_for(branch, nodes[0].id)
        t0 = time.perf_counter()
        result = await store.commit_checkpoint(
            plan, Checkpoint(summary=f"s{i}", first_kept_id=nodes[0].id, tokens_before=1),
            session_id=session_id)
        commit_seconds += time.perf_counter() - t0
        assert result.committed, result.reason
    elapsed = time.perf_counter() - started
    await store.close()
    return {"seconds": elapsed, "commit_seconds": commit_seconds}


def writer_process(url: str, session_id: str, count: int, mode: str, start_at: float
                   ) -> dict[str, Any]:
    return asyncio.run(_writer(url, session_id, count, mode, start_at))


async def bench_throughput(url: str, mode: str, writers: int, per_writer: int) -> dict[str, Any]:
    store: SqlSessionStore = await open_store(url)
    sids = [(await store.create_session(title=f"{mode} {w}")).id for w in range(writers)]
    await store.close()
    start_at = time.time() + 4.0  # every process opened and warmed before the clock starts
    if writers == 1:
        results = [await _writer(url, sids[0], per_writer, mode, time.time())]
        wall = results[0]["seconds"]
    else:
        ctx = multiprocessing.get_context("spawn")
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(writers, mp_context=ctx) as pool:
            futures = [loop.run_in_executor(pool, writer_process, url, sid, per_writer, mode,
                                            start_at) for sid in sids]
            results = await asyncio.gather(*futures)
        wall = max(r["seconds"] for r in results)
    total = writers * per_writer
    row: dict[str, Any] = {"writers": writers, "operations": total,
                           "wall_seconds": round(wall, 3), "per_second": round(total / wall, 1)}
    if mode == "commit":
        row["commit_only_per_second"] = round(
            total / max(sum(r["commit_seconds"] for r in results) / writers, 1e-9), 1)
    return row


# ---------------------------------------------------------------------- main


async def run_backend(name: str, url: str, quick: bool) -> dict[str, Any]:
    sizes = [2_000, 50_000] if not quick else [2_000, 10_000]
    repeats = 200 if not quick else 40
    append_n, commit_n = (400, 100) if not quick else (100, 30)
    result: dict[str, Any] = {"load_for_model": await bench_load(url, sizes, repeats)}
    result["append"] = {
        "single_writer": await bench_throughput(url, "append", 1, append_n),
        "8_writers": await bench_throughput(url, "append", 8, append_n // 4),
    }
    result["commit"] = {
        "single_writer": await bench_throughput(url, "commit", 1, commit_n),
        "8_writers": await bench_throughput(url, "commit", 8, commit_n // 4),
    }
    print(f"{name}: {json.dumps(result, indent=1)}", flush=True)
    return result


async def main(quick: bool) -> None:
    report: dict[str, Any] = {
        "generated_by": "bench/store_bench.py" + (" --quick" if quick else ""),
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "notes": "load_branch reads the latest checkpoint's boundary..leaf only; the ratio "
                 "compares the median load time for the two history sizes with equal tails. "
                 "8-writer figures use 8 OS processes, one session each. Commit cycles are "
                 "append_many(turn) + load_branch + commit_checkpoint.",
    }
    with tempfile.TemporaryDirectory() as tmp:
        report["sqlite"] = await run_backend("sqlite", f"sqlite:///{tmp}/bench.db", quick)
    url, schema = pg_url()
    try:
        report["postgresql"] = await run_backend("postgresql", url, quick)
    finally:
        drop_pg(schema)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    asyncio.run(main(parser.parse_args().quick))
