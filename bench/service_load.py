"""Load and faults for `contextfold serve` (issue 17 item 5): many sessions against two
uvicorn workers on PostgreSQL with the offline model; one worker is killed mid-run.

    python -m bench.service_load [--sessions 200] [--turns 20] [--window 6000]

Bounded and local: it starts its own server on 127.0.0.1 (a free port, a fresh PostgreSQL
schema, `--auth` with four tenants), runs every session's turns concurrently, SIGKILLs one
worker once 40% of the turns are acknowledged (uvicorn's supervisor starts a new one), stops
the server when every session is done, and then audits the database:

* no lost acknowledged message: every user message whose send answered 200 is stored once,
  with exactly the content sent (the store's invariant checker, `acknowledged`);
* no stale checkpoint: every checkpoint commit moved the leaf from exactly the leaf and
  revision its plan was made for, and every leaf-move log is gap-free (`check_moves`);
* no cross-tenant row: every session belongs to the tenant that created it, and the
  sessions sharing a tree (forks) share a tenant; each tenant lists only its own.

Writes `bench/results/service_load.json`; `bench/docs_report.py` renders it. Every send
carries an `Idempotency-Key` (one per message); a send whose answer was lost (its worker
died) or that was told to wait (503 / 429 / 409 in_progress, Retry-After) is retried with
the same key, as a careful agent would: the figures count those failures and retries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "service_load.json"
PG_ADMIN = os.environ.get("CONTEXTFOLD_BENCH_PG",
                          os.environ.get("CONTEXTFOLD_TEST_PG",
                                         "postgresql://postgres@127.0.0.1:5432/test"))
TENANTS = ("acme", "globex", "initech", "umbrella")
FILLER = ("We compared the retrieval results of the three indexes on the held-out queries; "
          "the second one missed the long-tail items again, see table 4 and the notes. ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _children(pid: int) -> list[int]:
    """The uvicorn worker processes of supervisor `pid` (not multiprocessing's resource
    tracker, which is a child too)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    workers = []
    for child in (int(p) for p in out.stdout.split()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"resource_tracker" not in cmdline:
            workers.append(child)
    return workers


class Run:
    """The client side: sessions, acknowledgements, latencies, failures."""

    def __init__(self, url: str, tokens: dict[str, str], turns: int, deadline: float) -> None:
        self.url = url
        self.deadline = deadline  # perf_counter() after which no new turn starts
        self.tokens = tokens
        self.turns = turns
        self.acked: dict[str, str] = {}  # user node id -> payload digest
        self.replies: set[str] = set()
        self.owner: dict[str, str] = {}  # session id -> tenant
        self.send_ms: list[float] = []
        self.check_ms: list[float] = []
        self.failures: dict[str, int] = {}
        self.retried = 0
        self.replayed = 0  # retries answered with the stored turn (the first answer was lost)
        self.unfinished = 0  # sessions that stopped after a send failed every attempt
        self.done_turns = 0
        self.compactions_reported = 0
        self.stopped_early = 0  # sessions cut short by the time bound

    def fail(self, kind: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1

    async def request(self, client: httpx.AsyncClient, method: str, path: str, tenant: str,
                      body: Any = None, key: str | None = None) -> httpx.Response | None:
        headers = {"Authorization": f"Bearer {self.tokens[tenant]}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        try:
            return await client.request(method, self.url + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            self.fail(type(exc).__name__)
            return None

    async def session(self, client: httpx.AsyncClient, index: int) -> None:
        tenant = TENANTS[index % len(TENANTS)]
        sid = None
        for _ in range(5):
            r = await self.request(client, "POST", "/v1/sessions", tenant, {"title": f"s{index}"})
            if r is not None and r.status_code == 201:
                sid = r.json()["session_id"]
                break
            await asyncio.sleep(_retry_after(r))
        if sid is None:
            self.fail("create")
            return
        self.owner[sid] = tenant
        for turn in range(self.turns):
            if time.perf_counter() > self.deadline:
                self.stopped_early += 1
                return
            text = f"session {index} turn {turn}: " + FILLER * (1 + (index + turn) % 4)
            if not await self.send(client, tenant, sid, text):
                self.unfinished += 1
                return  # an agent whose message never got an answer stops there
            started = time.perf_counter()
            r = await self.request(client, "GET", f"/v1/sessions/{sid}", tenant)
            if r is not None and r.status_code == 200:
                self.check_ms.append((time.perf_counter() - started) * 1000)

    async def send(self, client: httpx.AsyncClient, tenant: str, sid: str, text: str) -> bool:
        """One turn as a careful agent sends it: one Idempotency-Key for every attempt, so
        a retry after a lost answer (a killed worker) never stores the message twice; 503
        / 429 / 409 in_progress wait for their Retry-After."""
        from contextfold.core.values.messages import text_message
        from contextfold.store.audit.invariants import payload_digest

        key = uuid.uuid4().hex
        started = time.perf_counter()
        for attempt in range(SEND_ATTEMPTS):
            if attempt:
                self.retried += 1
            r = await self.request(client, "POST", f"/v1/sessions/{sid}/messages", tenant,
                                   {"text": text}, key=key)
            if r is not None and r.status_code == 200:
                self.send_ms.append((time.perf_counter() - started) * 1000)
                body = r.json()
                self.acked[body["node_ids"][0]] = payload_digest(text_message("user", text))
                self.replies.add(body["reply"]["node_id"])
                self.compactions_reported += len(body["compactions"])
                self.replayed += bool(body.get("replayed"))
                self.done_turns += 1
                return True
            if r is not None:
                self.fail(f"http_{r.status_code}_{_error_type(r)}")
            await asyncio.sleep(_retry_after(r))
        return False


SEND_ATTEMPTS = 8


def _error_type(response: httpx.Response) -> str:
    try:
        return str(response.json().get("type", "?"))
    except ValueError:
        return "?"


def _retry_after(response: httpx.Response | None) -> float:
    """The server's Retry-After (503 overloaded, 429, 409 in_progress), else half a second
    (a dropped connection: the supervisor is starting a new worker)."""
    if response is not None:
        with contextlib.suppress(KeyError, ValueError):
            return min(30.0, float(response.headers["Retry-After"]))
    return 0.5


async def _kill_one_worker(run: Run, server: subprocess.Popen[bytes], total: int,
                           at: float, log: dict[str, Any]) -> None:
    halfway = time.perf_counter() + at * max(0.0, run.deadline - time.perf_counter())
    while run.done_turns < total * at and time.perf_counter() < halfway:
        await asyncio.sleep(0.2)
    workers = _children(server.pid)
    victim = workers[0]
    log.update(killed_pid=victim, killed_after_turns=run.done_turns,
               workers_before=len(workers))
    os.kill(victim, signal.SIGKILL)
    killed = time.perf_counter()
    while True:
        await asyncio.sleep(0.2)
        now = [p for p in _children(server.pid) if p != victim]
        if len(now) >= 2:
            log["replacement_seconds"] = round(time.perf_counter() - killed, 2)
            return
        if time.perf_counter() - killed > 120:
            log["replacement_seconds"] = None
            return


async def _audit(url: str, run: Run) -> dict[str, Any]:
    from sqlalchemy import select

    from contextfold.store import open_store
    from contextfold.store.audit.invariants import check_store
    from contextfold.store.sql.schema import sessions

    store = await open_store(url)
    try:
        report = await check_store(store, acknowledged=run.acked)
        async with store.engine.connect() as conn:
            rows = (await conn.execute(select(sessions.c.id, sessions.c.tree_id,
                                              sessions.c.tenant_id))).all()
        cross = [f"session {sid} is {tenant}'s, created by {run.owner[sid]}"
                 for sid, _tree, tenant in rows if sid in run.owner and run.owner[sid] != tenant]
        trees: dict[str, set[str]] = {}
        for _sid, tree, tenant in rows:
            trees.setdefault(tree, set()).add(tenant)
        cross += [f"tree {t} holds sessions of {sorted(ts)}" for t, ts in trees.items()
                  if len(ts) > 1]
        for tenant in TENANTS:
            listed = {s.id for s in await store.for_tenant(tenant).list_sessions(
                check_damage=False)}
            cross += [f"{tenant} lists {sid} of {run.owner.get(sid)}" for sid in listed
                      if run.owner.get(sid, tenant) != tenant]
        stored = {row[0] for row in rows}
        missing_replies = 0
        async with store.engine.connect() as conn:
            from contextfold.store.sql.schema import nodes

            ids = {r[0] for r in (await conn.execute(select(nodes.c.id))).all()}
            missing_replies = len(run.replies - ids)
            checkpoints = (await conn.execute(
                select(nodes.c.id).where(nodes.c.kind == "checkpoint"))).all()
    finally:
        await store.close()
    kinds: dict[str, int] = {}
    for problem in report.problems:  # e.g. "is stored 2 times", "is missing", "stale"
        kind = "duplicate" if " is stored " in problem else problem.split(":")[0][:60]
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"invariants_ok": report.ok, "problems": report.problems[:20],
            "problem_kinds": kinds,
            "counts": report.counts, "cross_tenant": cross[:20],
            "cross_tenant_rows": len(cross), "sessions_stored": len(stored),
            "missing_replies": missing_replies, "checkpoints": len(checkpoints)}


async def main_async(sessions: int, turns: int, window: int, kill_at: float,
                     log_path: Path, max_seconds: float) -> dict[str, Any]:
    from contextfold.store import open_store

    load_at_start = [round(x, 1) for x in os.getloadavg()]
    schema = f"cf_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{PG_ADMIN}?options=-csearch_path%3D{schema}"
    store = await open_store(url)
    tokens = {t: (await store.create_token(t, label="load bench"))[1] for t in TENANTS}
    await store.close()
    port = _free_port()
    log_file = log_path.open("wb")  # the server's own log (warnings and worker restarts)
    server = subprocess.Popen(
        [sys.executable, "-m", "contextfold", "serve", "--db", url, "--workers", "2",
         "--auth", "--rate-limit", "0", "--context-window", str(window), "--port", str(port),
         "--log-level", "warning"],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=ROOT,
        env={**os.environ, "CONTEXTFOLD_DB": ""})
    base = f"http://127.0.0.1:{port}"
    fault: dict[str, Any] = {}
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            await asyncio.sleep(0.2)
        run = Run(base, tokens, turns, time.perf_counter() + max_seconds)
        limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
        started = time.perf_counter()
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:
            killer = asyncio.create_task(
                _kill_one_worker(run, server, sessions * turns, kill_at, fault))
            await asyncio.gather(*(run.session(client, i) for i in range(sessions)))
            if not killer.done():
                killer.cancel()
        elapsed = time.perf_counter() - started
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log_file.close()
    audit = await _audit(url, run)
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return {
        "sessions": sessions, "turns_per_session": turns, "context_window": window,
        "workers": 2, "database": "postgresql", "model": "offline/echo",
        "tenants": len(TENANTS), "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        "acknowledged_turns": run.done_turns, "attempted_turns": sessions * turns,
        "elapsed_seconds": round(elapsed, 1),
        "turns_per_second": round(run.done_turns / elapsed, 2) if elapsed else 0,
        "send_ms": {"p50": round(_pct(run.send_ms, 0.5), 1),
                    "p99": round(_pct(run.send_ms, 0.99), 1),
                    "mean": round(statistics.fmean(run.send_ms), 1) if run.send_ms else 0},
        "size_check_ms": {"p50": round(_pct(run.check_ms, 0.5), 1),
                          "p99": round(_pct(run.check_ms, 0.99), 1)},
        "failures": run.failures, "retried_sends": run.retried,
        "replayed_sends": run.replayed, "sessions_stopped_by_failed_send": run.unfinished,
        "max_seconds": max_seconds, "sessions_stopped_by_time_bound": run.stopped_early,
        "preflight_compactions_reported": run.compactions_reported,
        "fault": fault, "audit": audit,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--kill-at", type=float, default=0.4)
    parser.add_argument("--max-seconds", type=float, default=1200,
                        help="start no new turn after this long (the run stops by itself)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(main_async(args.sessions, args.turns, args.window, args.kill_at,
                                    Path(tempfile.gettempdir()) / "contextfold-service-load.log",
                                    args.max_seconds))
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    audit = result["audit"]
    print(f"{result['acknowledged_turns']}/{result['attempted_turns']} turns in "
          f"{result['elapsed_seconds']} s ({result['turns_per_second']}/s); send p50 "
          f"{result['send_ms']['p50']} ms p99 {result['send_ms']['p99']} ms; invariants "
          f"{'clean' if audit['invariants_ok'] else 'VIOLATED'}; cross-tenant rows "
          f"{audit['cross_tenant_rows']}; checkpoints {audit['checkpoints']}")
    return 0 if audit["invariants_ok"] and not audit["cross_tenant_rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
