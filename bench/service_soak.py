"""Memory of one long-running `contextfold serve` (issue 38, SPEC Y14: "the same for
`serve`"): many short conversations one after another, resident memory sampled as they go.

One `contextfold serve` process (one worker, real HTTP, the offline model `offline/echo`, no
`--auth`, no rate limit) on SQLite and then one on PostgreSQL. Each conversation creates its
session, sends 3 or 4 turns (`POST /v1/sessions/{id}/messages`) of agent-style text that
never repeats (`bench/varied_data.py`: prose and pasted tool output of up to 5,000
characters, its own seed per conversation) and is never heard of again; `CLIENTS` of them
at a time. The process's resident set is read every `SAMPLE` conversations by the proxy
soak's sampling (`bench/proxy_soak.py`: `sample_run`, `over_time`), which also gives the
figures: the second half's least-squares slope (bytes kept per finished conversation, goal
at most 4 KB), and the last tenth of the run against the first for memory and for the p50
and p95 latency of a turn (a ratio above 1 is growth). The worker runs with the proxy
soak's `--memory-cache` (`MEMORY_CACHE` MiB: its open sessions and the store's memos,
least recently used out), small enough to fill within the first few hundred conversations.

    python -m bench.service_soak                    # both stores -> bench/results/service_soak.json
    python -m bench.service_soak --conversations N  # another count per store (default 5,000)
    python -m bench.service_soak --quick            # 100 on SQLite, nothing written
    python -m bench.service_soak --store sqlite --conversations 100000 --until 13:20
        # one store; no new window of conversations after 13:20 UTC (the count run is kept)
    python -m bench.service_soak --before           # -> bench/results/service_soak_before.json
                                                    # (run on the code before a change)
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from bench.proxy_soak import (
    CLIENTS,
    MEMORY_CACHE,
    client_run,
    log_errors,
    one_store,
    over_time,
    soak_args,
    stored,
)
from bench.results_file import merge_run
from bench.server_process import ServerProcess, free_port
from bench.varied_data import varied_message

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "service_soak.json"
BEFORE = ROOT / "bench" / "results" / "service_soak_before.json"
CONVERSATIONS = 5000  # per store
SAMPLE = 100  # conversations between two readings of the server's memory
MODEL = "offline/echo"


def turns_of(n: int) -> int:
    """Conversation `n`'s number of turns: 3 or 4."""
    return 3 + n % 2


def conversation(client: httpx2.Client, url: str, n: int) -> list[float]:
    """Conversation `n`: create its session, send its turns; the latency of each turn in
    seconds (the session's creation is not a turn)."""
    rng = random.Random(38_000 + n)  # its own text, the same on every run
    r = client.post(f"{url}/v1/sessions", json={"title": f"soak {n}: {varied_message(rng)[:80]}",
                                                 "model": MODEL})
    if r.status_code != 201:
        raise RuntimeError(f"conversation {n}: create {r.status_code} {r.text[:600]}")
    sid = r.json()["session_id"]
    took = []
    for turn in range(turns_of(n)):
        body = json.dumps({"text": f"[{n}.{turn}] {varied_message(rng)}"}).encode()
        started = time.perf_counter()
        r = client.post(f"{url}/v1/sessions/{sid}/messages", content=body,
                        headers={"content-type": "application/json"})
        took.append(time.perf_counter() - started)
        if r.status_code != 200:
            raise RuntimeError(f"conversation {n}, turn {turn}: {r.status_code} {r.text[:600]}")
    return took


def memory_flag() -> list[str]:
    """`--memory-cache MEMORY_CACHE`, for a `serve` that has the flag (none before SPEC Y14
    reached the service: it kept up to 2,000 sessions open, a bound by count)."""
    from contextfold.server.config import ServiceConfig

    has = "memory_bytes" in ServiceConfig.__dataclass_fields__
    return ["--memory-cache", str(MEMORY_CACHE)] if has else []


def soak(db: str, conversations: int, tmp: Path, name: str, *, until: float | None = None,
         progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Serve `conversations` through one `contextfold serve` process on `db` (fewer when
    `until`, a wall-clock time, comes first); its samples and figures. `progress`: called
    with the figures so far now and then."""
    port = free_port()
    server = ServerProcess(name, [sys.executable, "-m", "contextfold", "serve", "--db", db,
                                  "--port", str(port), "--model", MODEL, "--rate-limit", "0",
                                  "--log-level", "warning", *memory_flag()], port,
                           log=tmp / f"{name}.log", cwd=ROOT,
                           env={"CONTEXTFOLD_DB": "", "CONTEXTFOLD_MODEL": ""})

    def figures(samples: list[dict[str, Any]]) -> dict[str, Any]:
        done = samples[-1]["conversations"]
        return {"conversations": done, "turns": sum(turns_of(n) for n in range(done)),
                "log_errors": log_errors([tmp / f"{name}.log"]),
                **over_time(samples, done), "samples": samples}

    try:
        server.ready(health="/healthz")
        samples = client_run(conversations, SAMPLE, server.proc.pid, server.url,
                             conversation, name, until=until,
                             progress=None if progress is None
                             else lambda got: progress(figures(got)))
    finally:
        server.stop()
    return {**figures(samples), "stored": asyncio.run(stored(db))}


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    opts = soak_args(argv, 100 if quick else CONVERSATIONS)
    path = BEFORE if "--before" in argv else RESULTS
    head: dict[str, Any] = {"turns_per_conversation": "3-4", "clients": CLIENTS,
                            "memory_cache_mib": MEMORY_CACHE if memory_flag() else None,
                            "sample_every": SAMPLE, "model": MODEL, "workers": 1,
                            "machine": platform.machine(), "cores": os.cpu_count(),
                            "python": platform.python_version()}
    for store in ("sqlite",) if quick else opts["stores"]:
        def keep(run: dict[str, Any], store: str = store) -> None:
            if not quick:
                merge_run(path, head, store, {**run, "complete": False})

        run = one_store(soak, store, opts["count"], "serve", until=opts["until"],
                        progress=keep)
        p = run["per_process"][0]
        print(f"{store}: {run['conversations']} conversations ({run['turns']} turns) in "
              f"{run['seconds']} s; {p['retained_bytes_per_conversation']} B kept per "
              f"conversation (goal {run['goal_bytes']}); RSS {p['rss_start_mb']} -> "
              f"{p['rss_end_mb']} MB, last / first tenth {p['rss_ratio_last_first']}; p50 "
              f"{run['p50_ms_first_decile']} -> {run['p50_ms_last_decile']} ms, p95 "
              f"{run['p95_ms_first_decile']} -> {run['p95_ms_last_decile']} ms; log errors "
              f"{run['log_errors']}; stored {run['stored']}")
        if not quick:
            merge_run(path, head, store, {**run, "complete": True})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
