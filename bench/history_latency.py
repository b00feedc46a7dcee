"""Does a request get slower as the store fills up (issue 38: one database, for months)?

A store is pre-filled with `N` finished conversations through the store's own API, shaped as
the proxy and the service leave them (a session with its metadata, eight mirrored messages
and their `mirror_index` rows, their recall rows and leaf moves), then the same short
conversations are timed through a `contextfold proxy` and a `contextfold serve` process on
an empty store and on the filled one, in alternating rounds (the machine is shared, so a
ratio measured side by side is what is reported). Both stores: SQLite and PostgreSQL.

    python -m bench.history_latency        # 20,000 sessions -> bench/results/history_latency.json
    python -m bench.history_latency --sessions N --rounds R --per-round C
    python -m bench.history_latency --sqlite-only --filled PATH  # a filled SQLite file (copied)
    python -m bench.history_latency --filled PATH --filled-pg URL  # and a filled schema (used)
    python -m bench.history_latency --lookups URL [--list]  # finding a session in a filled store
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from bench import proxy_soak, service_soak
from bench.proxy_soak import stored
from bench.server_process import ServerProcess, free_port
from bench.store_bench import drop_pg, pg_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "history_latency.json"
SESSIONS = 20_000
ROUNDS = 4
PER_ROUND = 40  # conversations per round and per store state
# Conversation numbers of the timed runs: far from the pre-filled ones, new in every round
# and in every run (a store filled by an earlier run may hold that run's timed conversations:
# the same numbers would return to them, a dearer path than a new conversation).
FIRST_TIMED = 10_000_000 + int(time.time()) % 100_000 * 1_000


async def prefill(url: str, count: int, *, batch: int = 8) -> float:
    """`count` finished conversations written through the store's API (`batch` at a time);
    the seconds it took."""
    from contextfold.core.values.content_chain import chain_hashes
    from contextfold.core.values.messages import text_message
    from contextfold.store import open_store

    started = time.monotonic()
    async with await open_store(url) as store:
        async def one(n: int) -> None:
            msgs = [text_message("user" if i % 2 == 0 else "assistant",
                                 f"[{n}] message {i} of module m{n}: " + "Context. " * 40)
                    for i in range(8)]
            meta = {"proxy": {"client": "bench", "model": "bench-model",
                              "protocol": "chat", "agent": "unknown",
                              "label": f"soak-{n}", "cwd": f"/home/dev/p{n}"}}
            info = await store.create_session(title=f"prefill {n}", metadata=meta)
            await store.mirror_extend(info.id, chain_hashes(f"prefill:{n}", msgs), msgs)

        for start in range(0, count, batch):
            await asyncio.gather(*(one(n) for n in range(start, min(count, start + batch))))
    return time.monotonic() - started


async def lookups(url: str, newest: int, *, full_list: bool = False) -> dict[str, float]:
    """Milliseconds of what finds a session among all of a filled store (`newest`: the
    number of the newest pre-filled conversation): `contextfold mcp`'s `which_session` by
    label, by directory, by client name and for a label nothing has; with `full_list`, also
    `list_sessions()` (what `GET /v1/sessions` and `contextfold sessions` read: every
    session, its tail checked)."""
    from contextfold.mcp.which import Asked, which_session
    from contextfold.store import open_store

    asks = {"label": Asked(session=f"soak-{newest}"),
            "directory": Asked(directories=(f"/home/dev/p{newest}",)),
            "client": Asked(client="bench"), "no such label": Asked(session="no-such-label")}
    out: dict[str, float] = {}
    async with await open_store(url) as store:
        for name, asked in asks.items():
            started = time.perf_counter()
            with contextlib.suppress(LookupError):
                await which_session(store, asked)
            out[f"which_session {name}"] = round(1000 * (time.perf_counter() - started), 1)
        if full_list:
            started = time.perf_counter()
            await store.list_sessions()
            out["list_sessions"] = round(1000 * (time.perf_counter() - started), 1)
    return out


def _percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50_ms": round(1000 * values[len(values) // 2], 2),
            "p95_ms": round(1000 * values[int(len(values) * 0.95)], 2),
            "mean_ms": round(1000 * statistics.fmean(values), 2), "requests": len(values)}


def _proxy(db: str, tmp: Path, name: str, upstream: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(name, [sys.executable, "-m", "contextfold", "proxy", "--upstream",
                                upstream, "--db", db, "--port", str(port), "--model-window",
                                proxy_soak.WINDOW], port, log=tmp / f"{name}.log", cwd=ROOT,
                         env={"CONTEXTFOLD_PROXY_SALT": "soak"})


def _serve(db: str, tmp: Path, name: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(name, [sys.executable, "-m", "contextfold", "serve", "--db", db,
                                "--port", str(port), "--model", service_soak.MODEL,
                                "--rate-limit", "0", "--log-level", "warning"], port,
                         log=tmp / f"{name}.log", cwd=ROOT,
                         env={"CONTEXTFOLD_DB": "", "CONTEXTFOLD_MODEL": ""})


def compare(empty: str, full: str, tmp: Path, label: str, upstream: str, rounds: int,
            per_round: int) -> dict[str, Any]:
    """Per-request latency of the proxy and of `serve` on the empty and the filled store,
    `rounds` alternating rounds of `per_round` conversations each."""
    out: dict[str, Any] = {}
    for face in ("proxy", "serve"):
        servers = {}
        try:
            for state, db in (("empty", empty), ("filled", full)):
                name = f"{face}-{label}-{state}"
                servers[state] = (_proxy(db, tmp, name, upstream) if face == "proxy"
                                  else _serve(db, tmp, name))
            for server in servers.values():
                server.ready(health="/healthz" if face == "serve" else None)
            took: dict[str, list[float]] = {"empty": [], "filled": []}
            cpu = {"empty": 0.0, "filled": 0.0}  # the server's own CPU seconds
            ratios, cpu_ratios = [], []
            with httpx2.Client(timeout=120) as client:
                for r in range(rounds):
                    medians, spent = {}, {}
                    for state, server in servers.items():
                        first = FIRST_TIMED + r * per_round
                        before = server.cpu_seconds()
                        lat = [t for n in range(first, first + per_round) for t in (
                            proxy_soak.conversation(client, server.url, n) if face == "proxy"
                            else service_soak.conversation(client, server.url, n))]
                        spent[state] = server.cpu_seconds() - before
                        cpu[state] += spent[state]
                        took[state] += lat
                        medians[state] = statistics.median(lat)
                    ratios.append(medians["filled"] / medians["empty"])
                    cpu_ratios.append(spent["filled"] / spent["empty"])
                    print(f"  {label} {face} round {r}: p50 empty {medians['empty'] * 1000:.1f}"
                          f" ms, filled {medians['filled'] * 1000:.1f} ms; CPU per "
                          f"conversation {spent['empty'] / per_round * 1000:.1f} / "
                          f"{spent['filled'] / per_round * 1000:.1f} ms", flush=True)
        finally:
            for server in servers.values():
                server.stop()
        out[face] = {"empty": _percentiles(took["empty"]), "filled": _percentiles(took["filled"]),
                     "p50_ratio_per_round": [round(x, 3) for x in ratios],
                     "p50_ratio_median": round(statistics.median(ratios), 3),
                     "cpu_ms_per_conversation": {
                         k: round(1000 * v / (rounds * per_round), 2) for k, v in cpu.items()},
                     "cpu_ratio_per_round": [round(x, 3) for x in cpu_ratios],
                     "cpu_ratio_median": round(statistics.median(cpu_ratios), 3)}
    return out


def main(argv: list[str]) -> int:
    count = int(argv[argv.index("--sessions") + 1]) if "--sessions" in argv else SESSIONS
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else ROUNDS
    per_round = int(argv[argv.index("--per-round") + 1]) if "--per-round" in argv else PER_ROUND
    stores = ["sqlite", "postgresql"] if "--sqlite-only" not in argv else ["sqlite"]
    if "--lookups" in argv:  # only the look-ups, on a filled store given by its URL
        url = argv[argv.index("--lookups") + 1]
        print(json.dumps(asyncio.run(lookups(url, count - 1, full_list="--list" in argv))))
        return 0
    out: dict[str, Any] = {"prefilled_sessions": count, "rounds": rounds,
                           "conversations_per_round": per_round,
                           "machine": platform.machine(), "cores": os.cpu_count(),
                           "python": platform.python_version(),
                           "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                           "stores": {}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        up_port = free_port()
        upstream = ServerProcess("upstream", [sys.executable, "-m", "bench.proxy_bench",
                                              "--serve-upstream", str(up_port)], up_port,
                                 log=tmp / "upstream.log", cwd=ROOT)
        schemas: list[str] = []
        try:
            upstream.ready()
            for store in stores:
                if store == "sqlite":
                    empty, full = (f"sqlite:///{tmp / 'empty.db'}", f"sqlite:///{tmp / 'full.db'}")
                else:
                    (empty, s1), (full, s2) = pg_url(), pg_url()
                    schemas += [s1, s2]
                given = argv[argv.index("--filled") + 1] if "--filled" in argv else None
                given_pg = argv[argv.index("--filled-pg") + 1] if "--filled-pg" in argv \
                    else None
                seconds = 0.0
                if store == "sqlite" and given:  # a file filled by an earlier run, copied
                    for suffix in ("", "-wal", "-shm"):
                        if Path(given + suffix).exists():
                            shutil.copy(given + suffix, str(tmp / "full.db") + suffix)
                elif store == "postgresql" and given_pg:  # a schema filled by an earlier run
                    full = given_pg
                else:
                    seconds = asyncio.run(prefill(full, count))
                print(f"{store}: {count} sessions written in {seconds:.0f} s", flush=True)
                out["stores"][store] = {"prefill_seconds": round(seconds, 1),
                                        "filled_store": asyncio.run(stored(full)),
                                        **compare(empty, full, tmp, store, upstream.url, rounds,
                                                  per_round)}
        finally:
            upstream.stop()
            for schema in schemas:
                drop_pg(schema)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    for store, res in out["stores"].items():
        for face in ("proxy", "serve"):
            print(f"{store} {face}: p50 empty {res[face]['empty']['p50_ms']} ms, filled "
                  f"{res[face]['filled']['p50_ms']} ms, ratio per round "
                  f"{res[face]['p50_ratio_per_round']}; CPU ratio per round "
                  f"{res[face]['cpu_ratio_per_round']}")
    if "--no-write" not in argv:
        RESULTS.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
