"""Where a proxied request's CPU goes: the proxy app in process (ASGI both ways, no sockets),
an agent-style history resent in full plus one new turn per request, profiled with cProfile.

    python -m bench.proxy_profile [--tokens 200000] [--requests 10] [--top 25] [--db URL]
    python -m bench.proxy_profile --messages 5000 --save   # -> bench/results/proxy_profile.json

Prints the mean CPU per steady request (the first, which stores the whole history, is
reported apart) and the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contextfold.proxy import ProxyConfig
from contextfold.proxy.app import create_app

from .agent_history import TOOLS, history


async def _upstream_chat(request: Request) -> JSONResponse:
    body = await request.body()
    prompt = len(body) // 4
    return JSONResponse({
        "id": "chatcmpl-prof", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "ok, noted."}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 4,
                  "total_tokens": prompt + 4}})


UPSTREAM = Starlette(routes=[Route("/v1/chat/completions", _upstream_chat, methods=["POST"])])


async def run(tokens: int, requests: int, db: str, profile: cProfile.Profile | None,
              messages: int | None = None) -> dict[str, Any]:
    """Send `requests` requests of a growing `tokens`-token history; the proxy app's CPU
    seconds per request (the reply's background record included)."""
    app = create_app(ProxyConfig(upstream="http://upstream", windows={"*": 1_000_000}, db=db))
    if messages:
        from .proxy_bench import _n_messages

        msgs = _n_messages(messages, "prof")
    else:
        msgs = history(tokens, "prof")
    cpu: list[float] = []
    inside: list[float] = []  # CPU inside the proxy app (the client's own encoding left out)

    async def timed(scope: Any, receive: Any, send: Any) -> None:
        started = time.process_time()
        try:
            await app(scope, receive, send)
        finally:
            inside.append(time.process_time() - started)

    statements: list[str] = []
    async with app.router.lifespan_context(app):
        proxy = app.state.proxy
        from sqlalchemy import event

        store = getattr(proxy.store, "store", proxy.store)
        event.listen(store.engine.sync_engine, "before_cursor_execute",
                     lambda _c, _cur, sql, *_a: statements.append(sql))
        await proxy.client.aclose()
        proxy.client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=UPSTREAM))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=timed),
                                      base_url="http://127.0.0.1") as client:
            for i in range(requests):
                if profile is not None and i == 1:
                    profile.enable()
                inside.clear()
                statements.clear()
                r = await client.post("/v1/chat/completions", json={
                    "model": "bench-model", "messages": msgs, "tools": TOOLS,
                    "max_tokens": 64}, headers={"authorization": "Bearer sk-prof"})
                await asyncio.gather(*proxy.tasks)
                await proxy.mirror.wait_idle()
                cpu.append(sum(inside))
                per_request = list(statements)
                r.raise_for_status()
                msgs = [*msgs, r.json()["choices"][0]["message"],
                        {"role": "user", "content": f"[prof] and then {i}?"}]
        if profile is not None:
            profile.disable()
        # The one session the run made (`proxy.stats` became a method in issue 38).
        (session,) = await proxy.store.list_sessions()
        checkpoints = sum(1 for n in await proxy.store.load_tree(session.id)
                          if n.checkpoint is not None)
    steady = cpu[1:]
    heads = [sql.split()[0].upper() for sql in per_request]
    kinds = {k: heads.count(k) for k in sorted(set(heads))}
    if os.environ.get("SHOW_SQL"):
        for sql in per_request:
            print(" ".join(sql.split())[:160])
    return {"messages": len(msgs), "first_cpu_ms": cpu[0] * 1000,
            "statements_last_request": kinds, "checkpoints": checkpoints,
            "steady_cpu_ms": sorted(steady)[len(steady) // 2] * 1000 if steady else None}


RESULTS = Path(__file__).resolve().parent / "results" / "proxy_profile.json"


def top_functions(profile: cProfile.Profile, requests: int, n: int = 12) -> list[dict[str, Any]]:
    """The `n` functions with the most own time, in ms per profiled request."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    rows = []
    for (path, line, name), (_cc, calls, own, cum, _callers) in stats.items():
        where = path.split("/src/")[-1].split("site-packages/")[-1].split("lib/python3")[-1]
        rows.append({"function": f"{where}:{line}({name})" if line else name,
                     "calls_per_request": round(calls / requests, 1),
                     "own_ms": round(own * 1000 / requests, 2),
                     "cumulative_ms": round(cum * 1000 / requests, 2)})
    # The bench's own loop and the event loop's idle wait are not the proxy's work.
    rows = [r for r in rows if "proxy_profile.py" not in r["function"]
            and "epoll" not in r["function"]]
    rows.sort(key=lambda r: -r["own_ms"])
    return rows[:n]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--db", default=None)
    ap.add_argument("--messages", type=int, default=None, help="N small messages instead")
    ap.add_argument("--sort", default="cumulative")
    ap.add_argument("--save", action="store_true",
                    help=f"add this run (and its top functions) to {RESULTS.name}")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'prof.db'}"
        # CPU time, not wall time: on a shared machine another job's turn would be
        # charged to whatever function was running when it was preempted.
        profile = cProfile.Profile(time.process_time) if args.top or args.save else None
        out = asyncio.run(run(args.tokens, args.requests, db, profile, args.messages))
    print(out)
    if args.save and profile is not None:
        import json

        key = f"{args.messages} messages" if args.messages else f"{args.tokens} tokens"
        saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        saved[key] = {**out, "profiled_requests": args.requests - 1,
                      "top_own_time": top_functions(profile, args.requests - 1)}
        RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    if profile is not None:
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
