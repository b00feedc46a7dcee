"""The service's turn against a floor endpoint → bench/results/service_turn.json (issue 26).

Two servers on the same machine and database: `contextfold serve` with the offline model,
and the floor: a minimal FastAPI app on the same store that appends the user row and the
reply row in one transaction (`append_many`). Clients over real sockets (httpx, keep-alive),
1 session, then 8 sessions in parallel, on SQLite and PostgreSQL, rounds interleaved so the
machine's noise hits both alike; the ratio is per round. Then, in process (ASGI transport),
the statements per turn (SQLAlchemy `before_cursor_execute`, BEGIN included) and the
per-turn time at turn 1 vs turn 60 of one session.

Goals: turns/s ≥ 0.5× the floor's; ≤ 8 statements per turn; per-turn cost flat over 60 turns.

Then a cProfile of 200 in-process turns per database: the top functions (own time, and
contextfold's own by cumulative time), kept in the results for the docs.

Run: `python -m bench.service_turn [--quick]` (needs PostgreSQL at 127.0.0.1:5432, db
`test`); `--src DIR` serves another source tree (e.g. main's, for the before figures);
`--profile N` only prints the profile of N turns per database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(__file__).parent / "results" / "service_turn.json"
ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


# ---------------------------------------------------------------------- the floor


def floor_app() -> Any:
    """The floor: create a session; a turn appends the user row and the reply row in one
    transaction of the same store. No model, no projection, no checks."""
    from fastapi import Body, FastAPI

    from contextfold.core.values.messages import text_message
    from contextfold.store import open_store

    state: dict[str, Any] = {}
    app = FastAPI()

    @app.on_event("startup")
    async def start() -> None:
        state["store"] = await open_store(os.environ["FLOOR_DB"])

    @app.post("/v1/sessions", status_code=201)
    async def create() -> dict[str, Any]:
        info = await state["store"].create_session(title=None)
        return {"session_id": info.id}

    @app.post("/v1/sessions/{sid}/messages")
    async def turn(sid: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        text = body["text"]
        nodes = await state["store"].append_many(
            sid, [text_message("user", text), text_message("assistant", f"echo: {text}")])
        return {"reply": {"node_id": nodes[-1].id, "text": f"echo: {text}"}}

    return app


# ---------------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(kind: str, db: str, src: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}", "FLOOR_DB": db}
    if kind == "contextfold":
        cmd = [sys.executable, "-m", "contextfold", "serve", "--port", str(port), "--db", db,
               "--log-level", "warning"]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "bench.service_turn:floor_app",
               "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with {proc.returncode}")
        try:
            if httpx.post(url + "/v1/sessions", json={}, timeout=2).status_code == 201:
                return url, proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{kind} did not answer within 60 s")


async def _client_run(url: str, sessions: int, turns: int) -> dict[str, Any]:
    """`sessions` clients in parallel, each its own session (created before the clock
    starts) and connection, `turns` each."""
    async def one(client: httpx.AsyncClient, sid: str) -> list[float]:
        times = []
        for i in range(turns):
            start = time.perf_counter()
            r = await client.post(f"/v1/sessions/{sid}/messages",
                                  json={"text": f"turn {i}: next step for the parser?"})
            times.append(time.perf_counter() - start)
            r.raise_for_status()
        return times

    clients = [httpx.AsyncClient(base_url=url, timeout=120) for _ in range(sessions)]
    try:
        sids = [(await c.post("/v1/sessions", json={})).json()["session_id"] for c in clients]
        start = time.perf_counter()
        per = await asyncio.gather(*(one(c, sid) for c, sid in zip(clients, sids,
                                                                   strict=True)))
        elapsed = time.perf_counter() - start
    finally:
        for c in clients:
            await c.aclose()
    flat = sorted(t for times in per for t in times)
    return {"turns_per_second": round(sessions * turns / elapsed, 1),
            "p50_ms": round(1000 * flat[len(flat) // 2], 1),
            "p99_ms": round(1000 * flat[min(len(flat) - 1, int(len(flat) * 0.99))], 1)}


# ---------------------------------------------------------------------- in process


async def in_process(db: str, turns: int) -> dict[str, Any]:
    """Statements per turn and per-turn ms (turn 1 vs the last) through the ASGI app."""
    from sqlalchemy import event

    from contextfold.server import ServiceConfig, create_app
    from contextfold.store import open_store

    store = await open_store(db)
    app = create_app(ServiceConfig(db=db), store=store)
    seen: list[str] = []

    def on_execute(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", on_execute)
    handoffs = _count_handoffs()  # SQLite: calls into aiosqlite's thread
    counts, ms, hops = [], [], []
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        sid = (await c.post("/v1/sessions", json={})).json()["session_id"]
        for i in range(turns):
            seen.clear()
            handoffs[0] = 0
            start = time.process_time()
            r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": f"turn {i}"})
            ms.append(1000 * (time.process_time() - start))
            r.raise_for_status()
            counts.append(len(seen))
            hops.append(handoffs[0])
    await store.close()
    head, tail = ms[1:11], ms[-10:]  # turn 0 warms caches; medians of ten
    out = {"statements_per_turn": statistics.median(counts[1:]),
            "statements_first_turn": counts[0],
            "cpu_ms_turns_2_11": round(statistics.median(head), 1),
            "cpu_ms_last_10": round(statistics.median(tail), 1), "turns": turns}
    if store.engine.dialect.name == "sqlite":
        out["thread_handoffs_per_turn"] = statistics.median(hops[1:])
    return out


def _count_handoffs() -> list[int]:
    """A counter of the calls made into aiosqlite's thread (its queue's `put_nowait`)."""
    import aiosqlite.core

    if not getattr(aiosqlite.core.Connection, "_cf_counted", False):
        real = aiosqlite.core.Connection._execute

        async def counted(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            _HANDOFFS[0] += 1
            return await real(self, fn, *args, **kwargs)

        aiosqlite.core.Connection._execute = counted  # type: ignore[method-assign]
        aiosqlite.core.Connection._cf_counted = True  # type: ignore[attr-defined]
    _HANDOFFS[:] = [0]
    return _HANDOFFS


_HANDOFFS = [0]


# ---------------------------------------------------------------------- profile

# Waiting, not work: the event loop's poll (the client and server share the loop here).
_IDLE = ("<method 'poll' of 'select.epoll' objects>",)


def _where(key: tuple[str, int, str]) -> str:
    path, line, name = key
    if path == "~":
        return name
    parts = Path(path).parts
    short = "/".join(parts[parts.index("site-packages") + 1:] if "site-packages" in parts
                     else parts[-3:] if "contextfold" in parts else parts[-2:])
    return f"{short}:{line} {name}"


async def profile(db: str, sessions: int, turns: int, top: int = 12) -> dict[str, Any]:
    """cProfile over `sessions` x `turns` in-process turns (ASGI transport; a fresh session
    each `turns`, like the clients): the top functions by own time and contextfold's own by
    own and by cumulative time, in ms per turn (profiled: ~2x the unprofiled CPU)."""
    import cProfile
    import pstats

    from contextfold.server import ServiceConfig, create_app
    from contextfold.store import open_store

    store = await open_store(db)
    app = create_app(ServiceConfig(db=db), store=store)
    prof = cProfile.Profile()
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        warm = (await c.post("/v1/sessions", json={})).json()["session_id"]
        for i in range(3):
            (await c.post(f"/v1/sessions/{warm}/messages", json={"text": f"w {i}"})
             ).raise_for_status()
        for _ in range(sessions):
            sid = (await c.post("/v1/sessions", json={})).json()["session_id"]
            prof.enable()
            for i in range(turns):
                (await c.post(f"/v1/sessions/{sid}/messages",
                              json={"text": f"turn {i}: next step for the parser?"})
                 ).raise_for_status()
            prof.disable()
    await store.close()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    n = sessions * turns
    own = sorted(((k, v[2]) for k, v in stats.items() if k[2] not in _IDLE),
                 key=lambda kv: -kv[1])[:top]
    ours = sorted(((k, v[3]) for k, v in stats.items() if "contextfold" in k[0]),
                  key=lambda kv: -kv[1])[:top]
    ours_own = sorted(((k, v[2]) for k, v in stats.items() if "contextfold" in k[0]),
                      key=lambda kv: -kv[1])[:top]
    return {"turns": n,
            "own_ms_per_turn": [[_where(k), round(1000 * t / n, 3)] for k, t in own],
            "contextfold_own_ms_per_turn": [[_where(k), round(1000 * t / n, 3)]
                                            for k, t in ours_own],
            "contextfold_cumulative_ms_per_turn": [[_where(k), round(1000 * t / n, 3)]
                                                   for k, t in ours]}


# ---------------------------------------------------------------------- main


def _new_db(backend: str, tmp: Path, name: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp / name}.db"
    import psycopg

    schema = f"bench_{name}_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{PG_ADMIN}?options=-csearch_path%3D{schema}"


async def main(quick: bool, src: Path, out: Path, rounds: int = 5) -> None:
    rounds = 1 if quick else rounds
    plan = [(1, 10), (8, 2)]
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "src": str(src), "rounds": rounds, "workers": 1, "model": "offline/echo",
        "goals": {"floor_ratio": 0.5, "statements_per_turn": 8, "flat": 1.2},
        "backends": {}}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for backend in ("sqlite", "postgresql"):
            servers = {kind: _start(kind, _new_db(backend, tmp, kind), src)
                       for kind in ("contextfold", "floor")}
            try:
                runs: dict[str, list[dict[str, Any]]] = {}
                for _ in range(rounds):
                    for sessions, turns in plan:
                        for kind in ("floor", "contextfold"):
                            got = await _client_run(servers[kind][0], sessions, turns)
                            runs.setdefault(f"{kind}/{sessions}", []).append(got)
            finally:
                for _url, proc in servers.values():
                    proc.terminate()
                    proc.wait(20)
            table = {}
            for sessions, turns in plan:
                cf, fl = runs[f"contextfold/{sessions}"], runs[f"floor/{sessions}"]
                ratios = [c["turns_per_second"] / f["turns_per_second"]
                          for c, f in zip(cf, fl, strict=True)]
                table[str(sessions)] = {
                    "turns_each": turns, "contextfold": cf, "floor": fl,
                    "ratio_median": round(statistics.median(ratios), 3),
                    "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)]}
            sys.path.insert(0, str(src))
            table["in_process"] = await in_process(_new_db(backend, tmp, "inproc"),
                                                   30 if quick else 60)
            table["profile"] = await profile(_new_db(backend, tmp, "prof"),
                                             5 if quick else 20, 10)
            report["backends"][backend] = table
            print(backend, json.dumps(table["in_process"]), file=sys.stderr)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


async def profile_only(turns: int) -> None:
    """`--profile N`: print the profile of N turns on each database, nothing written."""
    with tempfile.TemporaryDirectory() as tmpdir:
        for backend in ("sqlite", "postgresql"):
            got = await profile(_new_db(backend, Path(tmpdir), "prof"), max(1, turns // 10),
                                10)
            print(f"{backend}: {got['turns']} turns, ms per turn (profiled)")
            for title, key in (("own time", "own_ms_per_turn"),
                               ("contextfold's, own time", "contextfold_own_ms_per_turn"),
                               ("contextfold's, cumulative", "contextfold_cumulative_ms_per_turn")):
                print(f"  {title}:")
                for where, ms in got[key]:
                    print(f"    {ms:8.3f}  {where}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds (a round of 10 turns is ~0.2 s: on a busy box "
                        "more rounds steady the median ratio)")
    parser.add_argument("--profile", type=int, metavar="TURNS", default=0,
                        help="only profile TURNS in-process turns per database and print the "
                        "top functions (needs PostgreSQL too)")
    args = parser.parse_args()
    if args.profile:
        asyncio.run(profile_only(args.profile))
    else:
        asyncio.run(main(args.quick, args.src.resolve(), args.out, args.rounds))
