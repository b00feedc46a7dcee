"""Memory of one long-running `contextfold proxy` (SPEC Y14): many short conversations one
after another, resident memory sampled as they go.

One proxy process (real HTTP) in front of the instant scripted upstream of the proxy bench
(`bench/proxy_bench.py --serve-upstream`, a process of its own). Each conversation is its
own client key and its own system prompt, and sends `TURNS` requests (the whole list resent
plus one new message each, as an agent does); then it is never heard of again. The proxy's
resident set (VmRSS) is read every `SAMPLE` conversations; what a finished conversation
keeps is the slope of a least-squares line through the samples of the second half (after
warm-up and after the process's caches filled up). The goal: at most 4 KB retained per
finished conversation, flat. Request latency is kept per sample window beside it.

    python -m bench.proxy_soak                    # 3,000 conversations on SQLite and
                                                  # PostgreSQL -> bench/results/proxy_soak.json
    python -m bench.proxy_soak --quick            # 300 on SQLite, nothing written
    python -m bench.proxy_soak --conversations N  # another count

A fleet (issue 38): `--fleet P` starts P proxy processes on one PostgreSQL database and sends
each request of a conversation to the next process in turn, as a round-robin load balancer
does (every conversation is served by several processes). The resident set of every process
is sampled; memory and latency are compared between the first and the last tenth of the run
(and the memory slope per conversation of the second half), so a leak or a slowdown over
time shows as a ratio above 1:

    python -m bench.proxy_soak --fleet 3 --conversations N  # -> bench/results/proxy_fleet_soak.json
    python -m bench.proxy_soak --fleet 3 --conversations N --turns 24 --window bench-model=4096
        # long conversations that compact while other processes serve them
        # -> bench/results/proxy_fleet_soak_long.json
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2

from bench.results_file import merge_run
from bench.server_process import ServerProcess, free_port
from bench.store_bench import drop_pg, pg_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "proxy_soak.json"
FLEET_RESULTS = ROOT / "bench" / "results" / "proxy_fleet_soak.json"
FLEET_LONG_RESULTS = ROOT / "bench" / "results" / "proxy_fleet_soak_long.json"
TURNS = 4
SAMPLE = 100  # conversations between two readings of the proxy's memory
CLIENTS = 4  # conversations served at once (each its own thread)
GOAL_BYTES = 4096  # retained per finished conversation
WINDOW = "bench-model=16384"
# The proxy's `--memory-cache` (MiB) in the soak: small enough that a few thousand short
# conversations fill it, so the line is measured with eviction at work (the default, 256
# MiB, fills after some ten thousand of them and stays flat from there the same way).
MEMORY_CACHE = 16
STORES = ("sqlite", "postgresql")


def keep_alive_client() -> httpx2.Client:
    """A client that reuses its connection, but not one idle for 2 s or more: uvicorn closes
    an idle connection after 5 s, and a request sent on it as it closes is reset (a soak's
    threads idle at each sample's end, longer on a loaded machine)."""
    return httpx2.Client(timeout=120, limits=httpx2.Limits(keepalive_expiry=2.0))


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (every thread of it: `bench.cpu_sampler`'s reading)."""
    from bench.cpu_sampler import cpu_seconds as read

    return round(read(pid), 3)


def rss_bytes(pid: int) -> int:
    """The process's resident set size now."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def conversation(client: httpx2.Client, url: str | list[str], n: int,
                 turns: int = TURNS) -> list[float]:
    """One conversation of `turns` requests (its own key and system prompt); the
    latency of each request in seconds. `url`: one proxy, or a fleet's (each request to the
    next one, starting from the conversation's own)."""
    urls = [url] if isinstance(url, str) else url
    headers = {"authorization": f"Bearer sk-soak-{n:06d}", "content-type": "application/json"}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are assistant {n}. Project soak-{n}: answer briefly "
                                      "and cite the file you read." + " Rule." * 40},
        {"role": "user", "content": f"[{n}] What does module m{n} do? " + "Context. " * 60}]
    took = []
    for turn in range(turns):
        started = time.perf_counter()
        r = client.post(urls[(n + turn) % len(urls)] + "/v1/chat/completions",
                        headers=headers, content=json.dumps(
            {"model": "bench-model", "max_tokens": 64, "messages": messages}).encode())
        took.append(time.perf_counter() - started)
        if r.status_code != 200:
            raise RuntimeError(f"conversation {n}, turn {turn}: {r.status_code} {r.text[:600]}")
        messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]
                      ["content"]},
                     {"role": "user", "content": f"[{n}] and then {turn}? " + "More. " * 30}]
    return took


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares bytes per conversation through (conversations, bytes)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def soak(db: str, conversations: int, tmp: Path, name: str, *, until: float | None = None,
         progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Serve `conversations` through one proxy process on `db` (fewer when `until`, a
    wall-clock time, comes first); the samples and figures (`over_time`). `progress`: called
    with the figures so far now and then (`sample_run`)."""
    up_port = free_port()
    upstream = ServerProcess("upstream", [sys.executable, "-m", "bench.proxy_bench",
                                          "--serve-upstream", str(up_port)], up_port,
                             log=tmp / "upstream.log", cwd=ROOT)
    port = free_port()
    proxy = ServerProcess(name, [sys.executable, "-m", "contextfold", "proxy", "--upstream",
                                 upstream.url, "--db", db, "--port", str(port),
                                 "--model-window", WINDOW,
                                 "--memory-cache", str(MEMORY_CACHE)], port,
                          log=tmp / f"{name}.log", cwd=ROOT,
                          env={"CONTEXTFOLD_PROXY_SALT": "soak"})

    def figures(samples: list[dict[str, Any]]) -> dict[str, Any]:
        done = samples[-1]["conversations"]
        return {"conversations": done, "requests": done * TURNS,
                "log_errors": log_errors([tmp / f"{name}.log"]),
                **over_time(samples, done), "samples": samples}

    try:
        upstream.ready()
        proxy.ready()
        samples = client_run(conversations, SAMPLE, proxy.proc.pid, proxy.url, conversation,
                             name, until=until,
                             progress=None if progress is None
                             else lambda got: progress(figures(got)))
    finally:
        proxy.stop()
        upstream.stop()
    return figures(samples)


def client_run(conversations: int, sample: int, pid: int, url: str,
               conversation: Callable[[Any, str, int], list[float]], label: str, *,
               until: float | None = None,
               progress: Callable[[list[dict[str, Any]]], None] | None = None
               ) -> list[dict[str, Any]]:
    """`sample_run` of `conversation(client, url, n)` over `CLIENTS` keep-alive clients,
    made once, so a conversation costs its requests only (the server's process: `pid`)."""
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(keep_alive_client()) for _ in range(CLIENTS)]
        return sample_run(conversations, sample, [pid],
                          lambda n: conversation(clients[n % CLIENTS], url, n), label,
                          until=until, progress=progress)


def decile_means(values: list[float]) -> tuple[float, float]:
    """The mean of the first and of the last tenth of `values` (at least one each)."""
    k = max(1, len(values) // 10)
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def sample_run(conversations: int, sample: int, pids: list[int],
               one: Callable[[int], list[float]], label: str, *, until: float | None = None,
               progress: Callable[[list[dict[str, Any]]], None] | None = None
               ) -> list[dict[str, Any]]:
    """Run conversations 0 .. `conversations` - 1 (`one(n)`: the latency of each of its
    requests, in seconds), `CLIENTS` at a time, and read the resident set of every process
    of `pids` before the first and after every `sample` of them; the samples (memory,
    elapsed time, p50 and p95 of the window's requests). `until`: a wall-clock time
    (`time.time()`) after which no new window starts (the last sample's count is then the
    count run). `progress`: called with the samples so far every ten windows (a long run
    keeps what it measured if it is stopped)."""
    started = time.monotonic()
    samples: list[dict[str, Any]] = [{"conversations": 0, "seconds": 0.0,
                                      "rss_bytes": [rss_bytes(p) for p in pids],
                                      "cpu_seconds": [cpu_seconds(p) for p in pids]}]
    with ThreadPoolExecutor(CLIENTS) as pool:
        for first in range(0, conversations, sample):
            ids = range(first, min(conversations, first + sample))
            lat = sorted(t for took in pool.map(one, ids) for t in took)
            samples.append({
                "conversations": ids[-1] + 1, "rss_bytes": [rss_bytes(p) for p in pids],
                "cpu_seconds": [cpu_seconds(p) for p in pids],
                "seconds": round(time.monotonic() - started, 1),
                "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
                "p95_ms": round(lat[int(len(lat) * 0.95)] * 1000, 1)})
            print(f"  {label}: {samples[-1]}", flush=True)
            if progress is not None and (len(samples) - 1) % 10 == 0:
                progress(samples)
            if until is not None and time.time() >= until:
                break
    return samples


def log_errors(logs: list[Path]) -> int:
    """ERROR lines and tracebacks in the servers' logs (each one a failure of the run)."""
    count = 0
    for log in logs:
        text = log.read_text(errors="replace")
        count += text.count("Traceback") + text.count(" ERROR ")
    return count


def over_time(samples: list[dict[str, Any]], conversations: int) -> dict[str, Any]:
    """What `sample_run`'s samples say: per process, the resident set at the start, in the
    first and last tenth of the windows (their ratio) and the second half's least-squares
    slope (bytes kept per finished conversation); the latency's first and last tenth and
    its slope over the run."""
    half = [s for s in samples if s["conversations"] >= conversations // 2]
    windows = samples[1:]
    per_process = []
    for i in range(len(samples[0]["rss_bytes"])):
        rss = [s["rss_bytes"][i] for s in windows]
        first, last = decile_means(rss)
        per_process.append({
            "rss_start_mb": round(samples[0]["rss_bytes"][i] / 2**20, 1),
            "rss_end_mb": round(samples[-1]["rss_bytes"][i] / 2**20, 1),
            "rss_first_decile_mb": round(first / 2**20, 1),
            "rss_last_decile_mb": round(last / 2**20, 1),
            "rss_ratio_last_first": round(last / first, 3),
            "retained_bytes_per_conversation": round(slope(
                [(s["conversations"], s["rss_bytes"][i]) for s in half]))})
    p50 = [s["p50_ms"] for s in windows]
    p95 = [s["p95_ms"] for s in windows]
    p50_first, p50_last = decile_means(p50)
    cpu: dict[str, Any] = {}
    if all("cpu_seconds" in s for s in samples):
        # The servers' own CPU per conversation in each window: unlike latency, the
        # machine's load does not move it, so a cost that grows with the stored history
        # (or with what a process holds) shows as a last tenth above the first.
        per = [1000 * sum(b - a for a, b in zip(prev["cpu_seconds"], cur["cpu_seconds"],
                                                strict=True))
               / (cur["conversations"] - prev["conversations"])
               for prev, cur in itertools.pairwise(samples)]
        first_cpu, last_cpu = decile_means(per)
        cpu = {"cpu_ms_per_conversation_first_decile": round(first_cpu, 2),
               "cpu_ms_per_conversation_last_decile": round(last_cpu, 2),
               "cpu_ratio_last_first": round(last_cpu / first_cpu, 3)}
    p95_first, p95_last = decile_means(p95)
    worst = max(p["retained_bytes_per_conversation"] for p in per_process)
    return {"seconds": samples[-1]["seconds"], "per_process": per_process,
            "retained_bytes_per_conversation_worst": worst, "goal_bytes": GOAL_BYTES,
            "meets_goal": worst <= GOAL_BYTES,
            "p50_ms": round(statistics.median(p50), 1),
            "p95_ms": round(statistics.median(p95), 1),
            "p50_ms_first_decile": round(p50_first, 1),
            "p50_ms_last_decile": round(p50_last, 1),
            "p50_ratio_last_first": round(p50_last / p50_first, 3),
            "p95_ms_first_decile": round(p95_first, 1),
            "p95_ms_last_decile": round(p95_last, 1),
            "p95_ratio_last_first": round(p95_last / p95_first, 3),
            "p50_slope_ms_per_1000_conversations": round(1000 * slope(
                [(s["conversations"], s["p50_ms"]) for s in windows]), 2), **cpu}


def fleet_soak(url: str, conversations: int, tmp: Path, processes: int, *, turns: int = TURNS,
               window: str = WINDOW, sample: int = SAMPLE) -> dict[str, Any]:
    """Serve `conversations` of `turns` requests through `processes` proxy processes on one
    database, each request of a conversation to the next process; the samples and figures
    (memory read every `sample` conversations)."""
    up_port = free_port()
    upstream = ServerProcess("upstream", [sys.executable, "-m", "bench.proxy_bench",
                                          "--serve-upstream", str(up_port)], up_port,
                             log=tmp / "upstream.log", cwd=ROOT)
    proxies = []
    for i in range(processes):
        port = free_port()
        proxies.append(ServerProcess(
            f"proxy-{i}", [sys.executable, "-m", "contextfold", "proxy", "--upstream",
                           upstream.url, "--db", url, "--port", str(port), "--model-window",
                           window, "--memory-cache", str(MEMORY_CACHE)], port,
            log=tmp / f"proxy-{i}.log", cwd=ROOT, env={"CONTEXTFOLD_PROXY_SALT": "soak"}))
    try:
        upstream.ready()
        for proxy in proxies:
            proxy.ready()
        urls = [proxy.url for proxy in proxies]
        clients = [keep_alive_client() for _ in range(CLIENTS)]
        samples = sample_run(conversations, sample, [p.proc.pid for p in proxies],
                             lambda n: conversation(clients[n % CLIENTS], urls, n, turns),
                             "fleet")
        for c in clients:
            c.close()
    finally:
        for proxy in proxies:
            proxy.stop()
        upstream.stop()
    return {"conversations": conversations, "requests": conversations * turns,
            "turns_per_conversation": turns, "window": window, "processes": processes,
            "log_errors": log_errors([tmp / f"{proxy.name}.log" for proxy in proxies]),
            **over_time(samples, conversations), "samples": samples}


async def stored(url: str) -> dict[str, int]:
    """What the run left in the database: sessions (one per conversation, whichever process
    served its requests) and checkpoints."""
    from sqlalchemy import text

    from contextfold.store import open_store

    async with await open_store(url) as store, store.engine.connect() as conn:
        return {"sessions": (await conn.execute(text("SELECT count(*) FROM sessions"))
                             ).scalar_one(),
                "checkpoints": (await conn.execute(text(
                    "SELECT count(*) FROM nodes WHERE kind = 'checkpoint'"))).scalar_one()}


def fleet_main(processes: int, count: int, turns: int = TURNS, window: str = WINDOW) -> int:
    """The fleet soak; with more `turns` than the short conversations' (and a window that
    makes them compact), the long conversations' run beside it."""
    long = turns != TURNS
    url, schema = pg_url()
    out: dict[str, Any] = {"turns_per_conversation": turns, "clients": CLIENTS,
                           "memory_cache_mib": MEMORY_CACHE, "window": window,
                           "machine": platform.machine(), "cores": os.cpu_count(),
                           "python": platform.python_version()}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out["run"] = fleet_soak(url, count, Path(tmp), processes, turns=turns,
                                    window=window, sample=max(1, count // 20) if long
                                    else SAMPLE)
            out["run"]["stored"] = asyncio.run(stored(url))
    finally:
        drop_pg(schema)
    run = out["run"]
    print(f"fleet of {processes} on PostgreSQL: {count} conversations in {run['seconds']} s; "
          f"worst slope {run['retained_bytes_per_conversation_worst']} B/conversation; "
          f"RSS last/first decile {[p['rss_ratio_last_first'] for p in run['per_process']]}; "
          f"p50 {run['p50_ms_first_decile']} -> {run['p50_ms_last_decile']} ms; "
          f"log errors {run['log_errors']}")
    (FLEET_LONG_RESULTS if long else FLEET_RESULTS).write_text(json.dumps(out, indent=2) + "\n",
                                                              encoding="utf-8")
    return 0


def store_url(store: str, tmp: Path) -> tuple[str, str | None]:
    """The database a soak runs on: a SQLite file in `tmp`, or a fresh PostgreSQL schema
    (its name returned, to drop after the run)."""
    if store == "sqlite":
        return f"sqlite:///{tmp / 'soak.db'}", None
    return pg_url()


def on_each_store(run: Any, count: int, name: str, quick: bool) -> dict[str, Any]:
    """`run(url, count, tmp, label)` on SQLite, then (unless `quick`) on a fresh PostgreSQL
    schema dropped after it: the runs by store, as both soaks report them."""
    runs: dict[str, Any] = {}
    for store in ("sqlite",) if quick else STORES:
        runs[store] = one_store(run, store, count, name)
    return runs


def one_store(run: Any, store: str, count: int, name: str, **kwargs: Any) -> dict[str, Any]:
    """`run(url, count, tmp, label, **kwargs)` on a fresh database of `store`, with the
    1-minute load average before and after (the machine is shared)."""
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = store_url(store, Path(tmp))
        load = round(os.getloadavg()[0], 2)
        try:
            out = run(url, count, Path(tmp), f"{name}-{store}", **kwargs)
        finally:
            if schema is not None:
                drop_pg(schema)
    return {**out, "load_average_at_start": load,
            "load_average_at_end": round(os.getloadavg()[0], 2)}


def soak_args(argv: list[str], default: int) -> dict[str, Any]:
    """The options both soaks take: `--conversations N` (default `default`), `--store
    sqlite|postgresql` (one store; both one after the other without it), `--until HH:MM`
    (UTC: no new window of conversations after it; the count run is the one reported)."""
    count = int(argv[argv.index("--conversations") + 1]) if "--conversations" in argv \
        else default
    stores = (argv[argv.index("--store") + 1],) if "--store" in argv else STORES
    until = None
    if "--until" in argv:
        hour, minute = (int(x) for x in argv[argv.index("--until") + 1].split(":"))
        now = datetime.now(UTC)
        until = now.replace(hour=hour, minute=minute, second=0, microsecond=0).timestamp()
        if until <= now.timestamp():
            raise SystemExit(f"--until {hour:02d}:{minute:02d} UTC is already past")
    return {"count": count, "stores": stores, "until": until}


def main() -> int:
    args = sys.argv[1:]
    if "--conversations" in args and "--fleet" in args:
        return fleet_main(int(args[args.index("--fleet") + 1]),
                          int(args[args.index("--conversations") + 1]),
                          int(args[args.index("--turns") + 1]) if "--turns" in args else TURNS,
                          args[args.index("--window") + 1] if "--window" in args else WINDOW)
    quick = "--quick" in args
    opts = soak_args(args, 300 if quick else 3000)
    head: dict[str, Any] = {"turns_per_conversation": TURNS, "clients": CLIENTS,
                            "memory_cache_mib": MEMORY_CACHE, "sample_every": SAMPLE,
                            "window": WINDOW, "machine": platform.machine(),
                            "cores": os.cpu_count(), "python": platform.python_version()}
    for store in ("sqlite",) if quick else opts["stores"]:
        def keep(run: dict[str, Any], store: str = store) -> None:
            if not quick:
                merge_run(RESULTS, head, store, {**run, "complete": False})

        run = one_store(soak, store, opts["count"], "contextfold", until=opts["until"],
                        progress=keep)
        print(f"{store}: {run['conversations']} conversations in {run['seconds']} s; "
              f"{run['retained_bytes_per_conversation_worst']} B kept per conversation "
              f"(goal {GOAL_BYTES}); RSS first / last tenth "
              f"{run['per_process'][0]['rss_first_decile_mb']} / "
              f"{run['per_process'][0]['rss_last_decile_mb']} MB; p50 "
              f"{run['p50_ms_first_decile']} -> {run['p50_ms_last_decile']} ms; log errors "
              f"{run['log_errors']}")
        if not quick:
            merge_run(RESULTS, head, store, {**run, "complete": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
