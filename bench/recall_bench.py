"""Recall benchmark (SPEC L1): search latency on a 100,000-message session and index size per
message, on SQLite and PostgreSQL → bench/results/recall.json.

The session is a synthetic research session built through the public store API
(`append_many`, 1,000 messages a call: each call is one transaction that also indexes its
messages, as every append does). Every user message names a Zotero key and a DOI or a file
path, one turn in ten is in Japanese, tool results carry 300–1,500 characters of text. A
sibling branch (retry) and a fork with their own messages sit in the same tree, so every
query also pays for the branch confinement (L4).

Queries, each run many times with different targets, timed through
`SqlSessionStore.search_history` (what `history_search` and `contextfold recall` call):
a Zotero key, a DOI, a file path (each planted once), a word in ~1% of messages, a word in
every message, a two-character Japanese word, and two words that must both match. The CLI
is timed too (`contextfold recall --json` in a subprocess: Python start-up included).

Run: `.venv/bin/python -m bench.recall_bench [--messages N] [--backend sqlite|postgresql]`.
PostgreSQL: $CONTEXTFOLD_BENCH_PG (default postgresql://postgres@127.0.0.1:5432/test), a
throw-away schema per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

from contextfold.core.values.messages import Message, ToolCallPart, ToolResultPart, text_message
from contextfold.store import SqlSessionStore, open_store

PG_ADMIN = os.environ.get("CONTEXTFOLD_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
RESULTS = Path(__file__).parent / "results" / "recall.json"
ALPHABET = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"  # Zotero's key alphabet
BATCH = 1_000
RUNS = 60  # timed searches per query kind
WORDS = ("sample", "model", "cortex", "protein", "signal", "method", "result", "figure", "table",
         "dataset", "analysis", "review", "cohort", "neuron", "cell", "tissue", "assay", "gene")
JAPANESE = ("東京大学の研究チームによる論文を確認してください。", "この実験の結果は再現性が高い。",
            "データセットの前処理について説明します。", "神経細胞の信号を解析した。")


def _key(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(8))


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(n))


class Planted:
    """Identifiers planted once each, to search for later."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.dois: list[str] = []
        self.paths: list[str] = []


def _turn(i: int, rng: random.Random, planted: Planted) -> list[Message]:
    """One turn of 4 messages: user, tool call, tool result, assistant."""
    key = _key(rng)
    planted.keys.append(key)
    if i % 2:
        ref = f"10.{1000 + rng.randrange(9000)}/j.bench.{i}.{rng.randrange(10**6)}"
        planted.dois.append(ref)
    else:
        ref = f"/home/ana/thesis/ch{i % 12}/notes_{i}-{rng.randrange(10**6)}.md"
        planted.paths.append(ref)
    if i % 10 == 0:
        ask = rng.choice(JAPANESE) + f" Zotero {key} {ref}"
    else:
        ask = f"Please open Zotero item {key} and check {ref}; " + _prose(rng, 12)
    rare = " rarebird" if i % 25 == 0 else ""  # in 1% of messages (1 of 4 per 25 turns)
    call = Message(role="assistant", parts=(
        ToolCallPart(id=f"c{i}", name="zotero_get", input={"key": key}),))
    result = Message(role="tool", parts=(ToolResultPart(
        call_id=f"c{i}", name="zotero_get",
        output=f"Item {key}: " + _prose(rng, rng.randrange(40, 200)) + rare),))
    reply = text_message("assistant", "everyday " + _prose(rng, rng.randrange(10, 40)))
    return [text_message("user", "everyday " + ask), call, result, reply]


async def build(store: SqlSessionStore, messages: int, seed: int = 7) -> tuple[str, Planted,
                                                                                 float]:
    """The session, with a retry sibling and a fork in the same tree; seconds to build."""
    rng = random.Random(seed)
    planted = Planted()
    info = await store.create_session(title="recall bench")
    start = time.perf_counter()
    pending: list[Message] = []
    turn = 0
    written = 0
    forked = False
    while written < messages:
        pending += _turn(turn, rng, planted)
        turn += 1
        if len(pending) >= BATCH or written + len(pending) >= messages:
            await store.append_many(info.id, pending)
            written += len(pending)
            pending = []
            if not forked:  # an early fork and a retried reply: other branches in the tree
                forked = True
                branch = await store.load_branch(info.id)
                fork = await store.fork(info.id, branch.nodes[-1].id)
                await store.append_many(fork.id, [text_message("user", "forkonly question"),
                                                  text_message("assistant", "forkonly")])
                await store.retry(info.id)
                await store.append(info.id, text_message("assistant", "everyday retried"))
    return info.id, planted, time.perf_counter() - start


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50_ms": round(q[49] * 1000, 2), "p99_ms": round(q[98] * 1000, 2),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 2), "runs": len(ordered)}


async def time_queries(store: SqlSessionStore, sid: str, planted: Planted,
                       seed: int = 11) -> dict[str, Any]:
    rng = random.Random(seed)
    kinds: dict[str, Any] = {
        "zotero_key": lambda: rng.choice(planted.keys),
        "doi": lambda: rng.choice(planted.dois),
        "path": lambda: rng.choice(planted.paths),
        "rare_word_1pct": lambda: "rarebird",
        "word_in_every_message": lambda: "everyday",
        "japanese_2_chars": lambda: rng.choice(["東京", "論文", "結果", "信号"]),
        "two_words_and": lambda: f"{rng.choice(WORDS)}{rng.randrange(50)} "
                                 f"{rng.choice(WORDS)}{rng.randrange(50)}",
    }
    out: dict[str, Any] = {}
    for name, make in kinds.items():
        samples, found = [], []
        for _ in range(RUNS):
            query = make()
            t0 = time.perf_counter()
            hits = await store.search_history(sid, query, limit=8)
            samples.append(time.perf_counter() - t0)
            found.append(len(hits))
        out[name] = {**_quantiles(samples), "mean_hits": round(statistics.fmean(found), 2)}
    assert not await store.search_history(sid, "forkonly"), "L4: the fork is another branch"
    return out


async def index_size(store: SqlSessionStore, messages: int) -> dict[str, Any]:
    """Bytes per message of the full-text index proper (FTS5 shadow tables / GIN index) and
    of everything recall adds (the `recall_nodes` table with its indexes; on PostgreSQL it
    holds the tsvectors), next to the `nodes` table for scale."""
    async with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            def size(where: str) -> Any:
                return text(f"SELECT coalesce(SUM(pgsize), 0) FROM dbstat WHERE {where}")

            fulltext = (await conn.execute(size("name LIKE 'recall_fts%'"))).scalar()
            table = (await conn.execute(size(
                "name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'recall_nodes')"))
            ).scalar()
            nodes = (await conn.execute(size(
                "name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'nodes')"))).scalar()
        else:
            fulltext = (await conn.execute(text(
                "SELECT pg_relation_size('ix_recall_nodes_document')"))).scalar()
            table = (await conn.execute(text(
                "SELECT pg_total_relation_size('recall_nodes')"))).scalar() - fulltext
            nodes = (await conn.execute(text("SELECT pg_total_relation_size('nodes')"))).scalar()
    fulltext, table, nodes = int(fulltext or 0), int(table or 0), int(nodes or 0)
    what = "FTS5 shadow tables" if store.dialect == "sqlite" else "GIN index"
    return {"fulltext_index": what,
            "fulltext_index_bytes_per_message": round(fulltext / messages, 1),
            "recall_table_bytes_per_message": round(table / messages, 1),
            "recall_total_bytes_per_message": round((fulltext + table) / messages, 1),
            "nodes_table_bytes_per_message": round(nodes / messages, 1)}


def time_cli(url: str, sid: str, planted: Planted, runs: int = 7) -> dict[str, Any]:
    samples = []
    for key in planted.keys[:runs]:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "contextfold", "recall", sid, key,
                               "--json", "--db", url], capture_output=True, text=True,
                              timeout=120)
        samples.append(time.perf_counter() - t0)
        assert proc.returncode == 0 and json.loads(proc.stdout)["matches"], proc.stderr
    return {"p50_ms": round(statistics.median(samples) * 1000, 1),
            "max_ms": round(max(samples) * 1000, 1), "runs": runs,
            "note": "one `contextfold recall --json` process per query: start-up included"}


async def run_backend(backend: str, messages: int) -> dict[str, Any]:
    schema = None
    tmp = tempfile.TemporaryDirectory()
    if backend == "sqlite":
        url = f"sqlite:///{Path(tmp.name) / 'recall.db'}"
    else:
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        url = f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
    store = await open_store(url)
    try:
        sid, planted, seconds = await build(store, messages)
        if backend == "postgresql":
            async with store.engine.connect() as conn:  # fresh statistics for the planner
                await conn.execute(text("ANALYZE"))
                await conn.commit()
        queries = await time_queries(store, sid, planted)
        baseline = []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            await store.get_session(sid)
            baseline.append(time.perf_counter() - t0)
        size = await index_size(store, messages)
        cli = time_cli(url, sid, planted)
        return {"messages": messages, "build_seconds": round(seconds, 1),
                "build_messages_per_second": round(messages / seconds),
                "search": queries, "index": size, "cli": cli,
                "store_call_baseline_ms": round(statistics.median(baseline) * 1000, 2)}
    finally:
        await store.close()
        if schema is not None:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        tmp.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--out", type=Path, default=RESULTS, help="Where to write the JSON.")
    args = parser.parse_args()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    results: dict[str, Any] = {
        "benchmark": "recall", "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
        "load_average_at_start": round(os.getloadavg()[0], 1),
        "backends": {},
    }
    for backend in backends:
        print(f"{backend}: building {args.messages:,} messages …", flush=True)
        results["backends"][backend] = asyncio.run(run_backend(backend, args.messages))
        print(json.dumps(results["backends"][backend], indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
